package rpc_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/rpc"
)

// ownerNode is a node B serving the Peer API over real gRPC on loopback.
// The request path's behaviour under faults is tested on the in-memory
// network (package route); these tests are about what gRPC carries: the
// metrics of real calls and request ids in metadata.
type ownerNode struct {
	*env
	route peer.Route
	logs  *testlog.Capture
	reg   *prometheus.Registry
}

func startOwner(t *testing.T, store limiter.Config) *ownerNode {
	t.Helper()
	o := &ownerNode{logs: testlog.NewCapture(), reg: prometheus.NewRegistry()}
	m, err := route.NewMetrics(o.reg)
	require.NoError(t, err)
	o.env = newEnv(t, func(eo *envOpts) {
		eo.store, eo.metrics = store, m
		eo.rpc = func(c *svcConfig) { c.NodeID, c.Logger = "n2", slog.New(o.logs) }
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(rpc.NewStrictCodec().ServerOptions()...)
	pb.RegisterPeerServer(gs, peerrpc.NewServer(o.svc.Peer))
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		assert.NoError(t, <-served)
	})
	o.route = peer.Route{ID: "n2", Addr: lis.Addr().String()}
	return o
}

// ingressNode is node A: keys starting with "b:" belong to owner, the
// rest to A.
type ingressNode struct {
	*env
	logs *testlog.Capture
	reg  *prometheus.Registry
}

func startIngress(t *testing.T, owner peer.Route, edit func(*peerrpc.Config)) *ingressNode {
	t.Helper()
	a := &ingressNode{logs: testlog.NewCapture(), reg: prometheus.NewRegistry()}
	m, err := route.NewMetrics(a.reg)
	require.NoError(t, err)
	pcfg := peerrpc.DefaultConfig()
	pcfg.Timeout = 5 * time.Second
	if edit != nil {
		edit(&pcfg)
	}
	peers, err := peerrpc.NewPeers(pcfg, "n1", m)
	require.NoError(t, err)
	t.Cleanup(peers.Close)
	a.env = newEnv(t, func(o *envOpts) {
		o.metrics = m
		o.rpc = func(c *svcConfig) {
			c.Logger = slog.New(a.logs)
			c.Peers = peers
			c.Cluster = byPrefix{"b:": owner, "": {ID: "n1"}}
		}
	})
	return a
}

// byPrefix is a route.Cluster that gives each key to the member of its
// prefix ("" for the rest); nobody is anybody's heir.
type byPrefix map[string]peer.Route

func (b byPrefix) Owner(key string) peer.Route {
	for p, r := range b {
		if p != "" && strings.HasPrefix(key, p) {
			return r
		}
	}
	return b[""]
}
func (b byPrefix) Heir(string) (peer.Route, bool) { return peer.Route{}, false }
func (b byPrefix) Members() []peer.Route {
	var out []peer.Route
	for _, r := range b {
		out = append(out, r)
	}
	return out
}
func (b byPrefix) Share() (live, known int)        { return len(b), len(b) }
func (b byPrefix) Contested(string) bool           { return false }
func (b byPrefix) Settling(string) <-chan struct{} { return nil }
func (b byPrefix) HandoffDone(string, []int)       {}

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

	// The owner cannot be reached: the fallback answers, route fallback.
	down := startIngress(t, peer.Route{ID: "n3", Addr: grpctest.DeadAddr(t)}, nil)
	got, err := down.srv.Check(ctx, counter("b:5", 5))
	require.NoError(t, err)
	assert.True(t, got.Degraded)
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_checks_total", "algorithm", c, "route", "fallback", "outcome", "allowed"))
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_forwards_total", "result", "failed"))
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_owner_unreachable_total", "policy", "local"))
	assert.Equal(t, 1.0, metric(t, down.reg, "peerlimit_forward_duration_seconds", "result", "error"))
}

func withRequestID(id string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcapi.RequestIDKey, id))
}

// A forwarded check the owner refuses (the nodes' key limits differ) is
// logged by both nodes under one request_id: the client's if it sent one,
// else the one the forward carried.
func TestRequestIDOnBothNodes(t *testing.T) {
	short := limiter.DefaultConfig()
	short.MaxKeyBytes = 8
	for _, batching := range []bool{false, true} {
		b := startOwner(t, short)
		a := startIngress(t, b.route, func(p *peerrpc.Config) {
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
	_, err = a.srv.Check(withRequestID(strings.Repeat("x", peer.MaxRequestIDBytes+1)), &pb.CheckRequest{Key: "b:ok", Limit: 5, WindowMs: 1000})
	require.NoError(t, err)
}

func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	return metrictest.Value(t, reg, name, labels...)
}

// A reservation the owner refuses (forged, rewritten, another key's) is
// the client's error, not two nodes configured differently: neither node
// warns that the settings differ (issue 38, item 8), and the client is
// told which field.
func TestBadReservationForwardedIsNoConfigDrift(t *testing.T) {
	b := startOwner(t, limiter.DefaultConfig())
	a := startIngress(t, b.route, nil)
	ctx := context.Background()
	res, err := a.srv.Check(ctx, &pb.CheckRequest{Key: "b:x", Limit: 5, WindowMs: 60_000, Op: pb.Op_RESERVE})
	require.NoError(t, err)
	require.NotEmpty(t, res.GetReservation())
	for _, bad := range []*pb.CheckRequest{
		{Key: "b:y", Limit: 5, WindowMs: 60_000, Op: pb.Op_RELEASE, Reservation: res.GetReservation()}, // another key's
		{Key: "b:x", Limit: 5, WindowMs: 60_000, Op: pb.Op_RELEASE, Reservation: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
	} {
		_, err = a.srv.Check(ctx, bad)
		requireInvalid(t, err, "reservation")
	}
	assert.Empty(t, a.logs.Find("settings differ"), "the ingress")
	assert.Empty(t, b.logs.Find("settings differ"), "the owner")
}
