package main

import (
	"bytes"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func healthcheck(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := dispatch(append([]string{"healthcheck"}, args...), func(string) string { return "" }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The container's HEALTHCHECK against a real node process: healthy while
// it serves, unhealthy once it has stopped.
func TestHealthcheckAgainstARealNode(t *testing.T) {
	p := startProcess(t, "hc-node")
	code, out, errOut := healthcheck("--addr", "http://"+p.http)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Contains(t, out, "SERVING")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	waitForLog(t, p.lines, "stopped")
	require.NoError(t, p.cmd.Wait())
	code, _, errOut = healthcheck("--addr", "http://"+p.http)
	assert.Equal(t, 1, code)
	assert.NotEmpty(t, errOut, "says why")
}

// A node that accepts the connection but never answers: the timeout ends
// the check, so Docker's HEALTHCHECK never hangs.
func TestHealthcheckTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	start := time.Now()
	code, _, _ := healthcheck("--addr", "http://"+ln.Addr().String(), "--timeout", "200ms")
	assert.Equal(t, 1, code)
	assert.Less(t, time.Since(start), 5*time.Second)
}
