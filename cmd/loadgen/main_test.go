package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, defaultConfig(), cfg)
	assert.Equal(t, targetPeerlimit, cfg.Target)
	assert.Equal(t, 64, cfg.Workers)
	assert.Equal(t, 10*time.Second, cfg.Duration)
	assert.Equal(t, 10_000, cfg.Keys)
	assert.Equal(t, int64(1_000_000_000), cfg.Limit)
	assert.Equal(t, time.Minute, cfg.Window)
	assert.Equal(t, 1, cfg.Batch)
	assert.True(t, cfg.Progress)
	assert.True(t, cfg.Coalesce)
}

func TestParseFlagsReadsEveryFlag(t *testing.T) {
	cfg, err := parseFlags(strings.Fields(
		"-target peerlimit -endpoints a:1,b:2 -route owner -coalesce=false -workers 3 -duration 5s"+
			" -count 100 -timeout 1s -keys 7 -dist zipf -zipf-s 1.5 -seed 9 -key-prefix k-"+
			" -algorithm log -limit 5 -window 1500ms -batch 10 -json out.json -progress=false"), io.Discard)
	require.NoError(t, err)
	want := Config{
		Target: targetPeerlimit, API: apiGRPC, Endpoints: []string{"a:1", "b:2"}, HTTPEndpoints: defaultConfig().HTTPEndpoints,
		Route: routeOwner, Coalesce: false, RLSDescriptorKey: "key",
		Redis: defaultConfig().Redis, Workers: 3, Duration: 5 * time.Second, Count: 100, Timeout: time.Second,
		Keys: 7, Dist: distZipf, ZipfS: 1.5, Seed: 9, KeyPrefix: "k-",
		Algorithm: algoLog, Limit: 5, Window: 1500 * time.Millisecond, Batch: 10, JSON: "out.json", Progress: false,
	}
	assert.Equal(t, want, cfg)

	cfg, err = parseFlags([]string{"-target", "redis", "-redis", "10.0.0.1:6399", "-window", "2s"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1:6399", cfg.Redis)
	assert.Equal(t, 2*time.Second, cfg.Window)

	cfg, err = parseFlags([]string{"-endpoints", " a:1, ,b:2,"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1", "b:2"}, cfg.Endpoints)

	// The other APIs route to a random node unless told otherwise: owner
	// routing is the Go client's, over gRPC.
	cfg, err = parseFlags(strings.Fields("-api http -http-endpoints h:1,h:2 -batch 10 -algorithm log -limit 7 -window 2s"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, apiHTTP, cfg.API)
	assert.Equal(t, []string{"h:1", "h:2"}, cfg.HTTPEndpoints)
	assert.Equal(t, routeRandom, cfg.Route)
	assert.Equal(t, []string{"h:1", "h:2"}, cfg.peerlimitEndpoints())
	assert.Equal(t, 10, cfg.Batch)

	cfg, err = parseFlags(strings.Fields("-api envoy -endpoints g:1 -route node -rls-domain d -rls-descriptor-key client"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, apiEnvoy, cfg.API)
	assert.Equal(t, routeNode, cfg.Route)
	assert.Equal(t, "d", cfg.RLSDomain)
	assert.Equal(t, "client", cfg.RLSDescriptorKey)
	assert.Equal(t, []string{"g:1"}, cfg.peerlimitEndpoints())
}

func TestParseFlagsErrors(t *testing.T) {
	cases := []struct{ args, want string }{
		{"-target memcached", `-target must be peerlimit or redis, got "memcached"`},
		{"-route nearest", `-route must be node, random or owner, got "nearest"`},
		{"-route node -coalesce=false", "-coalesce applies only to -target peerlimit -route owner"},
		{"-route random -coalesce", "-coalesce applies only to -target peerlimit -route owner"},
		{"-target redis -coalesce=false", "-coalesce applies only to -target peerlimit -route owner"},
		{"-target redis -endpoints a:1", "-endpoints and -route apply only to -target peerlimit"},
		{"-target redis -route node", "-endpoints and -route apply only to -target peerlimit"},
		{"-redis a:1", "-redis applies only to -target redis"},
		{"-endpoints ,", "-endpoints is empty"},
		{"-endpoints nohost", `-endpoints: "nohost" is not host:port`},
		{"-target redis -redis nohost", `-redis: "nohost" is not host:port`},
		{"-window 1500us", "-window must be a whole number of milliseconds for peerlimit, got 1.5ms"},
		{"-target redis -window 1500ms", "-window must be a whole number of seconds for redis"},
		{"-window 0s", "-window must be positive"},
		{"-workers 0", "-workers must be ≥ 1, got 0"},
		{"-duration 0s", "-duration must be positive"},
		{"-count -1", "-count must be ≥ 0"},
		{"-timeout 0s", "-timeout must be positive"},
		{"-keys 0", "-keys must be ≥ 1"},
		{"-dist normal", `-dist must be uniform or zipf, got "normal"`},
		{"-dist zipf -zipf-s 1", "-zipf-s must be > 1"},
		{"-algorithm fixed", `-algorithm must be counter, log or gcra, got "fixed"`},
		{"-limit 0", "-limit must be ≥ 1"},
		{"-batch 0", "-batch must be ≥ 1"},
		{"-workers many", "parsing flags"},
		{"-bogus", "parsing flags"},
		{"-workers 2 extra", `unexpected arguments ["extra"]`},
		{"-api soap", `-api must be grpc, http or envoy, got "soap"`},
		{"-target redis -api http", "-api, -endpoints, -http-endpoints and -route apply only to -target peerlimit"},
		{"-target redis -http-endpoints a:1", "-api, -endpoints, -http-endpoints and -route apply only to -target peerlimit"},
		{"-api http -route owner", "-route owner is the Go client, which speaks gRPC"},
		{"-api envoy -route owner -rls-domain d", "-route owner is the Go client, which speaks gRPC"},
		{"-api http -endpoints a:1", "with -api http use -http-endpoints"},
		{"-http-endpoints a:1", "-http-endpoints applies only to -api http"},
		{"-api http -http-endpoints ,", "-http-endpoints is empty"},
		{"-api http -http-endpoints nohost", `-http-endpoints: "nohost" is not host:port`},
		{"-rls-domain d", "-rls-domain and -rls-descriptor-key apply only to -api envoy"},
		{"-api http -rls-descriptor-key k", "-rls-domain and -rls-descriptor-key apply only to -api envoy"},
		{"-api envoy", "-rls-domain is required with -api envoy"},
		{"-api envoy -rls-domain d -rls-descriptor-key=", "-rls-descriptor-key must not be empty"},
		{"-api envoy -rls-domain d -batch 2", "-batch must be 1 with -api envoy"},
		{"-api envoy -rls-domain d -limit 5", "-limit, -window and -algorithm do not apply to -api envoy"},
		{"-api envoy -rls-domain d -window 1s", "-limit, -window and -algorithm do not apply to -api envoy"},
		{"-api envoy -rls-domain d -algorithm log", "-limit, -window and -algorithm do not apply to -api envoy"},
	}
	for _, c := range cases {
		_, err := parseFlags(strings.Fields(c.args), io.Discard)
		if assert.Error(t, err, c.args) {
			assert.Contains(t, err.Error(), c.want, c.args)
		}
	}
	// zipf-s is not checked for the uniform distribution, which ignores it.
	_, err := parseFlags(strings.Fields("-dist uniform -zipf-s 0.5"), io.Discard)
	assert.NoError(t, err)
}

func TestRealMainFlagErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, realMain([]string{"-workers", "0"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "loadgen: -workers must be ≥ 1")
	assert.Empty(t, stdout.String())

	stderr.Reset()
	assert.Equal(t, 0, realMain([]string{"-h"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "-endpoints")
}

func sampleResult() Result {
	return Result{
		Target: targetPeerlimit, API: apiGRPC, Route: routeOwner, Workers: 64, Batch: 10, Algorithm: algoCounter,
		Keys: 10_000, Dist: distZipf, DurationS: 10.002, Checks: 1000, Allowed: 900, Denied: 100,
		Errors: 3, ChecksPerS: 99.98, LatencyUnit: "call",
		LatencyUS: Percentiles{P50: 400.5, P90: 900, P99: 1500, P999: 3000},
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), CPUSeconds: 0.25,
		Calls: 100, Degraded: 2, FirstErrors: []string{"at 1.000s: boom"},
	}
}

// The JSON field names are the contract other tools read.
func TestResultJSONShape(t *testing.T) {
	b, err := json.Marshal(sampleResult())
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	var fields []string
	for k := range m {
		fields = append(fields, k)
	}
	slices.Sort(fields)
	// coalesce is omitted when false (always for redis and routes node/random),
	// api for redis, rls_domain but for api envoy.
	assert.Equal(t, []string{"algorithm", "allowed", "api", "batch", "checks", "checks_per_s", "cpu_seconds", "degraded",
		"denied", "dist", "duration_s", "errors", "keys", "latency_unit", "latency_us", "route", "started_at", "target",
		"workers"}, fields)
	lat, ok := m["latency_us"].(map[string]any)
	require.True(t, ok, "latency_us is an object")
	assert.Equal(t, map[string]any{"p50": 400.5, "p90": 900.0, "p99": 1500.0, "p999": 3000.0}, lat)
	assert.Equal(t, "call", m["latency_unit"])
	assert.Equal(t, "2026-01-02T03:04:05.000000006Z", m["started_at"])
	assert.Equal(t, 1000.0, m["checks"])
	assert.Equal(t, 10.002, m["duration_s"])
	assert.Equal(t, 0.25, m["cpu_seconds"])
	assert.Equal(t, "grpc", m["api"])

	r := sampleResult()
	r.API, r.RLSDomain, r.Algorithm = apiEnvoy, "edge", ""
	b, err = json.Marshal(r)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"api":"envoy","route":"owner","rls_domain":"edge"`)
	r.Target, r.API, r.Route, r.RLSDomain = targetRedis, "", "", ""
	b, err = json.Marshal(r)
	require.NoError(t, err)
	assert.NotContains(t, string(b), `"api"`)
}

func TestReportToStdout(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cfg := defaultConfig()
	cfg.JSON = "-"
	require.NoError(t, report(sampleResult(), cfg, &stdout, &stderr))
	var back Result
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &back), "stdout is only the JSON")
	assert.Equal(t, int64(1000), back.Checks)
	assert.Contains(t, stderr.String(), "loadgen: 3 errors; the first:\n  at 1.000s: boom\n")
}

func TestReportToFileAndSummary(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cfg := defaultConfig()
	cfg.JSON = filepath.Join(t.TempDir(), "r.json")
	require.NoError(t, report(sampleResult(), cfg, &stdout, &stderr))
	b, err := os.ReadFile(cfg.JSON)
	require.NoError(t, err)
	var back Result
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, int64(900), back.Allowed)

	out := stdout.String()
	assert.Contains(t, out, "peerlimit grpc 127.0.0.1:9090,127.0.0.1:9091,127.0.0.1:9092, route owner (coalescing on)")
	assert.Contains(t, out, "loadgen CPU 0.25s, 250.0µs per check")
	assert.Contains(t, out, "counter limit 1000000000 per 1m0s, 10000 keys zipf s=1.1, 64 workers, batch 10")
	assert.Contains(t, out, "10.00s: 1000 checks, 100 checks/s; allowed 900, denied 100, errors 3, degraded 2")
	assert.Contains(t, out, "latency per call (100 calls): p50 401µs, p90 900µs, p99 1.5ms, p99.9 3ms")

	cfg.JSON = filepath.Join(t.TempDir(), "missing", "r.json")
	assert.ErrorContains(t, report(sampleResult(), cfg, io.Discard, io.Discard), "writing the result")
}

func TestFmtUS(t *testing.T) {
	assert.Equal(t, "0s", fmtUS(0))
	assert.Equal(t, "412µs", fmtUS(412.3))
	assert.Equal(t, "1.23ms", fmtUS(1234.5))
	assert.Equal(t, "12.3ms", fmtUS(12_345))
}
