package envoyrls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/internal/testkit/xdsserver"
	"github.com/peerlimit/peerlimit/node"
)

// edgeLimit is domain edge limiting each client to rpu an hour, as Envoy
// Gateway's controller would serve it.
func edgeLimit(rpu uint32) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{Name: "default/edge", Domain: "edge", Descriptors: []*rlsconfpb.RateLimitDescriptor{{
		Key: "client", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_HOUR, RequestsPerUnit: rpu},
	}}}
}

// xdsNodes subscribes every node of a cluster to srv under one node id,
// as Envoy Gateway's replicas share CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit.
func xdsNodes(srv *xdsserver.Server) func(*node.Config) {
	return func(cfg *node.Config) {
		cfg.EnvoyRLSXDS.ServerAddr, cfg.EnvoyRLSXDS.NodeID = srv.Addr, xdsserver.EnvoyGatewayNodeID
		cfg.EnvoyRLSXDS.BackoffInitial, cfg.EnvoyRLSXDS.BackoffMax = 50*time.Millisecond, 500*time.Millisecond
	}
}

// limitEverywhere waits until every live node serves rpu for domain edge.
func limitEverywhere(t *testing.T, c *testcluster.Cluster, within time.Duration, rpu uint32) {
	t.Helper()
	wait.For(t, within, func() (bool, string) {
		for _, n := range c.Live() {
			rules := n.Configs().EnvoyRLSConfig().Rules()
			if len(rules) != 1 || rules[0].RequestsPerUnit != rpu {
				return false, fmt.Sprintf("%s serves %d rules, want edge at %d", n.ID(), len(rules), rpu)
			}
		}
		return true, ""
	})
}

// A three-node cluster driven by go-control-plane's own SotW server:
// the served limit holds over the cluster, a changed snapshot is in force
// on every node within 2 s, and a bad one is refused by every node,
// which keeps the limit in force.
func TestXDSDrivesTheClustersLimits(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", edgeLimit(5))
	c := testcluster.New(t, 3, xdsNodes(srv))
	c.WaitConverged()
	limitEverywhere(t, c, 5*time.Second, 5)
	rc := clientsOf(t, c)

	call := func(i int) rlspb.RateLimitResponse_Code {
		resp, err := rc[i%3].ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("client=acme")}})
		require.NoError(t, err)
		return resp.GetOverallCode()
	}
	for i := range 5 {
		require.Equal(t, rlspb.RateLimitResponse_OK, call(i), "call %d of 5 under v1's limit", i)
	}
	require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(5), "the 6th call, over v1's limit of 5")

	srv.Set(t, "v2", edgeLimit(8))
	limitEverywhere(t, c, 2*time.Second, 8)
	// In force first, acknowledged after.
	wait.For(t, 2*time.Second, func() (bool, string) { return srv.Acked("v2") >= 3, "every node ACKs v2: " + srv.String() })
	for i := range 3 {
		require.Equal(t, rlspb.RateLimitResponse_OK, call(i), "call %d: v2 raised the limit to 8 and 5 are counted", i)
	}
	require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(3), "the 9th call, over v2's limit of 8")

	bad := edgeLimit(100)
	bad.Descriptors[0].RateLimit.Unit = rlsconfpb.RateLimitUnit_UNKNOWN
	srv.Set(t, "v3", bad)
	// The nodes share one node id; their streams tell them apart.
	wait.For(t, 5*time.Second, func() (bool, string) {
		nacked := map[int64]bool{}
		for _, a := range srv.Answers() {
			if a.Nack != "" && a.Version == "v2" {
				nacked[a.Stream] = true
			}
		}
		return len(nacked) == 3, fmt.Sprintf("NACKs keeping v2 on streams %v; %s", nacked, srv)
	})
	limitEverywhere(t, c, time.Second, 8)
	require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(4), "v3 was refused: v2's limit of 8 still holds")

	// SIGHUP's reload has nothing to read from a control plane: it
	// neither fails nor counts a reload.
	require.NoError(t, c.Node(0).Configs().ReloadEnvoyRLS())
	assert.Equal(t, 0.0, metrictest.Value(t, metrictest.Scrape("http://"+c.Node(0).HTTPAddr()+"/metrics"),
		"peerlimit_envoy_rls_config_reloads_total", "result", "ok"))
}

// Until the control plane has served a configuration, the service is not
// ready: UNAVAILABLE and NOT_SERVING, never an OK that limits nothing.
func TestXDSNodeServesNothingBeforeItsFirstConfig(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	c := testcluster.New(t, 1, xdsNodes(srv))
	conn, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	rls, health := rlspb.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("client=acme")}}
	healthOf := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
		require.NoError(t, err)
		return resp.GetStatus()
	}

	_, err = rls.ShouldRateLimit(context.Background(), req)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), srv.Addr)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, healthOf())

	srv.Set(t, "v1", edgeLimit(1))
	wait.For(t, 5*time.Second, func() (bool, string) {
		return healthOf() == healthpb.HealthCheckResponse_SERVING, "the service is not SERVING after the first configuration"
	})
	resp, err := rls.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	resp, err = rls.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
}

func clientsOf(t *testing.T, c *testcluster.Cluster) []rlspb.RateLimitServiceClient {
	var out []rlspb.RateLimitServiceClient
	for _, n := range c.Live() {
		conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		out = append(out, rlspb.NewRateLimitServiceClient(conn))
	}
	return out
}

// Started as Envoy Gateway starts it (FORCE_START_WITHOUT_INITIAL_CONFIG),
// the node is ready before its first configuration, and the service still
// answers UNAVAILABLE, as upstream fails every call then: never an OK
// that limits nothing.
func TestXDSForceStartStillRefusesUntilTheFirstConfig(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	c := testcluster.New(t, 1, func(cfg *node.Config) {
		xdsNodes(srv)(cfg)
		cfg.EnvoyRLSAwaitConfig = false
	})
	conn, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	health, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, health.GetStatus())
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{descriptor("client=acme")}}
	_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// BenchmarkXDSSnapshotInForce times a control plane's change, from the
// snapshot set on go-control-plane's server to its limit in force on
// every node of a three-node cluster: one op is one snapshot. The
// subscription's apply must not wait for the cluster's gossip of the new
// digests (it once waited up to a second per snapshot for the broadcast,
// holding back the next snapshot and the ACK).
func BenchmarkXDSSnapshotInForce(b *testing.B) {
	srv := xdsserver.Start(b, nil)
	srv.Set(b, "v0", edgeLimit(1))
	c := testcluster.New(b, 3, xdsNodes(srv))
	c.WaitConverged()
	inForce := func(rpu uint32) bool {
		for _, n := range c.Live() {
			if r := n.Configs().EnvoyRLSConfig().Rules(); len(r) != 1 || r[0].RequestsPerUnit != rpu {
				return false
			}
		}
		return true
	}
	wait.For(b, 5*time.Second, func() (bool, string) { return inForce(1), "v0 in force" })
	rpu := uint32(1)
	for b.Loop() {
		rpu++
		srv.Set(b, fmt.Sprintf("v%d", rpu), edgeLimit(rpu))
		deadline := time.Now().Add(5 * time.Second)
		for !inForce(rpu) {
			if time.Now().After(deadline) {
				b.Fatalf("snapshot v%d not in force on every node within 5 s", rpu)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}
