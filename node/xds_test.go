package node_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/internal/testkit/xdsserver"
	"github.com/peerlimit/peerlimit/node"
)

// xdsProbe is what Envoy and a readiness probe see of an xDS node.
type xdsProbe struct {
	t      *testing.T
	n      *node.Node
	rls    rlspb.RateLimitServiceClient
	health healthpb.HealthClient
}

// startXDSNode starts a node subscribed to srv as nodeID, with short
// waits, logging to log.
func startXDSNode(t *testing.T, srv *xdsserver.Server, nodeID string, log slog.Handler, edit func(*node.Config)) xdsProbe {
	t.Helper()
	n := startRLSNode(t, func(cfg *node.Config) {
		cfg.Logger = slog.New(log)
		x := &cfg.EnvoyRLSXDS
		x.ServerAddr, x.NodeID = srv.Addr, nodeID
		x.BackoffInitial, x.BackoffMax, x.NoResponseWarning = 50*time.Millisecond, 500*time.Millisecond, 300*time.Millisecond
		if edit != nil {
			edit(cfg)
		}
	})
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return xdsProbe{t: t, n: n, rls: rlspb.NewRateLimitServiceClient(conn), health: healthpb.NewHealthClient(conn)}
}

func (p xdsProbe) serviceHealth() healthpb.HealthCheckResponse_ServingStatus {
	resp, err := p.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
	require.NoError(p.t, err)
	return resp.GetStatus()
}

func (p xdsProbe) healthz() int {
	resp, err := http.Get("http://" + p.n.HTTPAddr() + "/healthz")
	require.NoError(p.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// ready reports whether both health signals agree on want.
func (p xdsProbe) ready(want bool) (bool, string) {
	h, code := p.serviceHealth(), p.healthz()
	got := h == healthpb.HealthCheckResponse_SERVING && code == http.StatusOK
	down := h == healthpb.HealthCheckResponse_NOT_SERVING && code == http.StatusServiceUnavailable
	return want && got || !want && down, "service health " + h.String() + ", /healthz " + http.StatusText(code)
}

func apiLimit(rpu uint32) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{Name: "default/api", Domain: "api", Descriptors: []*rlsconfpb.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_HOUR, RequestsPerUnit: rpu}}}}
}

// Envoy Gateway serves node id envoy-ratelimit only. A node left at the
// default id gets an open, silent stream: it serves nothing (UNAVAILABLE,
// not ready) and logs one warning naming the id and the control plane.
func TestXDSWrongNodeIDIsServedNothingAndWarned(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", apiLimit(5))
	capture := testlog.NewCapture()
	p := startXDSNode(t, srv, "default", capture, nil)

	const warning = "does the control plane serve this node id?"
	wait.For(t, 5*time.Second, func() (bool, string) { return len(capture.Find(warning)) > 0, "no warning; " + srv.String() })
	w := capture.Find(warning)[0]
	require.Equal(t, slog.LevelWarn, w.Level)
	require.Equal(t, "default", w.Attrs["node_id"])
	require.Equal(t, srv.Addr, w.Attrs["xds_server"])

	_, err := p.rls.ShouldRateLimit(context.Background(), rlsRequest("api", "user=a"))
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	ok, why := p.ready(false)
	require.True(t, ok, why)
	require.Empty(t, srv.Answers(), "the control plane served a node id it does not know")
}

// With EnvoyRLSHealthyNeedsDomains (upstream's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) the node is not ready whenever
// the configuration in force has no domains, as upstream: Envoy Gateway
// serves such a snapshot when its last Gateway is deleted. The calls are
// answered meanwhile, limiting nothing. Without it (upstream's default,
// and Envoy Gateway's) the node stays ready.
func TestXDSHealthFollowsTheDomainsInForce(t *testing.T) {
	for _, needs := range []bool{true, false} {
		t.Run(map[bool]string{true: "healthy-needs-domains", false: "default"}[needs], func(t *testing.T) {
			srv := xdsserver.Start(t, nil)
			srv.Set(t, "v1", apiLimit(5))
			log := slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn})
			p := startXDSNode(t, srv, xdsserver.EnvoyGatewayNodeID, log, func(cfg *node.Config) {
				cfg.EnvoyRLSHealthyNeedsDomains = needs
			})
			wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })
			wait.For(t, 5*time.Second, func() (bool, string) { return p.ready(true) })

			srv.Set(t, "v2")
			wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("") == 1, srv.String() })
			wait.For(t, 5*time.Second, func() (bool, string) { return p.ready(!needs) })
			resp, err := p.rls.ShouldRateLimit(context.Background(), rlsRequest("api", "user=a"))
			require.NoError(t, err)
			require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())

			srv.Set(t, "v3", apiLimit(5))
			wait.For(t, 5*time.Second, func() (bool, string) { return p.ready(true) })
		})
	}
}

// loaded_at_ms says when the rules were put in force: before the first
// configuration nothing was (0; the placeholder's time is not kept, so
// that a first configuration with no domains, which has its digest, is
// dated when it comes), and the first is dated when it comes, not when
// the placeholder was first looked at.
func TestXDSLoadedAtIsTheFirstConfigurations(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	clk := fakeclock.AtMilli(1_700_000_000_000)
	log := slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn})
	p := startXDSNode(t, srv, xdsserver.EnvoyGatewayNodeID, log, func(cfg *node.Config) { cfg.Now = clk.Now })
	loadedAt := func() int64 { return envoyRLSConfigOf(t, p.n).LoadedAtMS }
	assert.Zero(t, loadedAt(), "nothing in force yet")
	clk.Advance(time.Minute)
	srv.Set(t, "v1", apiLimit(5))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })
	assert.Equal(t, clk.Now().UnixMilli(), loadedAt())
}
