package rpc_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testlog"
	"github.com/peerlimit/peerlimit/internal/wait"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/rpc"
)

// ownerNode is a node B serving the Peer API on loopback, whose Forward
// calls wait at a gate while it is shut: a slow owner.
type ownerNode struct {
	*env
	route rpc.Route
	logs  *testlog.Capture
	reg   *prometheus.Registry

	mu   sync.Mutex
	gate chan struct{} // nil: open
	// late makes a call that waited at the gate also wait for its caller
	// to give up (its deadline), so the owner decides after it, as a slow
	// owner does: the caller's cancellation reaches the owner
	// asynchronously, and could otherwise arrive after the decision.
	late bool
}

func (o *ownerNode) shut() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gate == nil {
		o.gate = make(chan struct{})
	}
}

func (o *ownerNode) open() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gate != nil {
		close(o.gate)
		o.gate = nil
	}
}

func (o *ownerNode) wait(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	o.mu.Lock()
	g, late := o.gate, o.late
	o.mu.Unlock()
	if g != nil {
		<-g // deliberately deaf to ctx: the owner decides late
		if late {
			<-ctx.Done()
		}
	}
	return h(ctx, req)
}

func startOwner(t *testing.T, store limiter.Config) *ownerNode {
	t.Helper()
	o := &ownerNode{logs: testlog.NewCapture(), reg: prometheus.NewRegistry()}
	m, err := rpc.NewMetrics(o.reg)
	require.NoError(t, err)
	o.env = newEnv(t, func(eo *envOpts) {
		eo.store, eo.metrics = store, m
		eo.rpc = func(c *rpc.Config) { c.NodeID, c.Logger = "n2", slog.New(o.logs) }
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(rpc.NewStrictCodec().ServerOptions(o.wait)...)
	pb.RegisterPeerServer(gs, rpc.NewPeerServer(o.svc))
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		o.open()
		gs.Stop()
		assert.NoError(t, <-served)
	})
	o.route = rpc.Route{ID: "n2", Addr: lis.Addr().String()}
	return o
}

// ingressNode is node A: keys starting with "b:" belong to owner, the
// rest to A.
type ingressNode struct {
	*env
	logs *testlog.Capture
	reg  *prometheus.Registry
}

func startIngress(t *testing.T, owner rpc.Route, edit func(*rpc.Config, *rpc.PeersConfig)) *ingressNode {
	t.Helper()
	a := &ingressNode{logs: testlog.NewCapture(), reg: prometheus.NewRegistry()}
	m, err := rpc.NewMetrics(a.reg)
	require.NoError(t, err)
	pcfg := rpc.PeersConfig{SelfID: "n1", Timeout: 5 * time.Second, Metrics: m}
	rcfg := rpc.DefaultConfig()
	if edit != nil {
		edit(&rcfg, &pcfg)
	}
	peers := rpc.NewPeers(pcfg)
	t.Cleanup(peers.Close)
	a.env = newEnv(t, func(o *envOpts) {
		o.metrics = m
		o.rpc = func(c *rpc.Config) {
			c.Logger = slog.New(a.logs)
			c.Peers = peers
			c.Owner = func(key string) rpc.Route {
				if strings.HasPrefix(key, "b:") {
					return owner
				}
				return rpc.Route{ID: "n1"}
			}
			c.Fallback, c.MaxInflightForwards = rcfg.Fallback, rcfg.MaxInflightForwards
		}
	})
	return a
}

func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// checks_total counts every client check once, on the node it reached,
// by route; the owner counts what it decided for others apart.
func TestMetricsByRoute(t *testing.T) {
	b := startOwner(t, limiter.DefaultConfig())
	a := startIngress(t, b.route, nil)
	ctx := context.Background()
	counter := func(key string, limit int64) *pb.CheckRequest {
		return &pb.CheckRequest{Key: key, Limit: limit, WindowMs: 60_000}
	}
	// Local: 2 allowed, 1 denied. Forwarded: 1 allowed, 1 denied, 1 refused
	// here as invalid.
	for range 3 {
		_, _ = a.srv.Check(ctx, counter("a:1", 2))
	}
	for range 2 {
		_, err := a.srv.Check(ctx, logReq("b:1", 1, 60_000))
		require.NoError(t, err)
	}
	_, err := a.srv.Check(ctx, &pb.CheckRequest{Key: "b:2", Limit: 0, WindowMs: 1000})
	requireInvalid(t, err, "limit")

	checks := func(algo, route, outcome string) float64 {
		return metric(t, a.reg, "peerlimit_checks_total", "algorithm", algo, "route", route, "outcome", outcome)
	}
	const c, l = "SLIDING_WINDOW_COUNTER", "SLIDING_WINDOW_LOG"
	assert.Equal(t, 2.0, checks(c, "local", "allowed"))
	assert.Equal(t, 1.0, checks(c, "local", "denied"))
	assert.Equal(t, 1.0, checks(l, "forwarded", "allowed"))
	assert.Equal(t, 1.0, checks(l, "forwarded", "denied"))
	assert.Equal(t, 1.0, checks(c, "forwarded", "error"))
	assert.Equal(t, 2.0, metric(t, a.reg, "peerlimit_forwards_total", "result", "ok"))
	assert.Equal(t, 2.0, metric(t, a.reg, "peerlimit_forward_duration_seconds", "result", "ok"), "one observation per call")
	assert.Equal(t, 2.0, metric(t, a.reg, "peerlimit_forward_batch_size"))
	// The owner counts its decisions for A apart, not as client checks.
	assert.Equal(t, 1.0, metric(t, b.reg, "peerlimit_peer_checks_total", "algorithm", l, "outcome", "allowed"))
	assert.Equal(t, 1.0, metric(t, b.reg, "peerlimit_peer_checks_total", "algorithm", l, "outcome", "denied"))
	assert.Zero(t, metric(t, b.reg, "peerlimit_checks_total", "algorithm", l, "route", "local", "outcome", "allowed"))

	// A batch: one observation of its size; the forwarded part goes as one
	// call of 2 checks.
	_, err = a.srv.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
		counter("a:2", 5), counter("b:3", 5), counter("b:4", 5)}})
	require.NoError(t, err)
	assert.Equal(t, 1.0, metric(t, a.reg, "peerlimit_check_batch_size"))
	assert.Equal(t, 2.0, checks(c, "forwarded", "allowed"))
	assert.Equal(t, 3.0, metric(t, a.reg, "peerlimit_forward_batch_size"))

	// The owner stops answering: the fallback answers, route fallback.
	b.shut()
	down := startIngress(t, rpc.Route{ID: "n3", Addr: deadAddr(t)}, nil)
	got, err := down.srv.Check(ctx, counter("b:5", 5))
	require.NoError(t, err)
	assert.True(t, got.Degraded)
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_checks_total", "algorithm", c, "route", "fallback", "outcome", "allowed"))
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_forwards_total", "result", "failed"))
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_owner_unreachable_total", "policy", "local"))
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_forward_duration_seconds", "result", "error"))
}

// Over MaxInflightForwards a check is refused at once, RESOURCE_EXHAUSTED
// (429 over HTTP) naming the flag, and counted; a batch's items over the
// bound get their own errors; once the owner answers, the node recovers.
func TestInflightForwardsBound(t *testing.T) {
	b := startOwner(t, limiter.DefaultConfig())
	a := startIngress(t, b.route, func(c *rpc.Config, _ *rpc.PeersConfig) { c.MaxInflightForwards = 3 })
	http := httptest.NewServer(httpapi.NewHandler(a.svc, httpapi.Config{}))
	t.Cleanup(http.Close)
	ctx := context.Background()
	b.shut()

	var wg sync.WaitGroup
	results := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			_, results[i] = a.srv.Check(ctx, &pb.CheckRequest{Key: "b:slow", Limit: 100, WindowMs: 60_000})
		})
	}
	wait.For(t, 10*time.Second, func() (bool, string) {
		return a.svc.InflightForwards() == 3, "3 checks waiting on the owner"
	})

	_, err := a.srv.Check(ctx, &pb.CheckRequest{Key: "b:over", Limit: 100, WindowMs: 60_000})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "--max-inflight-forwards")

	code, body := postHTTP(t, http.URL+"/v1/check", `{"key":"b:over","limit":100,"window_ms":60000}`)
	assert.Equal(t, 429, code, body)
	assert.Contains(t, body, `"code":"RESOURCE_EXHAUSTED"`)
	assert.Contains(t, body, "--max-inflight-forwards")

	// Keys this node owns do not wait on anyone: still served.
	_, err = a.srv.Check(ctx, &pb.CheckRequest{Key: "a:mine", Limit: 100, WindowMs: 60_000})
	require.NoError(t, err)
	batch, err := a.srv.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
		{Key: "a:mine", Limit: 100, WindowMs: 60_000}, {Key: "b:x", Limit: 100, WindowMs: 60_000}, {Key: "b:y", Limit: 100, WindowMs: 60_000}}})
	require.NoError(t, err)
	require.Len(t, batch.Results, 3)
	assert.NotNil(t, batch.Results[0].GetResponse())
	for _, r := range batch.Results[1:] {
		assert.Equal(t, uint32(codes.ResourceExhausted), r.GetError().GetCode(), "%v", r)
	}
	assert.Equal(t, 4.0, metric(t, a.reg, "peerlimit_forwards_total", "result", "refused"))
	assert.Equal(t, 4.0, metric(t, a.reg, "peerlimit_checks_total", "algorithm", "SLIDING_WINDOW_COUNTER", "route", "forwarded", "outcome", "error"))
	warned := a.logs.Find("too many forwarded checks in flight")
	require.NotEmpty(t, warned)
	assert.Equal(t, "3", warned[0].Attrs["max_inflight_forwards"])

	// The owner answers: the waiting checks complete, and the node recovers.
	b.open()
	wg.Wait()
	for _, err := range results {
		assert.NoError(t, err)
	}
	assert.Zero(t, a.svc.InflightForwards())
	_, err = a.srv.Check(ctx, &pb.CheckRequest{Key: "b:over", Limit: 100, WindowMs: 60_000})
	require.NoError(t, err)
	batch, err = a.srv.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
		{Key: "b:x", Limit: 100, WindowMs: 60_000}, {Key: "b:y", Limit: 100, WindowMs: 60_000}}})
	require.NoError(t, err)
	for _, r := range batch.Results {
		assert.NotNil(t, r.GetResponse(), "%v", r)
	}
	assert.Zero(t, a.svc.InflightForwards())
}

func postHTTP(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func withRequestID(id string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(rpc.RequestIDKey, id))
}

// A forwarded check the owner refuses (the nodes' key limits differ) is
// logged by both nodes under one request_id: the client's if it sent one,
// else the one the forward carried.
func TestRequestIDOnBothNodes(t *testing.T) {
	short := limiter.DefaultConfig()
	short.MaxKeyBytes = 8
	for _, batching := range []bool{false, true} {
		b := startOwner(t, short)
		a := startIngress(t, b.route, func(_ *rpc.Config, p *rpc.PeersConfig) {
			if !batching {
				p.BatchLimit = 1
			}
		})
		key := "b:" + strings.Repeat("k", 20) // fine for A, too long for B

		_, err := a.srv.Check(withRequestID("client-id-1"), &pb.CheckRequest{Key: key, Limit: 5, WindowMs: 1000})
		requireInvalid(t, err, "key")
		sent, got := a.logs.Find("the owner refused a forwarded check"), b.logs.Find("refused a forwarded check the sender accepted")
		require.Len(t, sent, 1, "batching=%v", batching)
		require.Len(t, got, 1)
		assert.Equal(t, "client-id-1", sent[0].Attrs["request_id"])
		assert.Equal(t, "client-id-1", got[0].Attrs["request_id"], "the owner logs the client's id")
		assert.Equal(t, "n1", got[0].Attrs["origin"])
		assert.Equal(t, "key", got[0].Attrs["field"])
	}

	// No client id: the forward's generated one, the same on both sides.
	b := startOwner(t, short)
	a := startIngress(t, b.route, nil)
	_, err := a.srv.Check(context.Background(), &pb.CheckRequest{Key: "b:" + strings.Repeat("k", 20), Limit: 5, WindowMs: 1000})
	requireInvalid(t, err, "key")
	sent, got := a.logs.Find("the owner refused"), b.logs.Find("refused a forwarded check")
	require.Len(t, sent, 1)
	require.Len(t, got, 1)
	require.Len(t, sent[0].Attrs["request_id"], 16)
	assert.Equal(t, sent[0].Attrs["request_id"], got[0].Attrs["request_id"])

	// An invalid client id (spaces, too long) is ignored, never refused.
	_, err = a.srv.Check(withRequestID("has spaces"), &pb.CheckRequest{Key: "b:ok", Limit: 5, WindowMs: 1000})
	require.NoError(t, err)
	_, err = a.srv.Check(withRequestID(strings.Repeat("x", rpc.MaxRequestIDBytes+1)), &pb.CheckRequest{Key: "b:ok", Limit: 5, WindowMs: 1000})
	require.NoError(t, err)
}

// A slow owner: the sender gives up and answers by its fallback, the owner
// decides late; both log it, under the client's request id.
func TestRequestIDWhenTheOwnerIsSlow(t *testing.T) {
	b := startOwner(t, limiter.DefaultConfig())
	// The timeout leaves the call time to reach the owner (which then waits
	// at its gate) even on a loaded machine; the connection is made first.
	a := startIngress(t, b.route, func(_ *rpc.Config, p *rpc.PeersConfig) { p.Timeout = time.Second })
	_, err := a.srv.Check(context.Background(), &pb.CheckRequest{Key: "b:warm", Limit: 5, WindowMs: 60_000})
	require.NoError(t, err)
	b.mu.Lock()
	b.late = true
	b.mu.Unlock()
	b.shut()
	got, err := a.srv.Check(withRequestID("slow-1"), &pb.CheckRequest{Key: "b:slow", Limit: 5, WindowMs: 60_000})
	require.NoError(t, err)
	assert.True(t, got.Degraded, "answered by the fallback")
	b.open()

	sent := a.logs.Find("owner unreachable")
	require.Len(t, sent, 1)
	assert.Equal(t, "slow-1", sent[0].Attrs["request_id"])
	wait.For(t, 10*time.Second, func() (bool, string) {
		return len(b.logs.Find("after the caller stopped waiting")) == 1, "the owner logs its late decision"
	})
	late := b.logs.Find("after the caller stopped waiting")[0]
	assert.Equal(t, "slow-1", late.Attrs["request_id"])
	assert.Equal(t, "1", late.Attrs["checks"])
}

func TestValidRequestID(t *testing.T) {
	for _, id := range []string{"a", "0af7651916cd43dd8448eb211c80319c", "req-1:2/3", strings.Repeat("x", rpc.MaxRequestIDBytes)} {
		assert.True(t, rpc.ValidRequestID(id), id)
	}
	for _, id := range []string{"", "a b", "tab\t", "new\nline", "é", strings.Repeat("x", rpc.MaxRequestIDBytes+1)} {
		assert.False(t, rpc.ValidRequestID(id), id)
	}
	ids := map[string]bool{}
	for range 1000 {
		id := rpc.NewRequestID()
		require.True(t, rpc.ValidRequestID(id))
		ids[id] = true
	}
	assert.Len(t, ids, 1000)
}
