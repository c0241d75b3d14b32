package memnet_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/testkit/peertest"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const timeout = 500 * time.Millisecond

// pair is a and b on a fresh network whose calls time out after timeout:
// the network, a's Peers, b's Handler, b's Peers.
func pair(t *testing.T, seed uint64) (*memnet.Network, *memnet.Peers, *peertest.Recorder, *memnet.Peers) {
	t.Helper()
	n := memnet.New(seed, timeout)
	t.Cleanup(n.Close)
	a := n.Join("a")
	a.Serve(&peertest.Recorder{ID: "a"})
	b := &peertest.Recorder{ID: "b"}
	bPeers := n.Join("b")
	bPeers.Serve(b)
	return n, a, b, bPeers
}

var (
	toB = peer.Route{ID: "b", Addr: "b:9090"}
	req = limiter.Request{Key: "k", Limit: 5, Window: time.Second, Hits: 1}
	bg  = context.Background()
)

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
		assert.Empty(t, b.Acted())

		_, _, err = bPeers.Forward(bg, peer.Route{ID: "a"}, req)
		require.NoError(t, err, "the other way is not cut")

		n.Heal()
		_, _, err = a.Forward(bg, toB, req)
		require.NoError(t, err)
		assert.Len(t, b.Acted(), 1)
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
			out[0] = len(b.Acted())
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
		assert.Len(t, b.Acted(), 1, "not yet")
		time.Sleep(timeout)
		synctest.Wait()
		assert.Len(t, b.Acted(), 2, "acted once the delay passed, though the caller had gone")

		n.SetFaults("a", "b", memnet.Faults{})
		n.Pause("b")
		_, _, err = a.Forward(bg, toB, req)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Len(t, b.Acted(), 2, "paused")
		n.Resume("b")
		synctest.Wait()
		assert.Len(t, b.Acted(), 3, "acted on resuming")
	})
}

// Close waits for the deliveries still pending, then refuses every call.
func TestCloseWaitsForLateDeliveriesAndRefusesAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memnet.New(1, timeout)
		a := n.Join("a")
		b := &peertest.Recorder{ID: "b"}
		n.Join("b").Serve(b)
		n.Pause("b")
		done := make(chan error, 1)
		go func() {
			_, _, err := a.Forward(bg, toB, req)
			done <- err
		}()
		synctest.Wait()
		n.Close() // resumes b and waits for its delivery
		assert.Len(t, b.Acted(), 1)
		<-done
		_, _, err := a.Forward(bg, toB, req)
		assert.True(t, errors.Is(err, memnet.ErrRefused), "closed: %v", err)
	})
}
