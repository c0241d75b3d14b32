package node_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/node"
)

func rlsRequest(domain string, kvs ...string) *rlspb.RateLimitRequest {
	d := &rlscommon.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*rlscommon.RateLimitDescriptor{d}}
}

func startRLSNode(t *testing.T, edit func(*node.Config)) *node.Node {
	t.Helper()
	cfg := node.DefaultLocalConfig("rls-node")
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if edit != nil {
		edit(&cfg)
	}
	n, err := node.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, n.Shutdown(ctx))
	})
	return n
}

func writeRLS(t *testing.T, path, src string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
}

// Without a configuration the service is not there: an Envoy pointed at
// the node sees UNIMPLEMENTED (and its failure mode decides) instead of
// answers that limit nothing.
func TestEnvoyRLSNotServedWithoutConfig(t *testing.T) {
	n := startRLSNode(t, nil)
	conn := dialWith(t, n.GRPCAddr(), insecure.NewCredentials())
	_, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), rlsRequest("d", "k=v"))
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	_, err = healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.ErrorIs(t, n.Configs().ReloadEnvoyRLS(), configs.ErrNoEnvoyRLSConfig)
	assert.Nil(t, n.Configs().EnvoyRLSConfig())

	_, err = node.Start(func() node.Config {
		c := node.DefaultLocalConfig("x")
		c.EnvoyRLS.Headers = true
		return c
	}())
	assert.ErrorContains(t, err, "EnvoyRLS needs EnvoyRLSConfig")
}

func TestEnvoyRLSBadConfigFailsStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	writeRLS(t, path, "domain: d\ndescriptors:\n  - key: k\n    algorithm: SLIDING_WINDOW_LOG\n    rate_limit: {unit: second, requests_per_unit: 20000}\n")
	cfg := node.DefaultLocalConfig("bad")
	cfg.EnvoyRLSConfig = path
	_, err := node.Start(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+`:5: domain "d", descriptor k: beyond this node's limits: requests_per_unit 20000 exceeds the SLIDING_WINDOW_LOG maximum of 10000`)
}

// The rate limit service sits behind the same guard as RateLimiter: TLS,
// a client certificate and the API bearer token (which Envoy sends as
// initial_metadata).
func TestEnvoyRLSBehindTLSAndToken(t *testing.T) {
	h := newHardened(t)
	path := filepath.Join(t.TempDir(), "rls.yaml")
	writeRLS(t, path, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n")
	n := startRLSNode(t, func(c *node.Config) { h.edit(t)(c); c.EnvoyRLSConfig = path })

	rls := rlspb.NewRateLimitServiceClient(dialWith(t, n.GRPCAddr(), credentials.NewTLS(h.appTLS(t, true))))
	_, err := rls.ShouldRateLimit(withToken(""), rlsRequest("d", "k=v"))
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "no token")
	_, err = rls.ShouldRateLimit(withToken("wrong-token-0123456789"), rlsRequest("d", "k=v"))
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "a wrong token")
	resp, err := rls.ShouldRateLimit(withToken(secToken), rlsRequest("d", "k=v"))
	require.NoError(t, err)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	resp, err = rls.ShouldRateLimit(withToken(secToken), rlsRequest("d", "k=v"))
	require.NoError(t, err)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())

	noCert := rlspb.NewRateLimitServiceClient(dialWith(t, n.GRPCAddr(), credentials.NewTLS(h.appTLS(t, false))))
	_, err = noCert.ShouldRateLimit(withToken(secToken), rlsRequest("d", "k=v"))
	assert.Error(t, err, "a client certificate is required")

	// Health stays open, and reports the service.
	hc := healthpb.NewHealthClient(dialWith(t, n.GRPCAddr(), credentials.NewTLS(h.appTLS(t, false))))
	hr, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hr.GetStatus())
}

// A reload puts a new configuration in force without touching counts; a
// bad file is refused, naming its line, and the old one kept.
func TestEnvoyRLSReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	writeRLS(t, path, "domain: d\ndescriptors: [{key: k, algorithm: SLIDING_WINDOW_LOG, rate_limit: {unit: hour, requests_per_unit: 2}}]\n")
	// The reloads asked for here, not the watcher's, are what is counted.
	n := startRLSNode(t, func(c *node.Config) { c.EnvoyRLSConfig, c.WatchConfig = path, false })
	rls := rlspb.NewRateLimitServiceClient(dialWith(t, n.GRPCAddr(), insecure.NewCredentials()))
	call := func() *rlspb.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), rlsRequest("d", "k=v"))
		require.NoError(t, err)
		return resp.GetStatuses()[0]
	}
	call()
	call()
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call().GetCode())
	first := n.Configs().EnvoyRLSConfig()

	writeRLS(t, path, "domain: d\ndescriptors: [{key: k, algorithm: SLIDING_WINDOW_LOG, rate_limit: {unit: hour, requests_per_unit: -3}}]\n")
	err := n.Configs().ReloadEnvoyRLS()
	assert.ErrorContains(t, err, path+`:2: domain "d", descriptor k: requests_per_unit must be between 0`)
	assert.Same(t, first, n.Configs().EnvoyRLSConfig())

	writeRLS(t, path, "domain: d\ndescriptors: [{key: k, algorithm: SLIDING_WINDOW_LOG, rate_limit: {unit: hour, requests_per_unit: 3}}]\n")
	require.NoError(t, n.Configs().ReloadEnvoyRLS())
	st := call()
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode(), "the raised limit applies to what was counted")
	assert.Zero(t, st.GetLimitRemaining())
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call().GetCode())

	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := string(raw)
	assert.Contains(t, m, `peerlimit_envoy_rls_config_reloads_total{result="error"} 1`)
	assert.Contains(t, m, `peerlimit_envoy_rls_config_reloads_total{result="ok"} 1`)
	assert.Contains(t, m, `peerlimit_envoy_rls_requests_total{code="OVER_LIMIT",domain="d"} 2`)
	assert.Contains(t, m, `peerlimit_envoy_rls_descriptors_total{domain="d",outcome="ok",rule="k"} 3`)
}

// A node exports upstream's call and configuration statistics under
// upstream's names, counted where upstream counts them: every call in
// total_requests, a call answered with an error as a service_error, the
// start's load and every reload in config_load_success or _error; and
// with ResponseTimeMilliseconds its response time in milliseconds.
func TestEnvoyRLSUpstreamMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	writeRLS(t, path, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n")
	n := startRLSNode(t, func(c *node.Config) {
		c.EnvoyRLSConfig, c.WatchConfig = path, false
		c.EnvoyRLS.ResponseTimeMilliseconds = true
	})
	rls := rlspb.NewRateLimitServiceClient(dialWith(t, n.GRPCAddr(), insecure.NewCredentials()))
	for range 2 {
		_, err := rls.ShouldRateLimit(context.Background(), rlsRequest("d", "k=v"))
		require.NoError(t, err)
	}
	_, err := rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	writeRLS(t, path, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n")
	require.Error(t, n.Configs().ReloadEnvoyRLS())
	writeRLS(t, path, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 2}}]\n")
	require.NoError(t, n.Configs().ReloadEnvoyRLS())

	g := metrictest.Scrape("http://" + n.HTTPAddr() + "/metrics")
	for _, c := range []struct {
		want   float64
		series []string
	}{
		{3, []string{"ratelimit_service_total_requests", "grpc_method", "ShouldRateLimit"}},
		{1, []string{"ratelimit_service_should_rate_limit_error", "err_type", "service_error"}},
		{3, []string{"ratelimit_service_response_time_seconds", "grpc_method", "ShouldRateLimit"}},
		{2, []string{"ratelimit_service_config_load_success"}},
		{1, []string{"ratelimit_service_config_load_error"}},
		{1, []string{"peerlimit_envoy_rls_requests_total", "domain", "d", "code", "ERROR"}},
		{1, []string{"peerlimit_envoy_rls_config_reloads_total", "result", "ok"}},
	} {
		assert.Equal(t, c.want, metrictest.Value(t, g, c.series[0], c.series[1:]...), "%v", c.series)
	}
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "ratelimit_service_response_time_seconds" {
			b := mf.GetMetric()[0].GetHistogram().GetBucket()
			assert.Equal(t, 1000.0, b[len(b)-1].GetUpperBound(), "1 s, in milliseconds")
		}
	}
}
