package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"

	"github.com/peerlimit/peerlimit/internal/testkit/redistest"
)

// TestRedis runs both scripts against a real redis-server.
func TestRedis(t *testing.T) {
	addr := redistest.Start(t)
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
