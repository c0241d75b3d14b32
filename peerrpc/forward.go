package peerrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/batch"
	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/pipeline"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// fwdItem is one check waiting in a member's batcher, with the id of the
// request it belongs to ("" for none): a batch that carries only that
// request's checks carries its id.
type fwdItem struct {
	req *pb.CheckRequest
	rid string
	// span is the caller's forward span when its trace is sampled (the
	// owner's span joins it), else nil.
	span *trace.SpanContext
}

// fwdResult is the owner's answer to one check and the request id and
// size of the batch that carried it.
type fwdResult struct {
	res *peer.Result // in its batch's answer: a batcher's result stays small
	id  string
	n   int
}

// forwardAnswer is a ForwardResponse as the stream receives it, decoded
// straight into the results (protoconv.DecodeForwardResponse) through
// the one method internal/wire's codec asks of a message it receives: no
// message object per check.
type forwardAnswer struct {
	seq     uint64
	results []peer.Result
}

func (a *forwardAnswer) UnmarshalVT(b []byte) (err error) {
	a.seq, a.results, err = protoconv.DecodeForwardResponse(b)
	return err
}

// forwardLink carries the checks forwarded to one member: a Batcher groups
// them, and each batch goes as one message on the member's ForwardStream
// (one stream per pair of members, batches pipelined, answers matched by
// seq). A member that does not serve ForwardStream (an older node during
// a rolling upgrade) is sent Forward calls instead, from then on.
type forwardLink struct {
	p       *Peers
	c       *conn
	batcher *batch.Batcher[fwdItem, fwdResult]
	pipe    *pipeline.Pipeline[pb.ForwardRequest, forwardAnswer]
	unary   atomic.Bool // the member answered ForwardStream with UNIMPLEMENTED
	waitMS  uint32      // how long a batch waits for its answer (Config.Timeout), as the owner is told
}

func newForwardLink(p *Peers, c *conn) (*forwardLink, error) {
	l := &forwardLink{p: p, c: c, waitMS: uint32(min(p.cfg.Timeout.Milliseconds(), math.MaxUint32))}
	var err error
	l.pipe, err = pipeline.New(pipeline.Config[pb.ForwardRequest, forwardAnswer]{
		Open: func(ctx context.Context) (grpc.BidiStreamingClient[pb.ForwardRequest, forwardAnswer], error) {
			return openForwardStream(metadata.AppendToOutgoingContext(ctx, grpcapi.OriginKey, p.self), c.cc)
		},
		SetSeq:  func(r *pb.ForwardRequest, seq uint64) { r.Seq = seq },
		SeqOf:   func(a *forwardAnswer) uint64 { return a.seq },
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

// send sends one batch: on the stream, or as a Forward call to a member
// that has no stream. A batch for one request (one check, or the checks
// of one CheckBatch) carries its id; one that coalesces several requests
// an id of its own.
func (l *forwardLink) send(items []fwdItem, done func([]fwdResult, error)) {
	id := batchID(items)
	reqs := make([]*pb.CheckRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	if l.unary.Load() {
		l.sendUnary(reqs, id, done)
		return
	}
	start := time.Now()
	msg := &pb.ForwardRequest{Origin: l.p.self, Checks: reqs, RequestId: id, WaitMs: l.waitMS, Traces: traceParents(items)}
	l.pipe.Send(msg, func(resp *forwardAnswer, err error) {
		if err == nil && len(resp.results) != len(reqs) {
			err = fmt.Errorf("peer answered %d of %d checks", len(resp.results), len(reqs))
		}
		l.p.observer.ForwardCall(start, len(reqs), err)
		if status.Code(err) == codes.Unimplemented {
			// An older member: Forward calls from now on, starting with
			// this batch, on a goroutine of its own (done must not block).
			l.unary.Store(true)
			go l.sendUnary(reqs, id, done)
			return
		}
		if err != nil {
			done(nil, &peer.CallError{ID: id, Err: err})
			return
		}
		done(withID(resp.results, id), nil)
	})
}

// forwardStreamDesc is the generated code's ForwardStream.
var forwardStreamDesc = func() *grpc.StreamDesc {
	for i, d := range pb.Peer_ServiceDesc.Streams {
		if d.StreamName == "ForwardStream" {
			return &pb.Peer_ServiceDesc.Streams[i]
		}
	}
	panic("peerrpc: the generated Peer service has no ForwardStream")
}()

// openForwardStream opens a ForwardStream as the generated client does,
// its answers received as forwardAnswers.
func openForwardStream(ctx context.Context, cc *grpc.ClientConn) (grpc.BidiStreamingClient[pb.ForwardRequest, forwardAnswer], error) {
	s, err := cc.NewStream(ctx, forwardStreamDesc, pb.Peer_ForwardStream_FullMethodName, grpc.StaticMethod())
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[pb.ForwardRequest, forwardAnswer]{ClientStream: s}, nil
}

// batchID is the request id of a batch: its checks' request's, when they
// all carry the same one, else a new one.
func batchID(items []fwdItem) string {
	rid := items[0].rid
	for _, it := range items[1:] {
		if it.rid != rid {
			return peer.NewRequestID()
		}
	}
	if rid == "" {
		return peer.NewRequestID()
	}
	return rid
}

// sendUnary sends a batch as one Forward call carrying request id id.
func (l *forwardLink) sendUnary(reqs []*pb.CheckRequest, id string, done func([]fwdResult, error)) {
	results, _, err := l.p.forward(peer.WithRequestID(context.Background(), id), l.c.route, reqs)
	if err != nil {
		done(nil, err)
		return
	}
	out := make([]peer.Result, len(results))
	for i, r := range results {
		out[i] = protoconv.FromProtoResult(r)
	}
	done(withID(out, id), nil)
}

// forwardOne sends req through the batcher and returns its answer and the
// id of the batch that carried it.
func (l *forwardLink) forwardOne(ctx context.Context, req limiter.Request) (peer.Result, string, error) {
	span := trace.SpanFromContext(ctx)
	res, err := l.batcher.Do(ctx, fwdItem{req: protoconv.ToProtoRequest(req), rid: peer.RequestIDFrom(ctx), span: sampledParent(span)})
	if err != nil {
		return peer.Result{}, peer.CallID(err), asCallError(err, "forward to %s", l.c.route.ID)
	}
	noteBatch(span, res.n, res.id)
	return *res.res, res.id, nil
}

// forwardAll sends reqs through the batcher, in as few batches as its
// limit allows, and returns their answers and the id of a batch that
// carried them. A check whose batch could not be delivered has a Result
// whose Err is a *peer.CallError: the route falls back for it alone.
func (l *forwardLink) forwardAll(ctx context.Context, reqs []*pb.CheckRequest) ([]peer.Result, string, error) {
	items := make([]fwdItem, len(reqs))
	span := trace.SpanFromContext(ctx)
	rid, parent := peer.RequestIDFrom(ctx), sampledParent(span)
	for i, r := range reqs {
		items[i] = fwdItem{req: r, rid: rid, span: parent}
	}
	res, errs, err := l.batcher.DoAll(ctx, items)
	if err != nil {
		return nil, "", asCallError(err, "forward %d checks to %s", len(reqs), l.c.route.ID)
	}
	out := make([]peer.Result, len(reqs))
	id, size := "", 0
	for i := range out {
		if errs[i] != nil {
			out[i].Err = asCallError(errs[i], "forward to %s", l.c.route.ID)
			continue
		}
		out[i], id, size = *res[i].res, res[i].id, max(size, res[i].n)
	}
	noteBatch(span, size, id)
	return out, id, nil
}

// asCallError wraps err, what the batcher says of a check it could not
// deliver, as the *peer.CallError it is, keeping the id of the batch.
func asCallError(err error, whatf string, args ...any) error {
	var ce *peer.CallError
	if errors.As(err, &ce) {
		return &peer.CallError{ID: ce.ID, Err: fmt.Errorf("%s: %w", fmt.Sprintf(whatf, args...), ce.Err)}
	}
	return &peer.CallError{Err: fmt.Errorf("%s: %w", fmt.Sprintf(whatf, args...), err)}
}

func withID(results []peer.Result, id string) []fwdResult {
	if results == nil {
		return nil
	}
	out := make([]fwdResult, len(results))
	for i := range results {
		out[i] = fwdResult{res: &results[i], id: id, n: len(results)}
	}
	return out
}

// close stops the link: checks not yet sent fail with batch.ErrClosed,
// batches in flight end with their answers or with pipeline.ErrClosed.
func (l *forwardLink) close() {
	l.pipe.Close()
	l.batcher.Close()
}
