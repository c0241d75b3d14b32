// Package peertest is the contract of the peer protocol as a test: the
// same checks run over every transport (internal/testkit/memnet, and
// peerrpc over real gRPC), so that what a test on memnet shows holds over
// gRPC: every call reaches the member's peer.Handler with its origin and
// request id, a refusal keeps its code and field, a member that cannot be
// reached is a *peer.CallError.
package peertest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Recorder is a peer.Handler that notes every call it acts on and answers
// each simply: every check allowed, by ID; a reset of an empty key refused
// naming "key"; a replication refused (it keeps no replicas); a lease of
// what was asked.
type Recorder struct {
	ID string

	mu    sync.Mutex
	calls []Call
	done  []int       // the last HandoffDone's partitions
	sent  []time.Time // the stamps of the Handoff and Replicate calls, in order
}

// Call is one call a Recorder acted on.
type Call struct {
	Method, Origin, RequestID string
}

func (r *Recorder) note(ctx context.Context, method, origin string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, Call{method, origin, peer.RequestIDFrom(ctx)})
}

// Acted returns the calls acted on so far.
func (r *Recorder) Acted() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

var _ peer.Handler = (*Recorder)(nil)

// HandleForward implements peer.Handler.
func (r *Recorder) HandleForward(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
	r.note(ctx, "Forward", origin)
	return r.allow(reqs)
}

func (r *Recorder) allow(reqs []limiter.Request) []peer.Result {
	out := make([]peer.Result, len(reqs))
	for i, q := range reqs {
		out[i] = peer.Result{Owner: r.ID, Decision: limiter.Decision{Allowed: true, Limit: q.Limit, Remaining: q.Limit - q.Hits}}
	}
	return out
}

// HandleReset implements peer.Handler.
func (r *Recorder) HandleReset(ctx context.Context, origin string, q peer.ResetRequest) (int, error) {
	r.note(ctx, "Reset", origin)
	if q.Key == "" {
		return 0, &limiter.ArgumentError{Field: "key", Reason: "must not be empty"}
	}
	return 1, nil
}

// HandleHandoff implements peer.Handler.
func (r *Recorder) HandleHandoff(ctx context.Context, origin string, h peer.Handoff) (int, []string, error) {
	r.note(ctx, "Handoff", origin)
	r.stamped(h.Sent)
	return len(h.States), nil, nil
}

func (r *Recorder) stamped(sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, sent)
}

// Sent returns the stamps of the Handoff and Replicate calls acted on,
// in order.
func (r *Recorder) Sent() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.sent...)
}

// HandleHandoffDone implements peer.Handler.
func (r *Recorder) HandleHandoffDone(ctx context.Context, origin string, partitions []int) {
	r.note(ctx, "HandoffDone", origin)
	r.mu.Lock()
	r.done = append([]int(nil), partitions...)
	r.mu.Unlock()
}

// Done returns the partitions of the last HandoffDone.
func (r *Recorder) Done() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

// HandleReplicate implements peer.Handler.
func (r *Recorder) HandleReplicate(ctx context.Context, origin string, rp peer.Replication) (peer.Replicated, error) {
	r.note(ctx, "Replicate", origin)
	r.stamped(rp.Sent)
	return peer.Replicated{}, peer.ErrNoReplicas
}

// HandleRelay implements peer.Handler.
func (r *Recorder) HandleRelay(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
	r.note(ctx, "Relay", origin)
	return r.allow(reqs)
}

// HandleReport implements peer.Handler.
func (r *Recorder) HandleReport(ctx context.Context, origin string, _ peer.ReportRequest) peer.Report {
	r.note(ctx, "Report", origin)
	return peer.Report{}
}

// HandleInspect implements peer.Handler.
func (r *Recorder) HandleInspect(ctx context.Context, origin string, _ peer.InspectQuery) (peer.OwnerView, error) {
	r.note(ctx, "Inspect", origin)
	return peer.OwnerView{}, nil
}

// HandleLease implements peer.Handler.
func (r *Recorder) HandleLease(ctx context.Context, origin string, _ limiter.Request, want peer.LeaseWant) (peer.Result, peer.LeaseGrant) {
	r.note(ctx, "Lease", origin)
	return peer.Result{Owner: r.ID}, peer.LeaseGrant{ID: 1, Hits: want.Hits, Duration: want.Duration} // as asked: the test sees both arrive
}

// HandleSettle implements peer.Handler.
func (r *Recorder) HandleSettle(ctx context.Context, origin string, uses []peer.LeaseUse) int {
	r.note(ctx, "Settle", origin)
	return len(uses)
}

// Transport connects a caller to members: Serve puts a member named id on
// it, answering with h, and returns its route; Caller returns the
// peer.Peers of a member named id, which calls the others.
type Transport struct {
	Serve  func(t *testing.T, id string, h peer.Handler) peer.Route
	Caller func(t *testing.T, id string) peer.Peers
	// Absent is the route of a member that is not there: nothing listens.
	Absent func(t *testing.T) peer.Route
}

// Conformance runs the protocol's contract, each part over a fresh
// transport from newTransport.
func Conformance(t *testing.T, newTransport func(t *testing.T) Transport) {
	t.Run("every call reaches the handler", func(t *testing.T) { everyCall(t, newTransport(t)) })
	t.Run("a refusal is the member's error", func(t *testing.T) { refusals(t, newTransport(t)) })
	t.Run("an absent member is a call error", func(t *testing.T) { absent(t, newTransport(t)) })
	t.Run("a state-carrying call's stamp arrives", func(t *testing.T) { stamps(t, newTransport(t)) })
}

var req = limiter.Request{Key: "k", Limit: 5, Window: time.Second, Algorithm: limiter.SlidingWindowLog, Hits: 1}

// everyCall makes every call of peer.Peers once, with one request id.
func everyCall(t *testing.T, tr Transport) {
	b := &Recorder{ID: "b"}
	to := tr.Serve(t, "b", b)
	a := tr.Caller(t, "a")
	ctx := peer.WithRequestID(context.Background(), "req-1")

	res, id, err := a.Forward(ctx, to, req)
	require.NoError(t, err)
	assert.Equal(t, "req-1", id, "a call made for one request carries its id")
	assert.Equal(t, peer.Result{Owner: "b", Decision: limiter.Decision{Allowed: true, Limit: 5, Remaining: 4}}, res)
	results, _, err := a.ForwardBatch(ctx, to, []limiter.Request{req, req})
	require.NoError(t, err)
	assert.Len(t, results, 2)
	cleared, err := a.Reset(ctx, to, peer.ResetRequest{Key: "k", Window: time.Second})
	require.NoError(t, err)
	assert.Equal(t, 1, cleared)
	merged, _, err := a.Handoff(ctx, to, peer.Handoff{States: []limiter.KeyState{{Key: "k", Window: time.Second, WindowID: 1, Curr: 1}}})
	require.NoError(t, err)
	assert.Equal(t, 1, merged)
	require.NoError(t, a.HandoffDone(ctx, to, []int{3, 7}))
	assert.Equal(t, []int{3, 7}, b.Done())
	relayed, err := a.Relay(ctx, to, []limiter.Request{req})
	require.NoError(t, err)
	assert.Equal(t, "b", relayed[0].Owner)
	_, err = a.Report(ctx, to, peer.ReportRequest{Top: 3})
	require.NoError(t, err)
	_, err = a.Inspect(ctx, to, peer.InspectQuery{Key: "k"})
	require.NoError(t, err)
	_, g, err := a.Lease(ctx, to, req, peer.LeaseWant{Hits: 7, Duration: 1600 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, peer.LeaseGrant{ID: 1, Hits: 7, Duration: 1600 * time.Millisecond}, g, "the hits and the duration asked for arrive")
	settled, err := a.Settle(ctx, to, []peer.LeaseUse{{ID: 1, Used: 2}})
	require.NoError(t, err)
	assert.Equal(t, 1, settled)

	var methods []string
	for _, c := range b.Acted() {
		assert.Equal(t, "a", c.Origin, c.Method)
		assert.Equal(t, "req-1", c.RequestID, c.Method)
		methods = append(methods, c.Method)
	}
	assert.Equal(t, []string{"Forward", "Forward", "Reset", "Handoff", "HandoffDone", "Relay", "Report", "Inspect", "Lease", "Settle"}, methods)
}

// refusals: a call the member refuses comes back as a *peer.CallError
// carrying the member's code, and for invalid input its field.
func refusals(t *testing.T, tr Transport) {
	to := tr.Serve(t, "b", &Recorder{ID: "b"})
	a := tr.Caller(t, "a")
	_, err := a.Reset(context.Background(), to, peer.ResetRequest{Window: time.Second})
	require.True(t, peer.IsCallError(err), "%v", err)
	assert.Equal(t, "key", peer.FieldOf(err))
	assert.Equal(t, peer.InvalidArgument, peer.CodeOf(err))
	_, err = a.Replicate(context.Background(), to, peer.Replication{})
	require.True(t, peer.IsCallError(err), "%v", err)
	assert.Equal(t, peer.FailedPrecondition, peer.CodeOf(err))
}

// stamps: the sender's clock reading that a Handoff and a Replicate carry
// (the receiver rebases their states by it) arrives to the millisecond,
// the wire's unit; no stamp (an older sender) arrives as none.
func stamps(t *testing.T, tr Transport) {
	b := &Recorder{ID: "b"}
	to := tr.Serve(t, "b", b)
	a := tr.Caller(t, "a")
	sent := time.UnixMilli(1_700_000_123_456)
	states := []limiter.KeyState{{Key: "k", Window: time.Second, WindowID: 1, Curr: 1}}
	_, _, err := a.Handoff(context.Background(), to, peer.Handoff{Sent: sent, States: states})
	require.NoError(t, err)
	_, _, err = a.Handoff(context.Background(), to, peer.Handoff{States: states})
	require.NoError(t, err)
	_, err = a.Replicate(context.Background(), to, peer.Replication{Sent: sent.Add(time.Millisecond), States: states})
	require.Equal(t, peer.FailedPrecondition, peer.CodeOf(err), "%v", err)
	got := b.Sent()
	require.Len(t, got, 3)
	assert.True(t, got[0].Equal(sent), "handoff: %v", got[0])
	assert.True(t, got[1].IsZero(), "no stamp: %v", got[1])
	assert.True(t, got[2].Equal(sent.Add(time.Millisecond)), "replicate: %v", got[2])
}

// absent: a member nothing answers for fails the call, as a *CallError
// naming the request id it carried.
func absent(t *testing.T, tr Transport) {
	a := tr.Caller(t, "a")
	ctx, cancel := context.WithTimeout(peer.WithRequestID(context.Background(), "req-2"), 5*time.Second)
	defer cancel()
	_, id, err := a.Forward(ctx, tr.Absent(t), req)
	require.True(t, peer.IsCallError(err), "%v", err)
	assert.Equal(t, "req-2", peer.CallID(err))
	assert.Equal(t, "req-2", id)
	_, err = a.Reset(ctx, tr.Absent(t), peer.ResetRequest{Key: "k", Window: time.Second})
	assert.True(t, peer.IsCallError(err), "%v", err)
}
