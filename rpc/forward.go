package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/batch"
	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/pipeline"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// fwdItem is one check waiting in a peer's batcher, with the context of
// the request it belongs to: a batch that carries only it carries its
// request id.
type fwdItem struct {
	req *pb.CheckRequest
	ctx context.Context
}

// fwdResult is the owner's answer to one check and the request id of the
// batch that carried it.
type fwdResult struct {
	res *pb.CheckResult
	id  string
}

// forwardLink carries the checks forwarded to one peer: a Batcher groups
// them, and each batch goes as one message on the peer's ForwardStream
// (one stream per pair of members, batches pipelined, answers matched by
// seq). A peer that does not serve ForwardStream (an older node during a
// rolling upgrade) is sent Forward calls instead, from then on.
type forwardLink struct {
	p       *Peers
	pr      *peer
	batcher *batch.Batcher[fwdItem, fwdResult]
	pipe    *pipeline.Pipeline[pb.ForwardRequest, pb.ForwardResponse]
	unary   atomic.Bool // the peer answered ForwardStream with UNIMPLEMENTED
}

func newForwardLink(p *Peers, pr *peer) (*forwardLink, error) {
	l := &forwardLink{p: p, pr: pr}
	var err error
	l.pipe, err = pipeline.New(pipeline.Config[pb.ForwardRequest, pb.ForwardResponse]{
		Open: func(ctx context.Context) (grpc.BidiStreamingClient[pb.ForwardRequest, pb.ForwardResponse], error) {
			return pr.client.ForwardStream(metadata.AppendToOutgoingContext(ctx, grpcapi.OriginKey, p.self))
		},
		SetSeq:  func(r *pb.ForwardRequest, seq uint64) { r.Seq = seq },
		SeqOf:   (*pb.ForwardResponse).GetSeq,
		Timeout: p.cfg.Timeout,
	})
	if err != nil {
		return nil, err
	}
	l.batcher, err = batch.New(batch.Config{Limit: p.cfg.BatchLimit, Window: p.cfg.MaxInflight}, l.send)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// send sends one batch: on the stream, or as a Forward call to a peer
// that has no stream. A batch for one request carries its id; a coalesced
// one its own.
func (l *forwardLink) send(items []fwdItem, done func([]fwdResult, error)) {
	id := ""
	if len(items) == 1 {
		id = route.RequestIDForCall(items[0].ctx)
	} else {
		id = route.NewRequestID()
	}
	reqs := make([]*pb.CheckRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	if l.unary.Load() {
		results, err := l.p.forward(context.Background(), l.pr, reqs, id)
		done(withID(results, id), err)
		return
	}
	start := time.Now()
	msg := &pb.ForwardRequest{Origin: l.p.self, Checks: reqs, RequestId: id,
		DeadlineUnixMs: start.Add(l.p.cfg.Timeout).UnixMilli()}
	l.pipe.Send(msg, func(resp *pb.ForwardResponse, err error) {
		if err == nil && len(resp.GetResults()) != len(reqs) {
			err = fmt.Errorf("peer answered %d of %d checks", len(resp.GetResults()), len(reqs))
		}
		l.p.metrics.ForwardCall(start, len(reqs), err)
		if status.Code(err) == codes.Unimplemented {
			// An older peer: Forward calls from now on, starting with this
			// batch, on a goroutine of its own (done must not block).
			l.unary.Store(true)
			go func() {
				results, err := l.p.forward(context.Background(), l.pr, reqs, id)
				done(withID(results, id), err)
			}()
			return
		}
		if err != nil {
			done(nil, &route.CallError{ID: id, Err: err})
			return
		}
		done(withID(resp.GetResults(), id), nil)
	})
}

// forwardAll sends reqs through the batcher, in as few batches as its
// limit allows, and returns their answers and the id of a batch that
// carried them. A check whose batch could not be delivered has a Result
// whose Err is a *route.CallError: the route falls back for it alone.
func (l *forwardLink) forwardAll(ctx context.Context, reqs []*pb.CheckRequest) ([]route.Result, string, error) {
	items := make([]fwdItem, len(reqs))
	for i, r := range reqs {
		items[i] = fwdItem{req: r, ctx: ctx}
	}
	res, errs, err := l.batcher.DoAll(ctx, items)
	if err != nil {
		return nil, "", fmt.Errorf("forward %d checks to %s: %w", len(reqs), l.pr.route.ID, err)
	}
	out := make([]route.Result, len(reqs))
	id := ""
	for i := range out {
		if errs[i] != nil {
			out[i].Err = asCallError(errs[i], fmt.Sprintf("forward to %s", l.pr.route.ID))
			continue
		}
		out[i], id = FromProtoResult(res[i].res), res[i].id
	}
	return out, id, nil
}

// asCallError wraps err, what the batcher says of a check it could not
// deliver, as the transport error it is.
func asCallError(err error, what string) error {
	var ce *route.CallError
	if errors.As(err, &ce) {
		return &route.CallError{ID: ce.ID, Err: fmt.Errorf("%s: %w", what, ce.Err)}
	}
	return &route.CallError{Err: fmt.Errorf("%s: %w", what, err)}
}

func withID(results []*pb.CheckResult, id string) []fwdResult {
	if results == nil {
		return nil
	}
	out := make([]fwdResult, len(results))
	for i, r := range results {
		out[i] = fwdResult{res: r, id: id}
	}
	return out
}

// close stops the link: checks not yet sent fail with batch.ErrClosed,
// batches in flight end with their answers or with pipeline.ErrClosed.
func (l *forwardLink) close() {
	l.pipe.Close()
	l.batcher.Close()
}
