package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as the node binary: with this variable set it runs
// main, so process tests exercise the real flags, signals and exit codes.
const runMainEnv = "PEERLIMIT_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestFlagsEnvironmentAndPrecedence(t *testing.T) {
	env := map[string]string{
		"PEERLIMIT_ID":                    "from-env",
		"PEERLIMIT_HTTP_ADDR":             "127.0.0.1:1111",
		"PEERLIMIT_GRPC_ADDR":             "127.0.0.1:2222",
		"PEERLIMIT_MAX_KEYS":              "5000",
		"PEERLIMIT_OVERFLOW":              "reject",
		"PEERLIMIT_JOIN":                  "a:7946, b:7946,",
		"PEERLIMIT_FALLBACK":              "deny",
		"PEERLIMIT_GOSSIP_KEY":            "MDEyMzQ1Njc4OWFiY2RlZg==",
		"PEERLIMIT_PARTITIONS":            "101",
		"PEERLIMIT_MAX_LOG_ENTRIES":       "2000000",
		"PEERLIMIT_MAX_INFLIGHT_FORWARDS": "500",
	}
	o, err := parseFlags([]string{"--http-addr", "127.0.0.1:3333"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "from-env", o.node.ID)
	assert.Equal(t, "127.0.0.1:3333", o.node.HTTPAddr, "a flag beats the environment")
	assert.Equal(t, "127.0.0.1:2222", o.node.GRPCAddr)
	assert.Equal(t, 5000, o.node.Limiter.MaxKeys)
	assert.Equal(t, "reject", o.node.Limiter.Overflow.String())
	assert.Equal(t, []string{"a:7946", "b:7946"}, o.node.Join)
	assert.Equal(t, "deny", o.node.Route.Fallback.String())
	assert.Equal(t, []byte("0123456789abcdef"), o.node.GossipKey)
	assert.Equal(t, 101, o.node.Partitions, "one setting for the ring and the store")
	assert.EqualValues(t, 2_000_000, o.node.Limiter.MaxLogEntries)
	assert.Equal(t, 500, o.node.Route.MaxInflightForwards)
}

// TestStringFlagsConvertAfterTheEnvironment pins that the flags converted
// from strings (--overflow, --log-level…) follow the same precedence as the
// others, and that a bad value from the environment is reported by flag.
func TestStringFlagsConvertAfterTheEnvironment(t *testing.T) {
	env := map[string]string{
		"PEERLIMIT_OVERFLOW":        "reject",
		"PEERLIMIT_LOG_LEVEL":       "debug",
		"PEERLIMIT_TLS_CLIENT_AUTH": "sometimes",
	}
	o, err := parseFlags([]string{"--overflow", "evict", "--tls-client-auth", "optional", "--grpc-addr", "127.0.0.1:9090"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "evict", o.node.Limiter.Overflow.String(), "a flag beats the environment")
	assert.Equal(t, slog.LevelDebug, o.logLevel)

	_, err = parseFlags(nil, func(k string) string { return env[k] }, io.Discard)
	assert.EqualError(t, err, `--tls-client-auth: want optional or require, got "sometimes"`)
}

func TestFlagErrorsAreClear(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--overflow", "drop"}, want: "unknown overflow policy"},
		{args: []string{"--fallback", "maybe"}, want: "unknown fallback policy"},
		{args: []string{"--gossip-key", "c2hvcnQ="}, want: "want 16, 24 or 32"},
		{args: []string{"--gossip-profile", "wan"}, want: "--gossip-profile"},
		{args: []string{"--log-level", "loud"}, want: "--log-level"},
		{args: []string{"stray"}, want: "unexpected arguments"},
		{env: map[string]string{"PEERLIMIT_MAX_KEYS": "many"}, want: "PEERLIMIT_MAX_KEYS"},
		{args: []string{"--max-log-entries", "1000"}, want: "Limiter.MaxLogEntries (--max-log-entries) must be ≥ partitions × Limiter.MaxLogLimit (--max-log-limit)"},
		{args: []string{"--hold-ttl", "2h"}, want: "Route.HoldTTL (--hold-ttl) must be ≤ Limiter.MaxReservationTTL (--max-reservation-ttl)"},
		{args: []string{"--max-inflight-forwards", "0"}, want: "Route.MaxInflightForwards (--max-inflight-forwards) must be ≥ 1"},
	} {
		var stderr bytes.Buffer
		code := run(c.args, func(k string) string { return c.env[k] }, &stderr)
		assert.Equal(t, 2, code, "%v", c)
		assert.Contains(t, stderr.String(), c.want)
	}
	var stderr bytes.Buffer
	assert.Equal(t, 0, run([]string{"--help"}, func(string) string { return "" }, &stderr))
	assert.Contains(t, stderr.String(), "PEERLIMIT_GRPC_ADDR")
}

// TestProcessAnswersREADMECurlAndStopsOnSIGTERM runs the node as a real
// process, sends it the request of the README's curl example, and stops it
// the way an orchestrator does.
func TestProcessAnswersREADMECurlAndStopsOnSIGTERM(t *testing.T) {
	path, body := readmeCurl(t)
	p := startProcess(t, "proc-node")
	httpAddr, lines, cmd := p.http, p.lines, p.cmd

	for i := range 6 {
		resp, err := http.Post("http://"+httpAddr+path, "application/x-www-form-urlencoded", strings.NewReader(body)) // what curl -d sends
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, i < 5, out["allowed"], "request %d of limit 5", i+1)
		assert.Equal(t, "proc-node", out["owner"])
		if i == 0 {
			assert.EqualValues(t, 4, out["remaining"])
		}
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waitForLog(t, lines, "stopped")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM")
	case <-time.After(10 * time.Second):
		t.Fatal("node did not exit within 10s of SIGTERM")
	}
}

// process is a node running as a child process.
type process struct {
	cmd                *exec.Cmd
	lines              chan string
	http, grpc, gossip string
}

// startProcess runs the node binary (this test binary in main mode) on
// loopback free ports and waits for it to report its addresses.
func startProcess(t *testing.T, id string, extra ...string) *process {
	t.Helper()
	args := append([]string{"--id", id, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
		"--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local", "--log-format", "json"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &process{cmd: cmd, lines: make(chan string, 1000)}
	go func() { // ends when the process closes stderr
		defer close(p.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // nobody reads any more; keep draining
			}
		}
	}()
	rec := waitForLog(t, p.lines, "node started")
	p.http, p.grpc, p.gossip = rec["http"].(string), rec["grpc"].(string), rec["gossip"].(string)
	return p
}

// TestKill9KeepsTheClusterAnswering runs three real node processes, kills
// one with SIGKILL, and requires every request to the survivors to be
// answered, degraded while the failure is being detected and exact after.
func TestKill9KeepsTheClusterAnswering(t *testing.T) {
	a := startProcess(t, "proc-a")
	b := startProcess(t, "proc-b", "--join", a.gossip)
	c := startProcess(t, "proc-c", "--join", a.gossip)
	waitMembers(t, a.http, map[string]string{"proc-a": "alive", "proc-b": "alive", "proc-c": "alive"})
	waitMembers(t, b.http, map[string]string{"proc-a": "alive", "proc-b": "alive", "proc-c": "alive"})

	// Keys owned by the victim, as the owners' answers say.
	var victimKeys []string
	for i := 0; len(victimKeys) < 5 && i < 1000; i++ {
		key := fmt.Sprintf("k%d", i)
		if out := check(t, a.http, key); out["owner"] == "proc-c" {
			victimKeys = append(victimKeys, key)
		}
	}
	require.Len(t, victimKeys, 5)

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	degraded, total := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for {
		healed := true
		for _, node := range []*process{a, b} {
			for _, key := range victimKeys {
				out := check(t, node.http, key) // fails the test on anything but a 200
				total++
				if out["degraded"] == true {
					degraded++
					healed = false
				}
				assert.NotEqual(t, "proc-c", out["owner"], "a dead node decided")
			}
		}
		if healed {
			break
		}
		require.True(t, time.Now().Before(deadline), "still degraded 20s after the kill")
	}
	t.Logf("%d answers after kill -9, %d degraded while the failure was detected, none failed", total, degraded)
	waitMembers(t, a.http, map[string]string{"proc-a": "alive", "proc-b": "alive", "proc-c": "failed"})
}

func check(t *testing.T, httpAddr, key string) map[string]any {
	t.Helper()
	resp, err := http.Post("http://"+httpAddr+"/v1/check", "application/json",
		strings.NewReader(fmt.Sprintf(`{"key":%q,"limit":1000000,"window_ms":60000}`, key)))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// waitMembers polls GET /v1/members until it lists exactly want (id → state).
func waitMembers(t *testing.T, httpAddr string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := map[string]string{}
		if resp, err := http.Get("http://" + httpAddr + "/v1/members"); err == nil {
			var m struct {
				Members []struct{ ID, State string } `json:"members"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&m)
			resp.Body.Close()
			for _, mm := range m.Members {
				got[mm.ID] = mm.State
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		require.True(t, time.Now().Before(deadline), "members at %s: %v, want %v", httpAddr, got, want)
		time.Sleep(50 * time.Millisecond)
	}
}

// readmeCurl returns the path and body of the README's curl example.
func readmeCurl(t *testing.T) (path, body string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`curl -s localhost:8080(/\S+) -d '([^']+)'`).FindSubmatch(readme)
	require.NotNil(t, m, "README has no curl example of the expected form")
	return string(m[1]), string(m[2])
}

// logMessage is a JSON log line's message: slog's "msg", or "@message"
// in the ratelimit mode's upstream keys.
func logMessage(rec map[string]any) string {
	if m, ok := rec["msg"].(string); ok {
		return m
	}
	m, _ := rec["@message"].(string)
	return m
}

// waitForLog returns the first JSON log line whose message is one of msgs.
func waitForLog(t *testing.T, lines <-chan string, msgs ...string) map[string]any {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "process exited before logging %q", msgs)
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) == nil && slices.Contains(msgs, logMessage(rec)) {
				return rec
			}
		case <-deadline:
			t.Fatal(fmt.Sprintf("no %q log line within 15s", msgs))
		}
	}
}
