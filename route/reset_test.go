package route_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/reset"
)

// exhaust checks req through m until it is denied.
func exhaust(t *testing.T, m *member, req limiter.Request) {
	t.Helper()
	for range req.Limit + 1 {
		res := m.svc.Check(bg, req)
		require.NoError(t, res.Err)
		if !res.Decision.Allowed {
			return
		}
	}
	t.Fatalf("%s never denied", req.Key)
}

func resetOf(req limiter.Request) peer.ResetRequest {
	return peer.ResetRequest{Key: req.Key, Window: req.Window, Algorithm: req.Algorithm}
}

// A reset received by a member that is not the owner: the owner clears
// its state, and every other copy (the receiver's own, and one a third
// member made with its fallback) is dropped. Every member but the owner
// counts as asked, whichever member received the reset.
func TestResetClearsTheOwnerAndEveryCopy(t *testing.T) {
	c := newCluster(t, three)
	n1, n2, n3 := c.members["n1"], c.members["n2"], c.members["n3"]
	req := logReq(c.key(t, "n2", "blocked"), 3, time.Hour)
	exhaust(t, n1, req)
	// Copies, as the local fallback leaves them while the owner is cut off.
	for _, m := range []*member{n1, n3} {
		_, err := m.store.Check(c.clock.Now(), req)
		require.NoError(t, err)
	}

	got, err := n1.svc.Reset(bg, resetOf(req))
	require.NoError(t, err)
	assert.Equal(t, reset.Result{Owner: "n2", Cleared: 1, MembersAsked: 2, MembersAcknowledged: 2, CopiesCleared: 2}, got)
	for _, m := range []*member{n1, n2, n3} {
		assert.Zero(t, m.held(t, c.clock.Now(), req), "%s holds nothing for the key", m.id)
	}
	assert.True(t, n3.svc.Check(bg, req).Decision.Allowed, "the block is lifted")

	// Received by the owner, every limit of the key: the same count of
	// members asked.
	exhaust(t, n3, req)
	_, err = n1.store.Check(c.clock.Now(), counterReq(req.Key, 1, time.Second))
	require.NoError(t, err)
	got, err = n2.svc.Reset(bg, peer.ResetRequest{Key: req.Key, AllWindows: true})
	require.NoError(t, err)
	assert.Equal(t, reset.Result{Owner: "n2", Cleared: 1, MembersAsked: 2, MembersAcknowledged: 2, CopiesCleared: 1}, got)
	st := n1.store.Stats()
	assert.Zero(t, st.CounterKeys+st.LogKeys)

	logged := n2.logs.Find("key reset")
	require.Len(t, logged, 1, "an operator's action leaves a trace")
	assert.Equal(t, "true", logged[0].Attrs["all_windows"])
}

// With the owner unreachable a reset fails UNAVAILABLE and clears
// nothing, not even the receiver's own copy: the caller must retry, and
// the state stays consistent with what it is told.
func TestResetWithTheOwnerUnreachableClearsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		n1 := c.members["n1"]
		req := logReq(c.key(t, "n2", "k"), 2, time.Hour)
		c.net.Cut("n1", "n2")
		exhaust(t, n1, req) // by the fallback: a copy here

		_, err := n1.svc.Reset(bg, resetOf(req))
		assert.ErrorIs(t, err, peer.ErrOwnerUnreachable)
		assert.Equal(t, peer.Unavailable, peer.CodeOf(err))
		assert.ErrorContains(t, err, "owner n2")
		assert.EqualValues(t, 2, n1.held(t, c.clock.Now(), req), "nothing cleared")
	})
}

// A member that does not answer is counted, not fatal: the owner has
// cleared, and the caller learns that a copy may come back.
func TestResetCountsMembersThatDoNotAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		n1 := c.members["n1"]
		req := logReq(c.key(t, "n1", "k"), 1, time.Hour)
		exhaust(t, n1, req)
		c.net.Cut("n1", "n3")
		got, err := n1.svc.Reset(bg, resetOf(req))
		require.NoError(t, err)
		assert.Equal(t, reset.Result{Owner: "n1", Cleared: 1, MembersAsked: 2, MembersAcknowledged: 1}, got)
		warned := n1.logs.Find("a member did not drop its copy")
		require.Len(t, warned, 1)
		assert.Equal(t, "n3", warned[0].Attrs["member"])
		assert.Equal(t, warned[0].Attrs["request_id"], n1.logs.Find("key reset")[0].Attrs["request_id"], "one id for the reset's calls and lines")
	})
}

// An owner that refuses the reset (its caps differ) says why, naming the
// field; the reset is not reported as the owner's unavailability.
func TestResetRefusedByTheOwnerNamesTheField(t *testing.T) {
	c := newCluster(t, three, func(o *clusterOpts) {
		o.limiter = func(id string, l *limiter.Config) {
			if id == "n2" {
				l.MaxKeyBytes = 8
			}
		}
	})
	_, err := c.members["n1"].svc.Reset(bg, peer.ResetRequest{Key: c.key(t, "n2", "longer-than-eight"), AllWindows: true})
	assert.Equal(t, peer.InvalidArgument, peer.CodeOf(err), "%v", err)
	assert.Equal(t, "key", peer.FieldOf(err))
	assert.NotErrorIs(t, err, peer.ErrOwnerUnreachable)
}

// NewResetRequest names one limit of the key or all of them, never a mix,
// and names the extra field.
func TestNewResetRequestNamesTheExtraField(t *testing.T) {
	c := newCluster(t, []string{"n1"})
	svc := c.members["n1"].svc
	month, err := limiter.NewCalendar(limiter.CalendarMonth, "Europe/Paris")
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		windowMS int64
		algoSet  bool
		cal      limiter.Calendar
		policy   string
		all      bool
		key      string
		field    string
	}{
		{"no key", 1000, false, 0, "", false, "", "key"},
		{"no window", 0, false, 0, "", false, "k", "window_ms"},
		{"negative window", -5, false, 0, "", false, "k", "window_ms"},
		{"huge window", 1 << 62, false, 0, "", false, "k", "window_ms"},
		{"unknown policy", 0, false, 0, "nope", false, "k", "policy"},
		{"all and window", 1000, false, 0, "", true, "k", "window_ms"},
		{"all and algorithm", 0, true, 0, "", true, "k", "algorithm"},
		{"all and policy", 0, false, 0, "p", true, "k", "policy"},
		{"all and no key", 0, false, 0, "", true, "", "key"},
		{"all and calendar", 0, false, month, "", true, "k", "calendar"},
		{"policy and calendar", 0, false, month, "p", false, "k", "calendar"},
		{"calendar and window", 1000, false, month, "", false, "k", "window_ms"},
		{"calendar log", 0, true, month, "", false, "k", "algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.NewResetRequest(tc.key, tc.windowMS, limiter.SlidingWindowLog, tc.algoSet, tc.cal, tc.policy, tc.all)
			assert.Equal(t, tc.field, peer.FieldOf(err), "%v", err)
		})
	}
	r, err := svc.NewResetRequest("k", 1500, limiter.SlidingWindowLog, true, 0, "", false)
	require.NoError(t, err)
	assert.Equal(t, peer.ResetRequest{Key: "k", Window: 1500 * time.Millisecond, Algorithm: limiter.SlidingWindowLog}, r)
	r, err = svc.NewResetRequest("k", 0, limiter.SlidingWindowCounter, false, month, "", false)
	require.NoError(t, err)
	assert.Equal(t, peer.ResetRequest{Key: "k", Calendar: month}, r)
}
