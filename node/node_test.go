package node

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Every node a test starts must be gone, goroutines and all, when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist's Shutdown stops its probe ticker but does not wait
		// for a probe in flight: that goroutine waits out its ack timer
		// and, for a silent peer, the TCP fallback ping (up to
		// TCPTimeout, 2 s on the lan profile), then ends by itself. Not
		// a leak of ours, but longer than goleak's retries.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// testNode starts a real node on loopback free ports, logging through t.
func testNode(t *testing.T, edit func(*Config)) (*Node, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.AtMilli(1_700_000_000_000)
	cfg := DefaultLocalConfig("node-a")
	cfg.Now = clk.Now
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if edit != nil {
		edit(&cfg)
	}
	n, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, n.Shutdown(ctx))
	})
	return n, clk
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func dial(t *testing.T, n *Node) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func postJSON(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "body %s", raw)
	return resp.StatusCode, out
}

// Both APIs decide against the same state, stamped by the node's clock.
func TestNodeServesGRPCAndHTTPOnOneState(t *testing.T) {
	n, clk := testNode(t, nil)
	c := pb.NewRateLimiterClient(dial(t, n))
	ctx := context.Background()
	req := &pb.CheckRequest{Key: "user:42", Limit: 3, WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG}

	for i := range 2 {
		resp, err := c.Check(ctx, req)
		require.NoError(t, err)
		assert.True(t, resp.Allowed, "call %d", i)
		assert.Equal(t, "node-a", resp.Owner)
		clk.Advance(100 * time.Millisecond)
	}
	code, body := postJSON(t, "http://"+n.HTTPAddr()+"/v1/check",
		`{"key":"user:42","limit":3,"window_ms":1000,"algorithm":"SLIDING_WINDOW_LOG"}`)
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, true, body["allowed"])
	assert.EqualValues(t, 2, body["current_count"])
	assert.EqualValues(t, 0, body["remaining"])

	resp, err := c.Check(ctx, req)
	require.NoError(t, err)
	assert.False(t, resp.Allowed)
	// The first hit (at t0) leaves the window at t0+1000ms; it is now t0+200ms.
	assert.EqualValues(t, 800, resp.RetryAfterMs)

	clk.Advance(800 * time.Millisecond)
	resp, err = c.Check(ctx, req)
	require.NoError(t, err)
	assert.True(t, resp.Allowed)
}

func TestGRPCInvalidInputNamesTheField(t *testing.T) {
	n, _ := testNode(t, nil)
	c := pb.NewRateLimiterClient(dial(t, n))
	_, err := c.Check(context.Background(), &pb.CheckRequest{Key: "", Limit: 1, WindowMs: 1000})
	st := status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code())
	assert.Contains(t, st.Message(), "key")

	neg := int64(-1)
	_, err = c.Check(context.Background(), &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1000, Hits: &neg})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestGRPCBatchAnswersEachItem(t *testing.T) {
	n, _ := testNode(t, func(c *Config) { c.Route.MaxBatch = 4 })
	c := pb.NewRateLimiterClient(dial(t, n))
	resp, err := c.CheckBatch(context.Background(), &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
		{Key: "a", Limit: 1, WindowMs: 1000},
		{Key: "", Limit: 1, WindowMs: 1000},
		{Key: "b", Limit: 20_000, WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG},
		{Key: "a", Limit: 1, WindowMs: 1000},
	}})
	require.NoError(t, err)
	require.Len(t, resp.Results, 4)
	assert.True(t, resp.Results[0].GetResponse().GetAllowed())
	assert.Equal(t, "key", resp.Results[1].GetError().GetField())
	assert.EqualValues(t, codes.InvalidArgument, resp.Results[1].GetError().GetCode())
	assert.Equal(t, "limit", resp.Results[2].GetError().GetField())
	assert.Contains(t, resp.Results[2].GetError().GetMessage(), "SLIDING_WINDOW_COUNTER")
	assert.False(t, resp.Results[3].GetResponse().GetAllowed(), "the batch's items see each other, in order")

	five := make([]*pb.CheckRequest, 5)
	for i := range five {
		five[i] = &pb.CheckRequest{Key: "x", Limit: 1, WindowMs: 1}
	}
	_, err = c.CheckBatch(context.Background(), &pb.CheckBatchRequest{Checks: five})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// A request that is not protobuf is the client's fault, and the node keeps
// serving.
func TestGRPCMalformedProtobufIsInvalidArgument(t *testing.T) {
	n, _ := testNode(t, nil)
	conn := dial(t, n)
	var out []byte
	for _, raw := range [][]byte{
		{0xff, 0xff, 0xff, 0xff},
		{0x0a, 0x02, 0xc3, 0x28}, // field 1 (key) with invalid UTF-8
		{0x10},                   // truncated varint
	} {
		err := conn.Invoke(context.Background(), "/peerlimit.v1.RateLimiter/Check", raw, &out, grpc.ForceCodecV2(rawCodec{}))
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%x: %v", raw, err)
	}
	resp, err := pb.NewRateLimiterClient(conn).Check(context.Background(), &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1})
	require.NoError(t, err)
	assert.True(t, resp.Allowed)
}

func TestOversizeGRPCMessageIsRefused(t *testing.T) {
	n, _ := testNode(t, func(c *Config) { c.MaxRecvMsgBytes = 4096 })
	c := pb.NewRateLimiterClient(dial(t, n))
	_, err := c.Check(context.Background(), &pb.CheckRequest{Key: strings.Repeat("k", 8192), Limit: 1, WindowMs: 1})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}

func TestHealthAndMetrics(t *testing.T) {
	n, _ := testNode(t, nil)
	hc := healthpb.NewHealthClient(dial(t, n))
	for _, svc := range []string{"", "peerlimit.v1.RateLimiter"} {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.Status, svc)
	}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	code, _ := postJSON(t, "http://"+n.HTTPAddr()+"/v1/check", `{"key":"m","limit":5,"window_ms":60000}`)
	require.Equal(t, http.StatusOK, code)
	resp, err = http.Get("http://" + n.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(text), `peerlimit_checks_total{algorithm="SLIDING_WINDOW_COUNTER",outcome="allowed",route="local"} 1`)
	assert.Contains(t, string(text), `peerlimit_keys{algorithm="SLIDING_WINDOW_COUNTER"} 1`)
	assert.Contains(t, string(text), "go_goroutines")
}

// Shutdown waits for in-flight calls, turns health off first, and can be
// called again.
func TestShutdownIsGracefulAndIdempotent(t *testing.T) {
	clk := fakeclock.AtMilli(1_700_000_000_000)
	cfg := DefaultLocalConfig("node-b")
	cfg.Now = clk.Now
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := Start(cfg)
	require.NoError(t, err)
	c := pb.NewRateLimiterClient(dial(t, n))
	_, err = c.Check(context.Background(), &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, n.Shutdown(ctx))
	require.NoError(t, n.Shutdown(ctx))
	_, err = http.Post("http://"+n.HTTPAddr()+"/v1/check", "application/json", bytes.NewReader(nil))
	assert.Error(t, err, "listener closed")
}

func TestStartFailsCleanlyOnBusyPort(t *testing.T) {
	a, _ := testNode(t, nil)
	cfg := DefaultLocalConfig("node-c")
	cfg.HTTPAddr = a.HTTPAddr() // taken
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := Start(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "http listen")
}

func TestConfigValidate(t *testing.T) {
	// Production defaults listen beyond loopback (:9090): valid once peers
	// authenticate (protected mode, SecurityConfig.OpenPeers).
	c := DefaultConfig()
	assert.ErrorContains(t, c.Validate(), "GRPCAddr")
	c.Security.ClusterSecrets = [][]byte{[]byte("cluster-secret-0123456789")}
	require.NoError(t, c.Validate())
	require.NoError(t, DefaultLocalConfig("n").Validate())
	c = DefaultConfig()
	c.ID, c.Route.MaxBatch, c.SweepInterval = "", 0, 0
	c.Peers.Timeout, c.Limiter.MaxKeyBytes, c.Ring.Load = 0, 0, 0.5
	err := c.Validate()
	require.Error(t, err)
	for _, s := range []string{"ID", "MaxBatch", "SweepInterval", "Timeout", "MaxKeyBytes", "Load"} {
		assert.Contains(t, err.Error(), s, "every sub-config's bad field is named, none silently replaced")
	}
	c = DefaultConfig()
	c.Partitions = 0
	assert.ErrorContains(t, c.Validate(), "Partitions must be ≥ 1")
	c.Partitions = 1 << 21 // more partitions than keys
	assert.ErrorContains(t, c.Validate(), "Limiter.MaxKeys must be ≥ the partition count")
}
