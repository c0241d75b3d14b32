package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkPolicy POSTs a check by policy name to a node process.
func checkPolicy(t *testing.T, httpAddr, key, policy string) map[string]any {
	t.Helper()
	resp, err := http.Post("http://"+httpAddr+"/v1/check", "application/json",
		strings.NewReader(`{"key":"`+key+`","policy":"`+policy+`"}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

func metricsText(t *testing.T, httpAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(raw)
}

// SIGHUP reloads --policies in a real process: a key at its limit stays
// limited, a bad file is refused with its line and the old policies kept,
// and a raised limit applies at once to what is counted.
func TestSIGHUPReloadsPoliciesWithoutDroppingState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(src string) { require.NoError(t, os.WriteFile(path, []byte(src), 0o600)) }
	write("login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\n")
	p := startProcess(t, "hup-node", "--policies", path, "--watch-config=false") // SIGHUP alone reloads
	hup := func() { require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP)) }

	for i := range 3 {
		assert.Equal(t, true, checkPolicy(t, p.http, "alice", "login")["allowed"], "hit %d", i)
	}
	require.Equal(t, false, checkPolicy(t, p.http, "alice", "login")["allowed"])

	// Reload with another policy added: alice stays blocked.
	write("login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\nsearch: {limit: 10, window: 1s}\n")
	hup()
	rec := waitForLog(t, p.lines, "policies reloaded")
	assert.EqualValues(t, 2, rec["policies"])
	out := checkPolicy(t, p.http, "alice", "login")
	assert.Equal(t, false, out["allowed"], "state survives the reload")
	assert.EqualValues(t, 3, out["current_count"])
	assert.Equal(t, true, checkPolicy(t, p.http, "bob", "search")["allowed"], "the new policy is in force")

	// A bad file: the error names the line; the node keeps serving the old set.
	write("login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\nsearch: {limit: 10, window: soon}\n")
	hup()
	rec = waitForLog(t, p.lines, "policy reload failed; the policies in force are kept")
	assert.Contains(t, rec["err"], path+`:2: policy "search": window "soon" is not a duration`)
	assert.Equal(t, true, checkPolicy(t, p.http, "bob", "search")["allowed"])
	assert.Contains(t, metricsText(t, p.http), `peerlimit_policy_reloads_total{result="error"} 1`)

	// A raised limit applies to what alice already counted.
	write("login: {algorithm: SLIDING_WINDOW_LOG, limit: 4, window: 1h}\n")
	hup()
	waitForLog(t, p.lines, "policies reloaded")
	out = checkPolicy(t, p.http, "alice", "login")
	assert.Equal(t, true, out["allowed"])
	assert.EqualValues(t, 3, out["current_count"])
	assert.Equal(t, false, checkPolicy(t, p.http, "alice", "login")["allowed"])
	assert.Contains(t, metricsText(t, p.http), `peerlimit_policy_reloads_total{result="ok"} 2`)
}

// Without --policies a SIGHUP is logged and ignored: its default action
// would have killed the node.
func TestSIGHUPWithoutPoliciesKeepsServing(t *testing.T) {
	p := startProcess(t, "hup-plain")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitForLog(t, p.lines, "policy reload asked, but the node was started without a policy file")
	assert.Equal(t, "hup-plain", check(t, p.http, "k")["owner"])
}

// A bad file at start is fatal, and says where.
func TestBadPolicyFileFailsStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("login:\n  limit: 5\n  window: 1m\n  bursty: 10\n"), 0o600))
	var stderr strings.Builder
	code := run([]string{"--policies", path, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0"},
		func(string) string { return "" }, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "start failed")
	assert.Contains(t, stderr.String(), path+`:4: policy \"login\": unknown field \"bursty\"`)
}

func TestPoliciesAndPprofFlags(t *testing.T) {
	o, err := parseFlags(onLoopback, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, o.node.PoliciesFile)
	assert.False(t, o.node.HTTP.Pprof, "profiles are off by default")

	env := map[string]string{"PEERLIMIT_POLICIES": "/etc/peerlimit/policies.yaml", "PEERLIMIT_PPROF": "true"}
	o, err = parseFlags(onLoopback, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/etc/peerlimit/policies.yaml", o.node.PoliciesFile)
	assert.True(t, o.node.HTTP.Pprof)

	o, err = parseFlags([]string{"--pprof=false", "--policies", "p.json", "--grpc-addr", "127.0.0.1:9090"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "p.json", o.node.PoliciesFile)
	assert.False(t, o.node.HTTP.Pprof, "a flag beats the environment")
}
