package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testlog"
)

// startRedis starts a throw-away redis-server on a free loopback port, with
// persistence off and its files in a temporary directory, and stops it when
// the test ends. It skips the test when redis-server is not installed.
func startRedis(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH: install it (e.g. apt-get install redis-server) to run the Redis tests")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	var out bytes.Buffer
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start(), "starting redis-server")
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

	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer rdb.Close()
	deadline := time.Now().Add(5 * time.Second)
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
			t.Fatalf("redis-server on %s not answering: %v\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedis runs both scripts against a real redis-server.
func TestRedis(t *testing.T) {
	addr := startRedis(t)
	config := func(t *testing.T, algorithm string, batch int) Config {
		cfg := defaultConfig()
		cfg.Target, cfg.Redis = targetRedis, addr
		cfg.Algorithm, cfg.Batch = algorithm, batch
		cfg.Workers = 8
		cfg.Duration = 700 * time.Millisecond
		cfg.Limit, cfg.Keys, cfg.Window = 5, 3, time.Minute
		cfg.KeyPrefix = t.Name() + ":"
		cfg.Progress = false
		cfg.Stderr = testlog.New(t)
		return cfg
	}
	for _, batch := range []int{1, 10} {
		t.Run(fmt.Sprintf("log/batch=%d", batch), func(t *testing.T) {
			res, err := run(context.Background(), config(t, algoLog, batch))
			require.NoError(t, err)
			t.Logf("%+v", res)
			assert.Zero(t, res.Errors, "first errors: %v", res.FirstErrors)
			assert.Greater(t, res.Checks, int64(15))
			assert.Equal(t, res.Checks, res.Allowed+res.Denied)
			// The log never allows more than the limit in a window: 5 per
			// key, and the run is shorter than the window.
			assert.Equal(t, int64(5*3), res.Allowed)
		})
	}
	t.Run("counter", func(t *testing.T) {
		res, err := run(context.Background(), config(t, algoCounter, 1))
		require.NoError(t, err)
		t.Logf("%+v", res)
		assert.Zero(t, res.Errors, "first errors: %v", res.FirstErrors)
		assert.Equal(t, res.Checks, res.Allowed+res.Denied)
		// Within one fixed window the counter allows exactly the limit. If
		// the run crosses a window boundary, the previous window's 5 weigh
		// a little less than 5 just after it, which lets one more hit
		// through per key; a second one needs the previous window to weigh
		// less than 4, 12 s into the window.
		assert.GreaterOrEqual(t, res.Allowed, int64(5*3))
		assert.LessOrEqual(t, res.Allowed, int64(6*3))
	})
	t.Run("counter keys", func(t *testing.T) {
		cfg := config(t, algoCounter, 10)
		cfg.Count, cfg.Keys = 20, 1
		res, err := run(context.Background(), cfg)
		require.NoError(t, err)
		assert.Equal(t, int64(5), res.Allowed)
		assert.Equal(t, int64(15), res.Denied)
		// The current window's counter is "<key>:<window_id>" with a TTL of
		// two windows.
		rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		defer rdb.Close()
		ctx := context.Background()
		keys, err := rdb.Keys(ctx, cfg.KeyPrefix+"0:*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 1)
		id := time.Now().UnixMilli() / 60_000
		assert.Contains(t, []string{fmt.Sprintf("%s0:%d", cfg.KeyPrefix, id), fmt.Sprintf("%s0:%d", cfg.KeyPrefix, id-1)}, keys[0])
		assert.Equal(t, "5", rdb.Get(ctx, keys[0]).Val())
		ttl := rdb.PTTL(ctx, keys[0]).Val()
		assert.Greater(t, ttl, 119*time.Second)
		assert.LessOrEqual(t, ttl, 120*time.Second)
	})
	t.Run("unreachable", func(t *testing.T) {
		cfg := config(t, algoLog, 1)
		cfg.Redis = "127.0.0.1:1"
		_, err := run(context.Background(), cfg)
		assert.ErrorContains(t, err, "loading the log script into redis at 127.0.0.1:1")
	})
}
