package memnet_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a peer.Handler that notes every call it acts on.
type recorder struct {
	id string

	mu    sync.Mutex
	calls []call
}

type call struct {
	method, origin, requestID string
}

func (r *recorder) note(ctx context.Context, method, origin string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call{method, origin, peer.RequestIDFrom(ctx)})
}

func (r *recorder) acted() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) HandleForward(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
	r.note(ctx, "Forward", origin)
	out := make([]peer.Result, len(reqs))
	for i, q := range reqs {
		out[i] = peer.Result{Owner: r.id, Decision: limiter.Decision{Allowed: true, Limit: q.Limit}}
	}
	return out
}

func (r *recorder) HandleReset(ctx context.Context, origin string, q peer.ResetRequest) (int, error) {
	r.note(ctx, "Reset", origin)
	if q.Key == "" {
		return 0, &limiter.ArgumentError{Field: "key", Reason: "must not be empty"}
	}
	return 1, nil
}

func (r *recorder) HandleHandoff(ctx context.Context, origin string, states []limiter.KeyState) (int, []string) {
	r.note(ctx, "Handoff", origin)
	return len(states), nil
}

func (r *recorder) HandleReplicate(ctx context.Context, origin string, _ peer.Replication) (int, error) {
	r.note(ctx, "Replicate", origin)
	return 0, peer.ErrNoReplicas
}

func (r *recorder) HandleRelay(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
	r.note(ctx, "Relay", origin)
	return make([]peer.Result, len(reqs))
}

func (r *recorder) HandleReport(ctx context.Context, origin string, _ peer.ReportRequest) peer.Report {
	r.note(ctx, "Report", origin)
	return peer.Report{}
}

func (r *recorder) HandleInspect(ctx context.Context, origin string, _ peer.InspectQuery) (peer.OwnerView, error) {
	r.note(ctx, "Inspect", origin)
	return peer.OwnerView{}, nil
}

func (r *recorder) HandleLease(ctx context.Context, origin string, _ limiter.Request, want int64) (peer.Result, peer.LeaseGrant) {
	r.note(ctx, "Lease", origin)
	return peer.Result{Owner: r.id}, peer.LeaseGrant{ID: 1, Hits: want}
}

func (r *recorder) HandleSettle(ctx context.Context, origin string, uses []peer.LeaseUse) int {
	r.note(ctx, "Settle", origin)
	return len(uses)
}

var _ peer.Handler = (*recorder)(nil)

const timeout = 500 * time.Millisecond

// pair is a and b on a fresh network whose calls time out after timeout:
// the network, a's Peers, b's Handler, b's Peers.
func pair(t *testing.T, seed uint64) (*memnet.Network, *memnet.Peers, *recorder, *memnet.Peers) {
	t.Helper()
	n := memnet.New(seed, timeout)
	t.Cleanup(n.Close)
	a := n.Join("a")
	a.Serve(&recorder{id: "a"})
	b := &recorder{id: "b"}
	bPeers := n.Join("b")
	bPeers.Serve(b)
	return n, a, b, bPeers
}

var (
	toB = peer.Route{ID: "b", Addr: "b:9090"}
	req = limiter.Request{Key: "k", Limit: 5, Window: time.Second, Hits: 1}
	bg  = context.Background()
)

// Every call of peer.Peers reaches the member's Handler, from its caller,
// with the call's request id: the request's own when it has one.
func TestEveryCallReachesTheHandler(t *testing.T) {
	_, a, b, _ := pair(t, 1)
	ctx := peer.WithRequestID(bg, "req-1")
	res, id, err := a.Forward(ctx, toB, req)
	require.NoError(t, err)
	assert.Equal(t, "req-1", id)
	assert.Equal(t, "b", res.Owner)
	_, _, err = a.ForwardBatch(ctx, toB, []limiter.Request{req, req})
	require.NoError(t, err)
	_, err = a.Reset(ctx, toB, peer.ResetRequest{Key: "k"})
	require.NoError(t, err)
	merged, _, err := a.Handoff(ctx, toB, []limiter.KeyState{{Key: "k"}})
	require.NoError(t, err)
	assert.Equal(t, 1, merged)
	_, err = a.Relay(ctx, toB, []limiter.Request{req})
	require.NoError(t, err)
	_, err = a.Report(ctx, toB, peer.ReportRequest{})
	require.NoError(t, err)
	_, err = a.Inspect(ctx, toB, peer.InspectQuery{Key: "k"})
	require.NoError(t, err)
	_, g, err := a.Lease(ctx, toB, req, 7)
	require.NoError(t, err)
	assert.EqualValues(t, 7, g.Hits)
	settled, err := a.Settle(ctx, toB, []peer.LeaseUse{{ID: 1}})
	require.NoError(t, err)
	assert.Equal(t, 1, settled)

	var methods []string
	for _, c := range b.acted() {
		assert.Equal(t, "a", c.origin)
		assert.Equal(t, "req-1", c.requestID)
		methods = append(methods, c.method)
	}
	assert.Equal(t, []string{"Forward", "Forward", "Reset", "Handoff", "Relay", "Report", "Inspect", "Lease", "Settle"}, methods)
}

// A call the member refuses comes back as a *peer.CallError carrying the
// member's own error, its field and code intact, as over gRPC.
func TestARefusalIsTheMembersError(t *testing.T) {
	_, a, _, _ := pair(t, 1)
	_, err := a.Reset(bg, toB, peer.ResetRequest{})
	require.True(t, peer.IsCallError(err))
	assert.Equal(t, "key", peer.FieldOf(err))
	_, err = a.Replicate(bg, toB, peer.Replication{})
	require.True(t, peer.IsCallError(err))
	assert.ErrorIs(t, err, peer.ErrNoReplicas)
	assert.Equal(t, peer.FailedPrecondition, peer.CodeOf(err))
}

// A member that is not on the network refuses at once, like a closed
// port; one that is removed likewise.
func TestAbsentMembersRefuseAtOnce(t *testing.T) {
	n, a, _, _ := pair(t, 1)
	_, _, err := a.Forward(bg, peer.Route{ID: "c"}, req)
	require.True(t, peer.IsCallError(err))
	assert.ErrorIs(t, err, memnet.ErrRefused)
	n.Remove("b")
	_, _, err = a.Forward(bg, toB, req)
	assert.ErrorIs(t, err, memnet.ErrRefused)
	assert.Equal(t, 2, n.Calls("a", "b")+n.Calls("a", "c"))
}

// A cut link loses every call one way: the caller waits for its deadline
// and the member never acts. The other way still works. Heal mends it.
func TestACutLinkLosesCallsOneWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b, bPeers := pair(t, 1)
		n.Cut("a", "b")
		start := time.Now()
		_, _, err := a.Forward(bg, toB, req)
		require.True(t, peer.IsCallError(err))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, timeout, time.Since(start), "waited for the deadline, no more")
		assert.Empty(t, b.acted())

		_, _, err = bPeers.Forward(bg, peer.Route{ID: "a"}, req)
		require.NoError(t, err, "the other way is not cut")

		n.Heal()
		_, _, err = a.Forward(bg, toB, req)
		require.NoError(t, err)
		assert.Len(t, b.acted(), 1)
	})
}

// A reply dropped: the member acted, the caller never hears. A request
// dropped: the member never acted. Both decided by the seeded generator,
// so a seed replays the same fates.
func TestDroppedRequestsAndRepliesFollowTheSeed(t *testing.T) {
	fates := func(seed uint64) (acted int, answered int) {
		var out [2]int
		synctest.Test(t, func(t *testing.T) {
			n, a, b, _ := pair(t, seed)
			n.SetFaults("a", "b", memnet.Faults{DropRequests: 0.3, DropReplies: 0.3})
			for range 40 {
				if _, _, err := a.Forward(bg, toB, req); err == nil {
					out[1]++
				}
			}
			out[0] = len(b.acted())
		})
		return out[0], out[1]
	}
	acted, answered := fates(42)
	assert.Greater(t, acted, answered, "some replies were lost after the member acted")
	assert.Less(t, acted, 40, "some requests never reached it")
	assert.Positive(t, answered)
	again, answeredAgain := fates(42)
	assert.Equal(t, [2]int{acted, answered}, [2]int{again, answeredAgain}, "the same seed, the same fates")
}

// A delayed link and a paused member act late: after the delay, or once
// resumed, whether or not the caller still waits.
func TestDelayAndPauseActLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, a, b, _ := pair(t, 1)
		n.SetFaults("a", "b", memnet.Faults{Delay: 100 * time.Millisecond})
		start := time.Now()
		_, _, err := a.Forward(bg, toB, req)
		require.NoError(t, err)
		assert.Equal(t, 100*time.Millisecond, time.Since(start))

		n.SetFaults("a", "b", memnet.Faults{Delay: 2 * timeout})
		_, _, err = a.Forward(bg, toB, req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Len(t, b.acted(), 1, "not yet")
		time.Sleep(timeout)
		synctest.Wait()
		assert.Len(t, b.acted(), 2, "acted once the delay passed, though the caller had gone")

		n.SetFaults("a", "b", memnet.Faults{})
		n.Pause("b")
		_, _, err = a.Forward(bg, toB, req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Len(t, b.acted(), 2, "paused")
		n.Resume("b")
		synctest.Wait()
		assert.Len(t, b.acted(), 3, "acted on resuming")
	})
}

// Close waits for the deliveries still pending, then refuses every call.
func TestCloseWaitsForLateDeliveriesAndRefusesAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memnet.New(1, timeout)
		a := n.Join("a")
		b := &recorder{id: "b"}
		n.Join("b").Serve(b)
		n.Pause("b")
		done := make(chan error, 1)
		go func() {
			_, _, err := a.Forward(bg, toB, req)
			done <- err
		}()
		synctest.Wait()
		n.Close() // resumes b and waits for its delivery
		assert.Len(t, b.acted(), 1)
		<-done
		_, _, err := a.Forward(bg, toB, req)
		assert.True(t, errors.Is(err, memnet.ErrRefused), "closed: %v", err)
	})
}
