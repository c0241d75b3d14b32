package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The container's HEALTHCHECK against a real node process: healthy while
// it serves, unhealthy once it has stopped.
func TestHealthcheckAgainstARealNode(t *testing.T) {
	p := startProcess(t, "hc-node")
	var out, errOut bytes.Buffer
	code := runHealthcheck([]string{"--addr", "http://" + p.http}, &out, &errOut)
	require.Equal(t, 0, code, "stderr: %s", errOut.String())
	assert.Contains(t, out.String(), `/healthz: {"status":"SERVING"}`)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	waitForLog(t, p.lines, "stopped")
	require.NoError(t, p.cmd.Wait())
	errOut.Reset()
	assert.Equal(t, 1, runHealthcheck([]string{"--addr", "http://" + p.http}, io.Discard, &errOut))
	assert.Contains(t, errOut.String(), "unhealthy")
}

func TestHealthcheckExitCodes(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, http.StatusText(status))
	}))
	defer srv.Close()

	// Through run, as the image's HEALTHCHECK calls it; a trailing slash is fine.
	assert.Equal(t, 0, run([]string{"healthcheck", "--addr", srv.URL + "/"}, nil, io.Discard))

	status = http.StatusServiceUnavailable // a node shutting down
	var errOut bytes.Buffer
	assert.Equal(t, 1, runHealthcheck([]string{"--addr", srv.URL}, io.Discard, &errOut))
	assert.Contains(t, errOut.String(), "503")

	// A node that accepts the connection but never answers: the timeout ends it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	start := time.Now()
	assert.Equal(t, 1, runHealthcheck([]string{"--addr", "http://" + ln.Addr().String(), "--timeout", "200ms"}, io.Discard, io.Discard))
	assert.Less(t, time.Since(start), 5*time.Second)

	for _, args := range [][]string{
		{"--addr", "127.0.0.1:8080"}, // no scheme
		{"--addr", "ftp://x:1"},
		{"--timeout", "0s"},
		{"--nope"},
		{"extra"},
	} {
		errOut.Reset()
		assert.Equal(t, 2, runHealthcheck(args, io.Discard, &errOut), "%q", args)
		assert.NotEmpty(t, errOut.String(), "%q says why", args)
	}
}
