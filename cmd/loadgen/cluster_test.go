package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
)

// TestPeerlimit loads a 3-node in-process cluster through each route.
func TestPeerlimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := testcluster.New(t, 3, nil)
	var endpoints []string
	for _, n := range c.Live() {
		endpoints = append(endpoints, n.GRPCAddr())
	}
	config := func(t *testing.T, route string) Config {
		cfg := defaultConfig()
		cfg.Endpoints, cfg.Route = endpoints, route
		cfg.Workers = 8
		cfg.Duration = 500 * time.Millisecond
		cfg.Keys = 1000
		cfg.KeyPrefix = t.Name() + ":" // each subtest its own keys
		cfg.Progress = false
		cfg.Stderr = testlog.New(t)
		return cfg
	}
	routes := []string{routeNode, routeRandom, routeOwner}

	for _, route := range routes {
		for _, batch := range []int{1, 10} {
			t.Run(fmt.Sprintf("%s/batch=%d", route, batch), func(t *testing.T) {
				cfg := config(t, route)
				cfg.Batch = batch
				res, err := run(context.Background(), cfg)
				require.NoError(t, err)
				t.Logf("%+v", res)
				assert.Positive(t, res.Checks)
				assert.Zero(t, res.Errors, "first errors: %v", res.FirstErrors)
				assert.Zero(t, res.Degraded)
				assert.Equal(t, res.Checks, res.Allowed+res.Denied)
				assert.Equal(t, res.Checks, res.Allowed, "limit 10^9: every check is allowed")
				assert.Equal(t, res.Checks, res.Calls*int64(batch))
				assert.Positive(t, res.LatencyUS.P50)
				assert.Equal(t, route, res.Route)
			})
		}
	}

	// The log is exact: with limit 5 on 3 keys and a window longer than
	// the run, exactly 5 checks per key are allowed, through any route.
	for _, route := range routes {
		for _, batch := range []int{1, 10} {
			t.Run(fmt.Sprintf("limit5/%s/batch=%d", route, batch), func(t *testing.T) {
				cfg := config(t, route)
				cfg.Algorithm, cfg.Limit, cfg.Keys, cfg.Window = algoLog, 5, 3, time.Minute
				cfg.Duration, cfg.Batch = 300*time.Millisecond, batch
				res, err := run(context.Background(), cfg)
				require.NoError(t, err)
				assert.Zero(t, res.Errors, "first errors: %v", res.FirstErrors)
				// Exactness holds while every owner answers; a degraded
				// (fallback) answer may admit more, by design.
				require.Zero(t, res.Degraded, "an owner was unreachable: the limit is not exact then")
				assert.Greater(t, res.Checks, int64(15))
				assert.LessOrEqual(t, res.Allowed, int64(5*3))
				assert.Equal(t, int64(5*3), res.Allowed)
				assert.Equal(t, res.Checks, res.Allowed+res.Denied)
			})
		}
	}

	t.Run("count", func(t *testing.T) {
		cfg := config(t, routeOwner)
		cfg.Count, cfg.Batch, cfg.Duration = 1234, 10, 10*time.Second
		res, err := run(context.Background(), cfg)
		require.NoError(t, err)
		assert.Equal(t, int64(1234), res.Checks+res.Errors)
		assert.Zero(t, res.Errors, "first errors: %v", res.FirstErrors)
	})

	t.Run("main", func(t *testing.T) {
		var stdout bytes.Buffer
		code := realMain([]string{"-endpoints", strings.Join(endpoints, ","), "-route", "random",
			"-workers", "4", "-duration", "300ms", "-progress=false", "-json", "-",
			"-key-prefix", t.Name() + ":"}, &stdout, testlog.New(t))
		require.Equal(t, 0, code)
		var m map[string]any
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &m), "stdout is the JSON result: %s", stdout.String())
		assert.Equal(t, "peerlimit", m["target"])
		assert.Equal(t, "random", m["route"])
		assert.Positive(t, m["checks"])
		assert.Equal(t, 0.0, m["errors"])
	})
}

// A node that is not there: every call fails, the run still ends on time
// and the command exits non-zero.
func TestPeerlimitUnreachable(t *testing.T) {
	var stdout bytes.Buffer
	stderr := testlog.New(t)
	began := time.Now()
	code := realMain([]string{"-endpoints", "127.0.0.1:1", "-route", "node", "-workers", "2",
		"-duration", "200ms", "-progress=false"}, &stdout, stderr)
	assert.Equal(t, 1, code)
	assert.Less(t, time.Since(began), 5*time.Second)
	assert.Contains(t, stdout.String(), "0 checks")
}
