package peerrpc

import (
	"context"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"time"

	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// The calls of peer.Peers, one method each: what goes on the wire and
// what comes back. Every one but the batched forwards goes through call.

// Forward sends one check to its owner, batched with others bound there,
// and returns the owner's answer and the request id of the batch that
// carried it (CallID of an error says the same). The error is for the
// transport (the owner could not be asked); an answer the owner gave,
// including a per-check error, is in the Result.
func (p *Peers) Forward(ctx context.Context, to peer.Route, req limiter.Request) (peer.Result, string, error) {
	c, err := p.get(to)
	switch {
	case err != nil:
		id := peer.RequestIDForCall(ctx)
		return peer.Result{}, id, &peer.CallError{ID: id, Err: fmt.Errorf("forward to %s: %w", to.ID, err)}
	case c.link != nil:
		return c.link.forwardOne(ctx, req)
	}
	results, id, err := p.forward(ctx, to, []*pb.CheckRequest{protoconv.ToProtoRequest(req)})
	if err != nil {
		return peer.Result{}, id, err
	}
	return protoconv.FromProtoResult(results[0]), id, nil
}

// ForwardBatch sends checks to their owner, in the member's batches with
// everything else bound there (or, with batching off, in one Forward call
// carrying the request's id), and returns one Result per check and the
// request id of a batch that carried them.
func (p *Peers) ForwardBatch(ctx context.Context, to peer.Route, reqs []limiter.Request) ([]peer.Result, string, error) {
	c, err := p.get(to)
	if err != nil {
		id := peer.RequestIDForCall(ctx)
		return nil, id, &peer.CallError{ID: id, Err: fmt.Errorf("forward %d checks to %s: %w", len(reqs), to.ID, err)}
	}
	preqs := protoconv.ToProtoRequests(reqs)
	if c.link != nil {
		return c.link.forwardAll(ctx, preqs)
	}
	results, id, err := p.forward(ctx, to, preqs)
	if err != nil {
		return nil, id, err
	}
	out := make([]peer.Result, len(results))
	for i, r := range results {
		out[i] = protoconv.FromProtoResult(r)
	}
	return out, id, nil
}

// forward makes one Forward call carrying reqs to to: with batching off,
// or to a member that has no ForwardStream.
func (p *Peers) forward(ctx context.Context, to peer.Route, reqs []*pb.CheckRequest) ([]*pb.CheckResult, string, error) {
	start := time.Now()
	results, id, err := call(p, ctx, to, p.cfg.Timeout, func(ctx context.Context, c *conn) ([]*pb.CheckResult, error) {
		resp, err := c.client.Forward(ctx, &pb.ForwardRequest{Origin: p.self, Checks: reqs})
		if err == nil && len(resp.GetResults()) != len(reqs) {
			err = fmt.Errorf("peer answered %d of %d checks", len(resp.GetResults()), len(reqs))
		}
		return resp.GetResults(), err
	}, "forward %d checks to %s", len(reqs), to.ID)
	p.observer.ForwardCall(start, len(reqs), err)
	noteBatch(trace.SpanFromContext(ctx), len(reqs), id)
	return results, id, err
}

// Handoff sends key states to their new owner and returns how many it
// merged and why it refused the others.
func (p *Peers) Handoff(ctx context.Context, to peer.Route, h peer.Handoff) (int, []string, error) {
	req := protoconv.ToProtoHandoff(p.self, h)
	// A partition's state is bigger than a check: four timeouts.
	resp, _, err := call(p, ctx, to, 4*p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.HandoffResponse, error) {
		return c.client.Handoff(ctx, req)
	}, "hand off %d keys to %s", len(h.States), to.ID)
	return int(resp.GetMerged()), resp.GetRejected(), err
}

// HandoffDone tells to that this node holds nothing of partitions it has
// not handed over.
func (p *Peers) HandoffDone(ctx context.Context, to peer.Route, partitions []int) error {
	req := &pb.HandoffDoneRequest{Origin: p.self, Partitions: make([]uint32, len(partitions))}
	for i, q := range partitions {
		req.Partitions[i] = uint32(q)
	}
	_, _, err := call(p, ctx, to, p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.HandoffDoneResponse, error) {
		return c.client.HandoffDone(ctx, req)
	}, "tell %s its %d partitions are handed over", to.ID, len(partitions))
	return err
}

// Replicate gives to, the backup of the partitions r's states belong to,
// their owner's current state, and returns what it kept.
func (p *Peers) Replicate(ctx context.Context, to peer.Route, r peer.Replication) (peer.Replicated, error) {
	req := &replicateMessage{origin: p.self, r: r}
	resp, _, err := call(p, ctx, to, 4*p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.ReplicateResponse, error) {
		out := new(pb.ReplicateResponse)
		return out, c.cc.Invoke(ctx, pb.Peer_Replicate_FullMethodName, req, out)
	}, "replicate %d keys to %s", len(r.States), to.ID)
	return protoconv.FromProtoReplicated(resp), err
}

// Relay asks via to take reqs, whose owner this node cannot reach, to
// their owner (or decide them as the owner's heir), in one call. Its
// deadline leaves room for via's own forward to the owner. A check via
// could not get decided (UNAVAILABLE) comes back as a *peer.CallError,
// for this node's fallback. A sampled caller's span goes with every
// check, as a forward's does: via's span, and the owner's under it, join
// the caller's trace.
func (p *Peers) Relay(ctx context.Context, via peer.Route, reqs []limiter.Request) ([]peer.Result, error) {
	req := &pb.ForwardRequest{Origin: p.self, Checks: protoconv.ToProtoRequests(reqs),
		Traces: sharedParents(len(reqs), sampledParent(trace.SpanFromContext(ctx)))}
	results, id, err := call(p, ctx, via, 2*p.cfg.Timeout, func(ctx context.Context, c *conn) ([]*pb.CheckResult, error) {
		resp, err := c.client.Relay(ctx, req)
		if err == nil && len(resp.GetResults()) != len(reqs) {
			err = fmt.Errorf("relay answered %d of %d checks", len(resp.GetResults()), len(reqs))
		}
		return resp.GetResults(), err
	}, "relay %d checks through %s", len(reqs), via.ID)
	if err != nil {
		return nil, err
	}
	out := make([]peer.Result, len(results))
	for i, r := range results {
		out[i] = protoconv.FromProtoResult(r)
		if peer.CodeOf(out[i].Err) == peer.Unavailable {
			out[i].Err = &peer.CallError{ID: id, Err: out[i].Err}
		}
	}
	return out, nil
}

// Reset asks member to to drop its state for r (never forwarding it
// further) and returns how many states that still counted something it
// dropped.
func (p *Peers) Reset(ctx context.Context, to peer.Route, r peer.ResetRequest) (int, error) {
	req := &pb.PeerResetRequest{Origin: p.self, Key: r.Key, WindowMs: r.Window.Milliseconds(), Algorithm: pb.Algorithm(r.Algorithm),
		AllWindows: r.AllWindows}
	req.Calendar, req.TimeZone = protoconv.CalendarToProto(r.Calendar)
	resp, _, err := call(p, ctx, to, p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.PeerResetResponse, error) {
		return c.client.Reset(ctx, req)
	}, "reset on %s", to.ID)
	return int(resp.GetCleared()), err
}

// Report asks to for its console report.
func (p *Peers) Report(ctx context.Context, to peer.Route, r peer.ReportRequest) (peer.Report, error) {
	req := protoconv.ToProtoReportRequest(p.self, r)
	resp, _, err := call(p, ctx, to, p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.ReportResponse, error) {
		return c.client.Report(ctx, req)
	}, "report from %s", to.ID)
	if err != nil {
		return peer.Report{}, err
	}
	return protoconv.FromProtoReport(resp), nil
}

// Inspect asks to for a key's state.
func (p *Peers) Inspect(ctx context.Context, to peer.Route, q peer.InspectQuery) (peer.OwnerView, error) {
	req := &pb.PeerInspectRequest{Origin: p.self, Key: q.Key, Limit: q.Limit, Hits: q.Hits}
	resp, _, err := call(p, ctx, to, p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.InspectResponse, error) {
		return c.client.Inspect(ctx, req)
	}, "inspect on %s", to.ID)
	if err != nil {
		return peer.OwnerView{}, err
	}
	return protoconv.FromProtoOwnerView(resp), nil
}

// Lease asks to, req's owner, to decide req and lend this node up to
// want.Hits hits of its limit for up to want.Duration.
func (p *Peers) Lease(ctx context.Context, to peer.Route, req limiter.Request, want peer.LeaseWant) (peer.Result, peer.LeaseGrant, error) {
	in := &pb.LeaseRequest{Origin: p.self, Check: protoconv.ToProtoRequest(req), Want: want.Hits, DurationMs: want.Duration.Milliseconds()}
	start := time.Now()
	resp, _, err := call(p, ctx, to, p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.LeaseResponse, error) {
		return c.client.Lease(ctx, in)
	}, "lease from %s", to.ID)
	p.observer.ForwardCall(start, 1, err)
	if err != nil {
		return peer.Result{}, peer.LeaseGrant{}, err
	}
	res, g := protoconv.FromProtoLease(resp)
	return res, g, nil
}

// Settle reports to what this node used of the leases it holds from it.
func (p *Peers) Settle(ctx context.Context, to peer.Route, uses []peer.LeaseUse) (int, error) {
	req := &pb.SettleRequest{Origin: p.self, Uses: protoconv.ToProtoLeaseUses(uses)}
	resp, _, err := call(p, ctx, to, p.cfg.Timeout, func(ctx context.Context, c *conn) (*pb.SettleResponse, error) {
		return c.client.Settle(ctx, req)
	}, "settle %d leases with %s", len(uses), to.ID)
	return int(resp.GetSettled()), err
}
