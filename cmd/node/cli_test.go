package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
)

// cli runs the binary's command line in-process and returns its exit
// code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return cliEnv(t, nil, args...)
}

func cliEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := dispatch(args, func(k string) string { return env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// policyCluster is 3 real nodes sharing one policy file.
func policyCluster(t *testing.T) *testcluster.Cluster {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("login: {algorithm: SLIDING_WINDOW_LOG, limit: 2, window: 1h}\n"), 0o600))
	return testcluster.New(t, 3, func(c *node.Config) { c.PoliciesFile = path })
}

func TestCLICheck(t *testing.T) {
	c := policyCluster(t)
	addr := c.Node(0).GRPCAddr()
	owner := c.Node(0).Ring().Owner("user:42").ID

	code, out, errOut := cli(t, "check", "--addr", addr, "--policy", "login", "user:42")
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `^allowed: 1 of 2 remaining, resets in 1h0m0s; decided by `+owner+"\n$", out)

	// Flags after the key work too; JSON is the HTTP API's shape.
	code, out, errOut = cli(t, "check", "user:42", "--addr", addr, "--policy", "login", "--json")
	require.Equal(t, exitOK, code, errOut)
	var resp httpapi.CheckResponse
	require.NoError(t, json.Unmarshal([]byte(out), &resp))
	assert.Equal(t, httpapi.CheckResponse{Allowed: true, Limit: 2, Remaining: 0, CurrentCount: 1, ResetAfterMS: resp.ResetAfterMS,
		RefillAfterMS: resp.RefillAfterMS, Owner: owner}, resp)
	assert.Positive(t, resp.RefillAfterMS, "the log holds hits")
	assert.LessOrEqual(t, resp.RefillAfterMS, resp.ResetAfterMS, "the first hit leaves no later than the newest")

	// Denied is its own exit code.
	code, out, _ = cli(t, "check", "--addr", addr, "--limit", "2", "--window", "1h", "--algorithm", "sliding_window_log", "user:42")
	assert.Equal(t, exitDenied, code)
	assert.Regexp(t, `^denied: retry after \S+ \(count 2 of 2\); decided by `+owner, out)

	// A peek of the counter under another window: allowed, consumes nothing.
	code, out, _ = cli(t, "check", "--addr", addr, "--limit", "5", "--window", "1m", "--hits", "0", "user:42")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "allowed: 5 of 5 remaining")

	// The node's refusal is an error, with its code and message.
	code, _, errOut = cli(t, "check", "--addr", addr, "--policy", "nope", "user:42")
	assert.Equal(t, exitError, code)
	assert.Equal(t, "peerlimit-node check: InvalidArgument: invalid policy: unknown policy \"nope\"\n", errOut)
}

func TestCLIMembersAndRing(t *testing.T) {
	c := policyCluster(t)
	addr := c.Node(1).GRPCAddr()

	code, out, errOut := cli(t, "members", "--addr", addr)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "as seen by node-1 (271 partitions)")
	for _, n := range c.Live() {
		assert.Regexp(t, n.ID()+`\s+alive\s+`+n.GRPCAddr()+`\s+`+n.GossipAddr()+`\s+\d+ \(\d+%\)\s+policies=[0-9a-f]{12}\n`, out)
	}

	code, out, errOut = cli(t, "members", "--addr", addr, "--json")
	require.Equal(t, exitOK, code, errOut)
	var m httpapi.Members
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	assert.Equal(t, "node-1", m.Self)
	total := 0
	for _, mm := range m.Members {
		assert.Equal(t, c.Node(0).Ring().Partitions()[mm.ID], mm.Partitions)
		assert.Len(t, mm.Config["policies"], 12, "the short digest each member advertises, as GET /v1/members shows it")
		assert.Empty(t, mm.ConfigDiffers, "one policy file for all")
		total += mm.Partitions
	}
	assert.Equal(t, 271, total)

	keys := []string{"user:1", "user:2", "user:3", "-starts-with-a-dash"}
	code, out, errOut = cli(t, append([]string{"ring", "--addr", addr, "--json", "--"}, keys...)...)
	require.Equal(t, exitOK, code, errOut)
	var entries []ringEntry
	require.NoError(t, json.Unmarshal([]byte(out), &entries))
	require.Len(t, entries, len(keys))
	for i, e := range entries {
		want := c.Node(2).Ring().Owner(keys[i])
		assert.Equal(t, ringEntry{Key: keys[i], Partition: c.Node(2).Store().Transfer().PartitionOf(keys[i]), Owner: want.ID, GRPCAddr: want.Addr}, e)
	}
	code, out, _ = cli(t, "ring", "--addr", addr, "user:1")
	assert.Equal(t, exitOK, code)
	assert.Regexp(t, `^KEY\s+PARTITION\s+OWNER\s+GRPC\nuser:1\s+\d+\s+node-\d\s+127\.0\.0\.1:\d+\n$`, out)
}

func TestCLIReset(t *testing.T) {
	c := policyCluster(t)
	n0 := c.Node(0)
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("blocked:%d", i); n0.Ring().Owner(k).ID == "node-2" {
			key = k
		}
	}
	addr := n0.GRPCAddr()
	for range 2 {
		code, _, _ := cli(t, "check", "--addr", addr, "--policy", "login", key)
		require.Equal(t, exitOK, code)
	}
	code, _, _ := cli(t, "check", "--addr", addr, "--policy", "login", key)
	require.Equal(t, exitDenied, code)

	code, out, errOut := cli(t, "reset", "--addr", addr, "--policy", "login", key)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "reset "+key+" on node-2: cleared 1 state(s); 2 of 2 other members answered; 0 copies dropped elsewhere\n", out)
	code, _, _ = cli(t, "check", "--addr", addr, "--policy", "login", key)
	assert.Equal(t, exitOK, code, "the block is lifted")

	code, out, errOut = cli(t, "reset", "--addr", addr, "--all-windows", "--json", key)
	require.Equal(t, exitOK, code, errOut)
	var r httpapi.ResetResponse
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, httpapi.ResetResponse{Owner: "node-2", Existed: true, Cleared: 1, MembersAsked: 2, MembersAcknowledged: 2}, r)

	code, out, _ = cli(t, "reset", "--addr", addr, "--window", "1h", "--algorithm", "SLIDING_WINDOW_LOG", key)
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "nothing to clear")

	// Owner gone, not yet detected: an error, never a success.
	c.Kill(2)
	code, _, errOut = cli(t, "reset", "--addr", addr, "--policy", "login", key)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "peerlimit-node reset: Unavailable: ")
}

func TestCLIUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"frobnicate"},
		{"check"},
		{"check", "a", "b", "--policy", "p"},
		{"check", "--policy", "p", "--limit", "3", "k"},
		{"check", "--policy", "p", "--window", "1m", "k"},
		{"check", "--limit", "3", "k"},
		{"check", "--limit", "3", "--window", "1500us", "k"},
		{"check", "--limit", "3", "--window", "1s", "--algorithm", "TOKEN_BUCKET", "k"},
		{"check", "--no-such-flag", "k"},
		{"members", "extra"},
		{"ring"},
		{"reset", "k"},
		{"reset", "--all-windows", "--policy", "p", "k"},
		{"reset", "--all-windows", "--window", "1m", "k"},
		{"reset", "--all-windows", "--calendar", "day", "k"},
		{"check", "--limit", "3", "--calendar", "fortnight", "k"},
		{"check", "--limit", "3", "--calendar", "day", "--window", "1h", "k"},
		{"check", "--limit", "3", "--window", "1h", "--time-zone", "Europe/Paris", "k"},
		{"check", "--policy", "p", "--calendar", "day", "k"},
		{"check", "--limit", "3", "--window", "1s", "--burst", "5", "k"},
		{"check", "--limit", "3", "--window", "1s", "--algorithm", "concurrency", "--burst", "5", "k"},
		{"check", "--limit", "3", "--window", "1s", "--algorithm", "gcra", "--burst", "0", "k"},
		{"check", "--limit", "3", "--window", "1s", "--algorithm", "gcra", "--burst", "-2", "k"},
		{"check", "--policy", "p", "--burst", "5", "k"},
		{"acquire", "--limit", "3", "--window", "1s", "--algorithm", "concurrency", "--hits", "1", "k"},
		{"acquire", "--limit", "3", "--window", "1s", "--algorithm", "concurrency", "--ttl", "1s", "k"},
		{"healthcheck", "extra"},
	} {
		code, _, errOut := cli(t, args...)
		assert.Equal(t, exitUsage, code, "%q: %s", args, errOut)
		assert.NotEmpty(t, errOut, "%q says why", args)
	}
	code, out, _ := cli(t, "help")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "Exit codes: 0 ok (check, reserve, acquire: allowed), 1 error, 2 usage, 3 check, reserve or acquire\n"+
		"denied, 4 release of a reservation or slot already settled or released (nothing released now).")
	assert.Contains(t, out, "cmd/loadgen")
	code, _, errOut := cli(t, "check", "--help")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, errOut, "-policy")
}

func TestCLIUnreachableNodeIsAnError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())
	for _, args := range [][]string{
		{"check", "--addr", dead, "--timeout", "2s", "--limit", "1", "--window", "1s", "k"},
		{"members", "--addr", dead, "--timeout", "2s"},
		{"ring", "--addr", dead, "--timeout", "2s", "k"},
		{"reset", "--addr", dead, "--timeout", "2s", "--all-windows", "k"},
		{"healthcheck", "--addr", dead},
	} {
		code, _, errOut := cli(t, args...)
		assert.Equal(t, exitError, code, "%q", args)
		assert.NotEmpty(t, errOut)
	}
}

func TestCLIHealthcheck(t *testing.T) {
	cfg := node.DefaultLocalConfig("hc")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(cfg)
	require.NoError(t, err)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			n.Kill()
		}
	})

	code, out, errOut := cli(t, "healthcheck", "--addr", "http://"+n.HTTPAddr())
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "SERVING\n", out)
	code, _, errOut = cli(t, "healthcheck", "--addr", n.HTTPAddr()+"/")
	assert.Equal(t, exitOK, code, "host:port works too: %s", errOut)

	// The default follows PEERLIMIT_HTTP_ADDR, as set for the node in a
	// container: "healthcheck" alone is the HEALTHCHECK command.
	_, port, err := net.SplitHostPort(n.HTTPAddr())
	require.NoError(t, err)
	code, _, errOut = cliEnv(t, map[string]string{"PEERLIMIT_HTTP_ADDR": ":" + port}, "healthcheck")
	assert.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "http://127.0.0.1:8080", healthURL(func(string) string { return "" }))

	// Shutting down: 503 NOT_SERVING is unhealthy.
	unhealthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"NOT_SERVING"}`))
	}))
	t.Cleanup(unhealthy.Close)
	code, _, errOut = cli(t, "healthcheck", "--addr", unhealthy.URL)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "answered 503 NOT_SERVING")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, n.Shutdown(ctx))
	stopped = true
	code, _, _ = cli(t, "healthcheck", "--addr", n.HTTPAddr(), "--timeout", "1s")
	assert.Equal(t, exitError, code, "a stopped node is not healthy")
}

// check, inspect and reset of a calendar quota: --calendar and
// --time-zone select it; a zone the node does not know is its error,
// naming the field.
func TestCLICalendar(t *testing.T) {
	c := testcluster.New(t, 1, nil)
	addr := c.Node(0).GRPCAddr()
	month := []string{"--addr", addr, "--limit", "2", "--calendar", "month", "--time-zone", "Europe/Paris", "tenant:1"}
	for range 2 {
		code, out, errOut := cli(t, append([]string{"check"}, month...)...)
		require.Equal(t, exitOK, code, errOut)
		assert.Contains(t, out, "allowed")
	}
	code, out, _ := cli(t, append([]string{"check"}, month...)...)
	assert.Equal(t, exitDenied, code, out)

	code, out, errOut := cli(t, "inspect", "--addr", addr, "tenant:1")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "SLIDING_WINDOW_COUNTER, calendar MONTH in Europe/Paris: count 2")
	assert.Contains(t, out, "period from ")

	code, out, errOut = cli(t, "reset", "--addr", addr, "--calendar", "month", "--time-zone", "Europe/Paris", "tenant:1")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "cleared 1 state(s)")

	code, _, errOut = cli(t, "check", "--addr", addr, "--limit", "2", "--calendar", "month", "--time-zone", "Mars/Olympus_Mons", "tenant:1")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "time_zone")
}
