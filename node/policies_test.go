package node

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/configs"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

func writePolicies(t *testing.T, path, src string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
}

// A reload changes what a policy name means, never the counts: a key near
// its limit stays there; a new limit applies to what is counted; a new
// window is another limit and starts fresh; a bad file changes nothing.
func TestReloadPoliciesKeepsState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writePolicies(t, path, "login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\n")
	// The reloads asked for here, not the watcher's, are what is counted.
	n, _ := testNode(t, func(c *Config) { c.PoliciesFile, c.WatchConfig = path, false })
	c := pb.NewRateLimiterClient(dial(t, n))
	ctx := context.Background()
	login := func() *pb.CheckResponse {
		t.Helper()
		r, err := c.Check(ctx, &pb.CheckRequest{Key: "alice", Policy: "login"})
		require.NoError(t, err)
		return r
	}
	for range 3 {
		require.True(t, login().Allowed)
	}
	require.False(t, login().Allowed)

	// Same policy, another one added: alice is still blocked.
	writePolicies(t, path, "login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\nsearch: {limit: 10, window: 1s}\n")
	require.NoError(t, n.Configs().ReloadPolicies())
	assert.Equal(t, 2, n.Configs().Policies().Len())
	r := login()
	assert.False(t, r.Allowed, "state survives the reload")
	assert.EqualValues(t, 3, r.CurrentCount)

	// A higher limit applies at once to what is counted.
	writePolicies(t, path, "login: {algorithm: SLIDING_WINDOW_LOG, limit: 4, window: 1h}\n")
	require.NoError(t, n.Configs().ReloadPolicies())
	r = login()
	assert.True(t, r.Allowed)
	assert.EqualValues(t, 3, r.CurrentCount)
	assert.False(t, login().Allowed)

	// A bad file: error with its line, old policies kept, counted.
	writePolicies(t, path, "login: {algorithm: SLIDING_WINDOW_LOG, limit: 4, window: 1h}\nsearch:\n  limit: -1\n  window: 1s\n")
	err := n.Configs().ReloadPolicies()
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+`:3: policy "search": limit must be positive, got -1`)
	_, ok := n.Configs().Policies().Lookup("search")
	assert.False(t, ok, "the old set stays")
	assert.False(t, login().Allowed)

	// Another window is another limit: alice starts fresh under it.
	writePolicies(t, path, "login: {algorithm: SLIDING_WINDOW_LOG, limit: 4, window: 2h}\n")
	require.NoError(t, n.Configs().ReloadPolicies())
	r = login()
	assert.True(t, r.Allowed)
	assert.Zero(t, r.CurrentCount)

	assert.Equal(t, 3.0, fbMetric(t, n, `peerlimit_policy_reloads_total{result="ok"}`))
	assert.Equal(t, 1.0, fbMetric(t, n, `peerlimit_policy_reloads_total{result="error"}`))
	assert.Equal(t, 1.0, fbMetric(t, n, `peerlimit_policies`))

	resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/policies")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(body), `{"name":"login","algorithm":"SLIDING_WINDOW_LOG","limit":4,"window_ms":7200000,"window":"2h0m0s"}`)
	assert.Contains(t, string(body), n.Configs().Policies().Digest)
}

func TestStartRefusesABadPolicyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	// Over the node's --max-log-limit, set here to 100.
	writePolicies(t, path, "ok: {limit: 5, window: 1m}\nbig: {algorithm: SLIDING_WINDOW_LOG, limit: 500, window: 1m}\n")
	cfg := DefaultLocalConfig("bad")
	cfg.PoliciesFile = path
	cfg.Limiter.MaxLogLimit = 100
	_, err := Start(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+`:2: policy "big": beyond this node's limits: limit 500 exceeds the SLIDING_WINDOW_LOG maximum of 100`)

	cfg.PoliciesFile = filepath.Join(t.TempDir(), "absent.yaml")
	_, err = Start(cfg)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestReloadWithoutPolicyFile(t *testing.T) {
	n, _ := testNode(t, nil)
	assert.ErrorIs(t, n.Configs().ReloadPolicies(), configs.ErrNoPolicyFile)
	assert.Nil(t, n.Configs().Policies())
	_, err := pb.NewRateLimiterClient(dial(t, n)).Check(context.Background(), &pb.CheckRequest{Key: "k", Policy: "login"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, "this node has no policies")
}

func TestPprofFlag(t *testing.T) {
	get := func(n *Node) int {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/debug/pprof/goroutine?debug=1")
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	off, _ := testNode(t, nil)
	assert.Equal(t, http.StatusNotFound, get(off))
	on, _ := testNode(t, func(c *Config) { c.ID, c.HTTP.Pprof = "node-p", true })
	assert.Equal(t, http.StatusOK, get(on))
}
