package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// scrape returns the value of the first series of n's /metrics whose line
// starts with series (name and labels as Prometheus prints them).
func scrape(t *testing.T, n *node.Node, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	require.NotNil(t, m, "no series %s in /metrics", series)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

func postHTTP(t *testing.T, url, body string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

const sweepInterval = 50 * time.Millisecond

// capNode is one node with a small key cap: 7 partitions of 10 keys.
func capNode(t *testing.T, overflow limiter.OverflowPolicy) (*node.Node, *testlog.Capture) {
	t.Helper()
	logs := testlog.NewCapture()
	c := testcluster.New(t, 1, func(cfg *node.Config) {
		cfg.Partitions = 7
		cfg.Limiter.MaxKeys, cfg.Limiter.Overflow = 70, overflow
		cfg.Limiter.MaxLogLimit, cfg.Limiter.MaxLogEntries = 100, 700
		cfg.SweepInterval = sweepInterval // the capacity warning comes with the sweep
		cfg.Logger = slog.New(logs)
	})
	return c.Node(0), logs
}

// flood sends n checks of unique keys under a one-minute window, in
// batches, and returns the results.
func flood(t *testing.T, n *node.Node, count int) []httpapi.CheckResult {
	t.Helper()
	var out []httpapi.CheckResult
	for start := 0; start < count; start += 100 {
		var checks []string
		for i := start; i < min(start+100, count); i++ {
			checks = append(checks, fmt.Sprintf(`{"key":"flood:%d","limit":10,"window_ms":60000}`, i))
		}
		code, body, _ := postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check:batch", `{"checks":[`+strings.Join(checks, ",")+`]}`)
		require.Equal(t, http.StatusOK, code, body)
		var resp httpapi.CheckBatchResponse
		require.NoError(t, json.Unmarshal([]byte(body), &resp))
		out = append(out, resp.Results...)
	}
	return out
}

// legit are the well-behaved clients' keys: an hour's window, 3 hits each.
var legit = []string{"tenant:1", "tenant:2", "tenant:3", "tenant:4", "tenant:5"}

func hitLegit(t *testing.T, n *node.Node) {
	t.Helper()
	for _, k := range legit {
		for range 3 {
			code, body, _ := postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check", `{"key":"`+k+`","limit":10,"window_ms":`+fmt.Sprint(hourish.Milliseconds())+`}`)
			require.Equal(t, http.StatusOK, code, body)
		}
	}
}

func legitCounts(t *testing.T, n *node.Node) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, k := range legit {
		code, body, _ := postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check", `{"key":"`+k+`","limit":10,"window_ms":`+fmt.Sprint(hourish.Milliseconds())+`,"hits":0}`)
		require.Equal(t, http.StatusOK, code, body)
		var resp httpapi.CheckResponse
		require.NoError(t, json.Unmarshal([]byte(body), &resp))
		out[k] = resp.CurrentCount
	}
	return out
}

// A flood of unique keys under --overflow=evict: every check is answered,
// the cap holds, each eviction is counted and the node says so in its log.
// The documented policy drops the sampled key that expires soonest, so the
// flood's one-minute keys go before the tenants' one-hour keys, which keep
// their counts.
func TestKeyFloodUnderEvict(t *testing.T) {
	n, logs := capNode(t, limiter.OverflowEvict)
	hitLegit(t, n)
	start := time.Now()
	for i, r := range flood(t, n, 500) {
		require.Nil(t, r.Error, "flood check %d", i)
		require.True(t, r.Response.Allowed)
	}
	sweeps := int(time.Since(start)/sweepInterval) + 2 // sweeps that can have seen the flood

	evicted := scrape(t, n, `peerlimit_evictions_total{cap="keys"}`)
	assert.Greater(t, evicted, 400.0, "most of the flood evicted itself")
	assert.Zero(t, scrape(t, n, `peerlimit_rejections_total{cap="keys"}`))
	assert.LessOrEqual(t, scrape(t, n, `peerlimit_keys{algorithm="SLIDING_WINDOW_COUNTER"}`), 70.0, "the cap holds")
	assert.Equal(t, 70.0, scrape(t, n, `peerlimit_capacity{cap="keys"}`))
	for k, c := range legitCounts(t, n) {
		assert.EqualValues(t, 3, c, "%s kept its count", k)
	}

	wait.For(t, 5*time.Second, func() (bool, string) {
		return len(logs.Find("store at capacity")) > 0, "a capacity warning"
	})
	w := logs.Find("store at capacity")
	assert.Contains(t, w[0].Msg, "evicted live keys")
	assert.Equal(t, slog.LevelWarn, w[0].Level)
	assert.Equal(t, "evict", w[0].Attrs["overflow"])
	assert.Equal(t, "70", w[0].Attrs["max_keys"])
	total := 0
	for _, r := range w {
		v, err := strconv.Atoi(r.Attrs["evicted_keys"])
		require.NoError(t, err)
		total += v
	}
	assert.EqualValues(t, evicted, total, "the warnings account for every eviction")
	assert.LessOrEqual(t, len(w), sweeps, "one line per sweep, not one per eviction")
}

// The same flood under --overflow=reject: the flood's new keys are refused
// with RESOURCE_EXHAUSTED (429) naming --max-keys, counted and logged; every
// key held stays exact.
func TestKeyFloodUnderReject(t *testing.T) {
	n, logs := capNode(t, limiter.OverflowReject)
	hitLegit(t, n)
	refused := 0
	for _, r := range flood(t, n, 500) {
		if r.Error != nil {
			refused++
			assert.Equal(t, "RESOURCE_EXHAUSTED", r.Error.Code)
			assert.Contains(t, r.Error.Message, "--max-keys")
		}
	}
	assert.Greater(t, refused, 400)
	assert.EqualValues(t, refused, scrape(t, n, `peerlimit_rejections_total{cap="keys"}`))
	assert.Zero(t, scrape(t, n, `peerlimit_evictions_total{cap="keys"}`))
	for k, c := range legitCounts(t, n) {
		assert.EqualValues(t, 3, c, "%s kept its count", k)
	}

	// One check alone: HTTP 429, and gRPC RESOURCE_EXHAUSTED.
	code, body, _ := postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check", `{"key":"flood:new","limit":10,"window_ms":60000}`)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, "--max-keys")
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = pb.NewRateLimiterClient(conn).Check(context.Background(), &pb.CheckRequest{Key: "flood:newer", Limit: 10, WindowMs: 60_000})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)

	wait.For(t, 5*time.Second, func() (bool, string) {
		return len(logs.Find("store at capacity: refused")) > 0, "a capacity warning"
	})
	assert.Equal(t, "reject", logs.Find("store at capacity")[0].Attrs["overflow"])
}

// The log budget: under reject, a log that cannot grow is refused with 429
// naming --max-log-entries.
func TestLogBudgetOverHTTP(t *testing.T) {
	n, _ := capNode(t, limiter.OverflowReject)
	// Two log keys in one shard, whose share is 700/7 = 100 entries.
	var keys []string
	for i := 0; len(keys) < 2; i++ {
		if k := fmt.Sprintf("log:%d", i); n.Store().Transfer().PartitionOf(k) == 0 {
			keys = append(keys, k)
		}
	}
	code, body, _ := postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check",
		`{"key":"`+keys[0]+`","limit":100,"window_ms":60000,"algorithm":"SLIDING_WINDOW_LOG","hits":100}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body, _ = postHTTP(t, "http://"+n.HTTPAddr()+"/v1/check",
		`{"key":"`+keys[1]+`","limit":100,"window_ms":60000,"algorithm":"SLIDING_WINDOW_LOG"}`)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, `"code":"RESOURCE_EXHAUSTED"`)
	assert.Contains(t, body, "--max-log-entries")
	assert.Equal(t, 1.0, scrape(t, n, `peerlimit_rejections_total{cap="log_entries"}`))
	assert.Equal(t, 100.0, scrape(t, n, `peerlimit_log_slots`))
	assert.Equal(t, 100.0, scrape(t, n, `peerlimit_log_entries`))
	assert.Positive(t, scrape(t, n, `peerlimit_state_bytes`))
}

// A forwarded check the owner logs about carries the client's request id
// into both nodes' logs, over HTTP and gRPC; the HTTP answer echoes it.
func TestRequestIDAcrossNodes(t *testing.T) {
	logs := map[string]*testlog.Capture{"node-0": testlog.NewCapture(), "node-1": testlog.NewCapture()}
	c := testcluster.New(t, 2, func(cfg *node.Config) {
		cfg.Logger = slog.New(logs[cfg.ID])
		if cfg.ID == "node-1" {
			cfg.Limiter.MaxKeyBytes = 16 // a misconfigured owner: shorter keys than node-0 accepts
		}
	})
	ingress := c.Node(0)
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("a-key-longer-than-sixteen-bytes:%d", i); ingress.Ring().Owner(k).ID == "node-1" {
			key = k
		}
	}

	code, body, hdr := postHTTP(t, "http://"+ingress.HTTPAddr()+"/v1/check", `{"key":"`+key+`","limit":5,"window_ms":60000}`,
		"X-Request-Id", "http-req-1")
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `"field":"key"`)
	assert.Equal(t, "http-req-1", hdr.Get("X-Request-Id"))
	sent, got := logs["node-0"].Find("the owner refused a forwarded check"), logs["node-1"].Find("refused a forwarded check the sender accepted")
	require.Len(t, sent, 1)
	require.Len(t, got, 1)
	assert.Equal(t, "http-req-1", sent[0].Attrs["request_id"])
	assert.Equal(t, "http-req-1", got[0].Attrs["request_id"])
	assert.Equal(t, "node-1", sent[0].Attrs["owner"])
	assert.Equal(t, "node-0", got[0].Attrs["origin"])

	// gRPC metadata, a second later (the warnings are rate-limited to one a
	// second per node).
	conn, err := grpc.NewClient(ingress.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", "grpc-req-2")
	wait.For(t, 5*time.Second, func() (bool, string) {
		_, err := pb.NewRateLimiterClient(conn).Check(ctx, &pb.CheckRequest{Key: key, Limit: 5, WindowMs: 60_000})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		return len(logs["node-1"].Find("refused a forwarded check")) >= 2 && len(logs["node-0"].Find("the owner refused")) >= 2,
			"both nodes' second warnings"
	})
	assert.Equal(t, "grpc-req-2", logs["node-0"].Find("the owner refused")[1].Attrs["request_id"])
	assert.Equal(t, "grpc-req-2", logs["node-1"].Find("refused a forwarded check")[1].Attrs["request_id"])
}

// docs/operations.md documents every peerlimit_ metric a node exposes,
// and nothing it does not.
func TestOperationsDocListsEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(peerlimit_[a-z_]+)`").FindAllSubmatch(doc, -1) {
		documented[string(m[1])] = true
	}
	require.NotEmpty(t, documented)

	// With a policy file, so that the metrics of a configuration read
	// from files (peerlimit_config_info, its reload timestamp) exist.
	path := filepath.Join(t.TempDir(), "policies.yaml")
	require.NoError(t, os.WriteFile(path, []byte("login: {algorithm: SLIDING_WINDOW_LOG, limit: 3, window: 1h}\n"), 0o600))
	// With a data directory, so that persistence's metrics exist, and a
	// fault, so that peerlimit_fault_injection_active has a series.
	dir := t.TempDir()
	n := testcluster.New(t, 1, func(c *node.Config) {
		c.PoliciesFile, c.Persist.Dir, c.Faults = path, dir, []string{"clock_offset"}
	}).Node(0)
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (peerlimit_[a-z_]+) `).FindAllSubmatch(body, -1) {
		exposed[string(m[1])] = true
	}
	for name := range exposed {
		assert.True(t, documented[name], "%s is exposed but not in docs/operations.md", name)
	}
	for name := range documented {
		assert.True(t, exposed[name], "%s is in docs/operations.md but not exposed", name)
	}
}
