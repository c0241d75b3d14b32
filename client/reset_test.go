package client_test

import (
	"context"
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

// Reset, ResetPolicy and ResetAll clear a blocked key on its owner, from a
// client that knows only one node, and each reports what it cleared.
func TestReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\n"), 0o600))
	c := testcluster.New(t, 3, func(cfg *node.Config) { cfg.PoliciesFile = path })
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	ctx := context.Background()
	owner := c.Node(0).Ring().Owner("user:7").ID

	block := func(l client.Limit) {
		t.Helper()
		_, err := cl.CheckN(ctx, "user:7", l, l.Limit)
		require.NoError(t, err)
		d, err := cl.Check(ctx, "user:7", l)
		require.NoError(t, err)
		require.False(t, d.Allowed, "blocked before the reset")
	}
	allowed := func(l client.Limit) bool {
		t.Helper()
		d, err := cl.CheckN(ctx, "user:7", l, 0)
		require.NoError(t, err)
		return d.Allowed && d.CurrentCount == 0
	}

	// One window and algorithm: the other limits of the key are kept.
	block(perMinute)
	hourly := client.Limit{Limit: 2, Window: time.Hour, Algorithm: client.SlidingWindowLog}
	block(hourly)
	res, err := cl.Reset(ctx, "user:7", perMinute)
	require.NoError(t, err)
	assert.Equal(t, owner, res.Owner)
	assert.True(t, res.Existed())
	assert.Equal(t, 1, res.Cleared)
	assert.Equal(t, 2, res.MembersAsked, "the two other members")
	assert.Equal(t, 2, res.MembersAcknowledged)
	assert.True(t, allowed(perMinute))
	assert.False(t, allowed(hourly), "another window of the key is not cleared")

	// Nothing left to clear under that limit: not an error.
	res, err = cl.Reset(ctx, "user:7", perMinute)
	require.NoError(t, err)
	assert.False(t, res.Existed())

	// Every window and algorithm.
	block(perMinute)
	res, err = cl.ResetAll(ctx, "user:7")
	require.NoError(t, err)
	assert.Equal(t, 2, res.Cleared, "the per-minute counter and the hourly log")
	assert.True(t, allowed(perMinute))
	assert.True(t, allowed(hourly))

	// By policy: the policy's numbers name the state.
	for range 3 {
		_, err := cl.CheckPolicy(ctx, "user:7", "login")
		require.NoError(t, err)
	}
	res, err = cl.ResetPolicy(ctx, "user:7", "login")
	require.NoError(t, err)
	assert.Equal(t, 1, res.Cleared)
	d, err := cl.CheckPolicy(ctx, "user:7", "login")
	require.NoError(t, err)
	assert.True(t, d.Allowed)

	// Bad input names its field.
	for _, tc := range []struct {
		call  func() (client.ResetResult, error)
		field string
	}{
		{func() (client.ResetResult, error) { return cl.Reset(ctx, "", perMinute) }, "key"},
		{func() (client.ResetResult, error) {
			return cl.Reset(ctx, "k", client.Limit{Limit: 1, Window: 1500 * time.Microsecond})
		}, "window_ms"},
		{func() (client.ResetResult, error) { return cl.ResetPolicy(ctx, "k", "") }, "policy"},
		{func() (client.ResetResult, error) { return cl.ResetPolicy(ctx, "k", "nope") }, "policy"},
	} {
		_, err := tc.call()
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		assert.ErrorContains(t, err, tc.field)
	}
}
