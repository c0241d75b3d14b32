package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/batch"
	"github.com/peerlimit/peerlimit/internal/pipeline"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// coalescer gathers the concurrent checks bound for one node into
// batches (internal/batch), and sends each as one message on the node's
// CheckStream: one long-lived stream per node, batches pipelined. A node
// that does not serve CheckStream (an older version) gets CheckBatch
// calls instead, from then on.
type coalescer struct {
	api     pb.RateLimiterClient
	timeout time.Duration
	batcher *batch.Batcher[*pb.CheckRequest, *pb.CheckResult]
	pipe    *pipeline.Pipeline[pb.CheckStreamRequest, pb.CheckStreamResponse]
	unary   atomic.Bool
}

func newCoalescer(cfg Config, api pb.RateLimiterClient) (*coalescer, error) {
	co := &coalescer{api: api, timeout: cfg.AttemptTimeout}
	var err error
	co.pipe, err = pipeline.New(pipeline.Config[pb.CheckStreamRequest, pb.CheckStreamResponse]{
		Open: func(ctx context.Context) (grpc.BidiStreamingClient[pb.CheckStreamRequest, pb.CheckStreamResponse], error) {
			return api.CheckStream(ctx)
		},
		SetSeq:  func(r *pb.CheckStreamRequest, seq uint64) { r.Seq = seq },
		SeqOf:   (*pb.CheckStreamResponse).GetSeq,
		Timeout: cfg.AttemptTimeout,
	})
	if err != nil {
		return nil, err
	}
	co.batcher, err = batch.New(batch.Config{Limit: cfg.CoalesceLimit, Window: cfg.MaxInflightBatches}, co.send)
	if err != nil {
		return nil, fmt.Errorf("peerlimit client: %w", err)
	}
	return co, nil
}

// send sends one batch, on the stream or, to an older node, as a
// CheckBatch call.
func (co *coalescer) send(reqs []*pb.CheckRequest, done func([]*pb.CheckResult, error)) {
	if co.unary.Load() {
		done(co.checkBatch(reqs))
		return
	}
	co.pipe.Send(&pb.CheckStreamRequest{Checks: reqs}, func(resp *pb.CheckStreamResponse, err error) {
		switch {
		case status.Code(err) == codes.Unimplemented:
			co.unary.Store(true)
			go func() { done(co.checkBatch(reqs)) }() // done's caller must not block
		case err != nil:
			done(nil, err)
		case resp.GetError() != nil:
			e := resp.GetError()
			done(nil, status.Error(codes.Code(e.GetCode()), e.GetMessage()))
		default:
			done(resp.GetResults(), nil)
		}
	})
}

func (co *coalescer) checkBatch(reqs []*pb.CheckRequest) ([]*pb.CheckResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), co.timeout)
	defer cancel()
	resp, err := co.api.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: reqs})
	return resp.GetResults(), err
}

func (co *coalescer) close() {
	co.pipe.Close()
	co.batcher.Close()
}
