package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
)

// hourLog counts exactly, and no test outlives its window.
var hourLog = client.Limit{Limit: 10, Window: time.Hour, Algorithm: client.SlidingWindowLog}

func peekCount(t *testing.T, cl *client.Client, key string, l client.Limit) int64 {
	t.Helper()
	d, err := cl.CheckN(context.Background(), key, l, 0)
	require.NoError(t, err)
	return d.CurrentCount
}

// Reservations go through every path a check takes: coalesced on the
// node's stream, one unary call each, and forwarded by a node that does
// not own the key. The op, token and TTL must survive each.
func TestReserveSettleRelease(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	ctx := context.Background()
	for name, cfg := range map[string]client.Config{
		"coalesced":  {Endpoints: endpoints(c.Node(0))},
		"unary":      {Endpoints: endpoints(c.Node(0)), DisableCoalescing: true},
		"forwarded":  {Endpoints: endpoints(c.Live()...), DisableOwnerRouting: true},
		"both plain": {Endpoints: endpoints(c.Live()...), DisableOwnerRouting: true, DisableCoalescing: true},
	} {
		t.Run(name, func(t *testing.T) {
			cl := newClient(t, cfg)
			key := "resv:" + name
			r, err := cl.Reserve(ctx, key, hourLog, 6, 0)
			require.NoError(t, err)
			require.True(t, r.Allowed)
			assert.EqualValues(t, 4, r.Remaining)
			assert.Equal(t, c.Node(0).Ring().Owner(key).ID, r.Owner)
			assert.WithinDuration(t, time.Now().Add(time.Minute), r.Expires, 5*time.Second, "the nodes' default TTL")
			assert.Equal(t, client.Reservation{Decision: r.Decision, Token: r.Token, Expires: r.Expires, Key: key, Limit: hourLog, Hits: 6}, r)

			denied, err := cl.Reserve(ctx, key, hourLog, 6, 30*time.Second)
			require.NoError(t, err, "a denial is an answer")
			assert.False(t, denied.Allowed)
			assert.Empty(t, denied.Token)
			assert.Positive(t, denied.RetryAfter)
			// As x/time/rate's Cancel: closing a denied reservation does nothing.
			for _, closeIt := range []func() (client.Settlement, error){
				func() (client.Settlement, error) { return cl.Settle(ctx, denied, 1) },
				func() (client.Settlement, error) { return cl.Release(ctx, denied) },
				func() (client.Settlement, error) { return cl.Release(ctx, client.Reservation{}) },
			} {
				s, err := closeIt()
				require.NoError(t, err)
				assert.Equal(t, client.Settlement{}, s)
			}

			s, err := cl.Settle(ctx, r, 2)
			require.NoError(t, err)
			assert.Equal(t, client.SettledNow, s.Outcome)
			assert.EqualValues(t, 4, s.Refunded)
			assert.Zero(t, s.Over)
			assert.True(t, s.Allowed)
			again, err := cl.Settle(ctx, r, 2)
			require.NoError(t, err)
			assert.Equal(t, client.SettledBefore, again.Outcome, "a retry counts once")
			assert.EqualValues(t, 4, again.Refunded, "and repeats the first answer")
			_, err = cl.Settle(ctx, r, 5)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "a settle at another cost is no retry: %v", err)
			assert.ErrorContains(t, err, "cost of 2 (refunded 4, over 0)")
			released, err := cl.Release(ctx, r)
			require.NoError(t, err, "a deferred release after the settle")
			assert.Equal(t, client.SettledBefore, released.Outcome)
			assert.EqualValues(t, 4, released.Refunded)
			assert.EqualValues(t, 2, peekCount(t, cl, key, hourLog))

			r2, err := cl.Reserve(ctx, key, hourLog, 8, time.Minute)
			require.NoError(t, err)
			require.True(t, r2.Allowed, "the settle gave 4 back")
			s, err = cl.Release(ctx, r2)
			require.NoError(t, err)
			assert.EqualValues(t, 8, s.Refunded)
			assert.Equal(t, "SETTLED_NOW", s.Outcome.String())
			assert.EqualValues(t, 2, peekCount(t, cl, key, hourLog))

			// A cost above the reservation is charged as debt.
			r3, err := cl.Reserve(ctx, key, hourLog, 5, 0)
			require.NoError(t, err)
			s, err = cl.Settle(ctx, r3, 12)
			require.NoError(t, err)
			assert.EqualValues(t, 4, s.Over, "2 + 12 is 4 past 10")
			assert.False(t, s.Allowed)
			assert.EqualValues(t, 14, peekCount(t, cl, key, hourLog))
			d, err := cl.Check(ctx, key, hourLog)
			require.NoError(t, err)
			assert.False(t, d.Allowed, "in debt")

			// A token settles only the limit it was taken on.
			r4, err := cl.Reserve(ctx, key+":other", hourLog, 1, 0)
			require.NoError(t, err)
			r4.Key = key
			_, err = cl.Settle(ctx, r4, 1)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.ErrorContains(t, err, "reservation")
		})
	}
}

func TestReserveInvalidInput(t *testing.T) {
	c := testcluster.New(t, 1, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	ctx := context.Background()
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"estimate 0", "hits", func() error { _, err := cl.Reserve(ctx, "k", hourLog, 0, 0); return err }},
		{"estimate over the limit", "hits", func() error { _, err := cl.Reserve(ctx, "k", hourLog, 11, 0); return err }},
		{"ttl not whole ms", "ttl_ms", func() error { _, err := cl.Reserve(ctx, "k", hourLog, 1, 1500*time.Microsecond); return err }},
		{"ttl over the maximum", "ttl_ms", func() error { _, err := cl.Reserve(ctx, "k", hourLog, 1, 2*time.Hour); return err }},
		{"window not whole ms", "window_ms", func() error {
			_, err := cl.Reserve(ctx, "k", client.Limit{Limit: 1, Window: time.Microsecond}, 1, 0)
			return err
		}},
		{"negative cost", "hits", func() error {
			r, err := cl.Reserve(ctx, "neg", hourLog, 1, 0)
			require.NoError(t, err)
			_, err = cl.Settle(ctx, r, -1)
			return err
		}},
		{"charge of 0", "hits", func() error { _, err := cl.Charge(ctx, "k", hourLog, 0); return err }},
		{"refund of 0", "hits", func() error { _, err := cl.Refund(ctx, "k", hourLog, 0); return err }},
	} {
		err := tc.call()
		assert.Equal(t, codes.InvalidArgument, status.Code(err), tc.name)
		assert.ErrorContains(t, err, "invalid "+tc.field, tc.name)
	}
}

func TestRefundAndCharge(t *testing.T) {
	c := testcluster.New(t, 2, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	ctx := context.Background()
	l := client.Limit{Limit: 3, Window: time.Hour, Algorithm: client.SlidingWindowLog}

	d, err := cl.Charge(ctx, "debt", l, 5)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "5 did not fit in 3, and were counted anyway")
	assert.EqualValues(t, 2, d.Over)
	assert.Zero(t, d.Remaining)
	assert.Positive(t, d.RetryAfter, "how long the debt blocks the key")
	d, err = cl.Check(ctx, "debt", l)
	require.NoError(t, err)
	assert.False(t, d.Allowed)

	d, err = cl.Refund(ctx, "debt", l, 10)
	require.NoError(t, err)
	assert.EqualValues(t, 5, d.Refunded, "never below what the window holds")
	assert.EqualValues(t, 3, d.Remaining)
	assert.Zero(t, d.Over)
	d, err = cl.Refund(ctx, "nothing-here", l, 1)
	require.NoError(t, err)
	assert.Zero(t, d.Refunded, "no credit")

	d, err = cl.Charge(ctx, "fits", l, 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Zero(t, d.Over)
	assert.EqualValues(t, 1, d.Remaining)
}

func TestReservePolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("tokens: {algorithm: SLIDING_WINDOW_LOG, limit: 100, window: 1h}\n"), 0o600))
	c := testcluster.New(t, 2, func(cfg *node.Config) { cfg.PoliciesFile = path })
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	ctx := context.Background()
	inline := client.Limit{Limit: 100, Window: time.Hour, Algorithm: client.SlidingWindowLog}

	r, err := cl.ReservePolicy(ctx, "u", "tokens", 40, 0)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	assert.Equal(t, "tokens", r.Policy)
	s, err := cl.Settle(ctx, r, 15)
	require.NoError(t, err)
	assert.EqualValues(t, 25, s.Refunded)
	assert.EqualValues(t, 15, peekCount(t, cl, "u", inline), "the policy's state is its numbers'")

	d, err := cl.ChargePolicy(ctx, "u", "tokens", 90)
	require.NoError(t, err)
	assert.EqualValues(t, 5, d.Over)
	d, err = cl.RefundPolicy(ctx, "u", "tokens", 10)
	require.NoError(t, err)
	assert.EqualValues(t, 10, d.Refunded)
	assert.EqualValues(t, 95, peekCount(t, cl, "u", inline))

	_, err = cl.ReservePolicy(ctx, "u", "nope", 1, 0)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, "policy")
}

// keysOnOwners returns n keys owned by n different members.
func keysOnOwners(t *testing.T, c *testcluster.Cluster, prefix string, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	var keys []string
	for i := 0; len(keys) < n && i < 1000; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if o := c.Node(0).Ring().Owner(k).ID; !seen[o] {
			seen[o] = true
			keys = append(keys, k)
		}
	}
	require.Len(t, keys, n)
	return keys
}

func TestCheckAll(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	ctx := context.Background()
	l := client.Limit{Limit: 2, Window: time.Hour, Algorithm: client.SlidingWindowLog}
	keys := keysOnOwners(t, c, "all", 3)
	reqs := []client.Request{{Key: keys[0], Limit: l}, {Key: keys[1], Limit: l, Hits: 2}, {Key: keys[2], Limit: l}}

	res, admitted, err := cl.CheckAll(ctx, reqs)
	require.NoError(t, err)
	assert.True(t, admitted)
	require.Len(t, res, 3)
	for i, r := range res {
		require.NoError(t, r.Err)
		assert.True(t, r.Allowed, "check %d", i)
		assert.Equal(t, c.Node(0).Ring().Owner(keys[i]).ID, r.Owner)
	}

	// keys[1] is full: nothing of the batch counts, anywhere.
	res, admitted, err = cl.CheckAll(ctx, reqs)
	require.NoError(t, err)
	assert.False(t, admitted)
	for i, r := range res {
		require.NoError(t, r.Err)
		assert.False(t, r.Allowed, "check %d: all denied", i)
	}
	assert.Positive(t, res[1].RetryAfter, "the check that denied the batch")
	assert.EqualValues(t, 1, peekCount(t, cl, keys[0], l))
	assert.EqualValues(t, 2, peekCount(t, cl, keys[1], l))
	assert.EqualValues(t, 1, peekCount(t, cl, keys[2], l))

	// An invalid item fails the whole call, naming it.
	for _, tc := range []struct {
		bad  client.Request
		want string
	}{
		{client.Request{Key: "x", Limit: client.Limit{Limit: 1, Window: time.Microsecond}}, "invalid checks[1].window_ms"},
		{client.Request{Key: "", Limit: l}, "invalid checks[1].key"},
		{client.Request{Key: "x", Limit: l, Peek: true}, "invalid checks[1].hits"},
	} {
		_, _, err = cl.CheckAll(ctx, []client.Request{{Key: "y", Limit: l}, tc.bad})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), tc.want)
		assert.ErrorContains(t, err, tc.want)
	}
	assert.Zero(t, peekCount(t, cl, "y", l), "nothing counted")

	res, admitted, err = cl.CheckAll(ctx, nil)
	require.NoError(t, err)
	assert.True(t, admitted)
	assert.Empty(t, res)
}
