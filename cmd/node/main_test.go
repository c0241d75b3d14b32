package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
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
		"PEERLIMIT_ID":        "from-env",
		"PEERLIMIT_HTTP_ADDR": "127.0.0.1:1111",
		"PEERLIMIT_GRPC_ADDR": "127.0.0.1:2222",
		"PEERLIMIT_MAX_KEYS":  "5000",
		"PEERLIMIT_OVERFLOW":  "reject",
		"PEERLIMIT_JOIN":      "a:7946, b:7946,",
	}
	o, err := parseFlags([]string{"--http-addr", "127.0.0.1:3333"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "from-env", o.node.ID)
	assert.Equal(t, "127.0.0.1:3333", o.node.HTTPAddr, "a flag beats the environment")
	assert.Equal(t, "127.0.0.1:2222", o.node.GRPCAddr)
	assert.Equal(t, 5000, o.node.Limiter.MaxKeys)
	assert.Equal(t, "reject", o.node.Limiter.Overflow.String())
	assert.Equal(t, []string{"a:7946", "b:7946"}, o.node.Join)
}

func TestFlagErrorsAreClear(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--overflow", "drop"}, want: "unknown overflow policy"},
		{args: []string{"--log-level", "loud"}, want: "--log-level"},
		{args: []string{"stray"}, want: "unexpected arguments"},
		{env: map[string]string{"PEERLIMIT_MAX_KEYS": "many"}, want: "PEERLIMIT_MAX_KEYS"},
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

	cmd := exec.Command(os.Args[0], "--id", "proc-node", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	lines := make(chan string, 100)
	go func() { // ends when the process closes stderr
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	httpAddr := waitForLog(t, lines, "node started")["http"].(string)

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

// readmeCurl returns the path and body of the README's curl example.
func readmeCurl(t *testing.T) (path, body string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`curl -s localhost:8080(/\S+) -d '([^']+)'`).FindSubmatch(readme)
	require.NotNil(t, m, "README has no curl example of the expected form")
	return string(m[1]), string(m[2])
}

// waitForLog returns the first JSON log line whose msg is msg.
func waitForLog(t *testing.T, lines <-chan string, msg string) map[string]any {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "process exited before logging %q", msg)
			var rec map[string]any
			if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == msg {
				return rec
			}
		case <-deadline:
			t.Fatal(fmt.Sprintf("no %q log line within 15s", msg))
		}
	}
}
