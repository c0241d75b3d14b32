// Package redistest starts throwaway redis-server processes for tests of
// the Redis baseline (the load generator and the memory measurement).
package redistest

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Start runs redis-server on a free loopback port, with persistence off and
// its files in a temporary directory, waits until it answers PING, and stops
// it when the test ends. It skips the test when redis-server is not
// installed: the tests that need it are about the baseline, not the product.
func Start(t testing.TB) (addr string) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH: install it (apt-get install redis-server) to run the Redis baseline tests")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	addr = "127.0.0.1:" + strconv.Itoa(port)

	var out bytes.Buffer
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("redis-server exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s not ready: %v\n%s", addr, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
