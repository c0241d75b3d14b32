package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/limiter"
)

func TestEnvoyRLSFlags(t *testing.T) {
	o, err := parseFlags(onLoopback, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, o.node.EnvoyRLSConfig)
	assert.Equal(t, envoyrls.DefaultConfig(), o.node.EnvoyRLS)

	env := map[string]string{"PEERLIMIT_ENVOY_RLS_CONFIG": "/etc/peerlimit/rls", "PEERLIMIT_ENVOY_RLS_HEADERS": "true",
		"PEERLIMIT_ENVOY_RLS_MERGE_DOMAINS": "true", "PEERLIMIT_ENVOY_RLS_RESPONSE_METADATA": "true", "PEERLIMIT_ENVOY_RLS_SHADOW_MODE": "true",
		"PEERLIMIT_ENVOY_RLS_QUOTA_MODE": "true", "PEERLIMIT_ENVOY_RLS_NEAR_LIMIT_RATIO": "0.9", "PEERLIMIT_ENVOY_RLS_MAX_STATS_KEYS": "50"}
	o, err = parseFlags(onLoopback, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/etc/peerlimit/rls", o.node.EnvoyRLSConfig)
	assert.Equal(t, envoyrls.Config{Headers: true, MergeDomains: true, ResponseMetadata: true, ShadowMode: true, QuotaMode: true,
		NearLimitRatio: 0.9, MaxStatsKeys: 50}, o.node.EnvoyRLS)

	_, err = parseFlags([]string{"--envoy-rls-headers"}, func(string) string { return "" }, io.Discard)
	assert.ErrorContains(t, err, "needs EnvoyRLSConfig (--envoy-rls-config)")
	_, err = parseFlags([]string{"--envoy-rls-config", "x", "--envoy-rls-near-limit-ratio", "1.5"}, func(string) string { return "" }, io.Discard)
	assert.ErrorContains(t, err, "NearLimitRatio (--envoy-rls-near-limit-ratio) must be in (0, 1], got 1.5")
}

// grpcAddrOf asks a node process for its own gRPC address.
func grpcAddrOf(t *testing.T, httpAddr, id string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/v1/members")
	require.NoError(t, err)
	defer resp.Body.Close()
	var m struct {
		Members []struct {
			ID       string `json:"id"`
			GRPCAddr string `json:"grpc_addr"`
		} `json:"members"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	for _, mm := range m.Members {
		if mm.ID == id {
			return mm.GRPCAddr
		}
	}
	t.Fatalf("%s is not among its own members", id)
	return ""
}

// SIGHUP reloads --envoy-rls-config in a real process, with the other
// reload hooks: a descriptor at its limit stays limited, a bad file is
// refused with its line, and a raised limit applies at once.
func TestSIGHUPReloadsEnvoyRLSConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(src string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(src), 0o600))
	}
	write("domain: edge\ndescriptors: [{key: ip, algorithm: SLIDING_WINDOW_LOG, rate_limit: {unit: hour, requests_per_unit: 2}}]\n")
	p := startProcess(t, "rls-node", "--envoy-rls-config", dir, "--envoy-rls-headers", "--watch-config=false") // SIGHUP alone reloads
	conn, err := grpc.NewClient(grpcAddrOf(t, p.http, "rls-node"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	call := func() *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge",
			Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0.0.1"}}}}})
		require.NoError(t, err)
		return resp
	}
	call()
	call()
	resp := call()
	require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
	assert.NotEmpty(t, resp.GetResponseHeadersToAdd(), "--envoy-rls-headers")

	write("domain: edge\ndescriptors: [{key: ip, rate_limit: {unit: fortnight, requests_per_unit: 2}}]\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	rec := waitForLog(t, p.lines, "envoy rls config reload failed; the configuration in force is kept")
	assert.Contains(t, rec["err"], filepath.Join(dir, "edge.yaml")+`:2: domain "edge", descriptor ip: unknown unit "fortnight"`)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call().GetOverallCode())

	write("domain: edge\ndescriptors: [{key: ip, algorithm: SLIDING_WINDOW_LOG, rate_limit: {unit: hour, requests_per_unit: 3}}]\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	rec = waitForLog(t, p.lines, "envoy rls config reloaded")
	assert.EqualValues(t, 1, rec["rules"])
	assert.Equal(t, rlspb.RateLimitResponse_OK, call().GetOverallCode(), "the raised limit applies to what was counted")
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call().GetOverallCode())
}

// deploy/envoy/docker-compose.envoy.yml configures this binary on top of
// docker-compose.yml: checked against the real flag parser, and its
// mounted directory against the configuration loader.
func TestComposeEnvoyOverlay(t *testing.T) {
	read := func(name string) map[string]struct {
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
	} {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repoRoot, name))
		require.NoError(t, err)
		var cf struct {
			Services map[string]struct {
				Command     []string          `yaml:"command"`
				Environment map[string]string `yaml:"environment"`
				Volumes     []string          `yaml:"volumes"`
			} `yaml:"services"`
		}
		require.NoError(t, yaml.Unmarshal(b, &cf))
		return cf.Services
	}
	base, overlay := read("docker-compose.yml"), read("deploy/envoy/docker-compose.envoy.yml")
	require.ElementsMatch(t, slices.Collect(maps.Keys(base)), slices.Collect(maps.Keys(overlay)), "every node service gets the overlay")
	for name, s := range overlay {
		env := maps.Clone(base[name].Environment)
		maps.Copy(env, s.Environment) // compose merges environments by name
		o, err := parseFlags(base[name].Command, func(k string) string { return composeValue(env[k]) }, io.Discard)
		require.NoError(t, err, name)
		assert.True(t, o.node.EnvoyRLS.Headers, name)
		require.Len(t, s.Volumes, 1, name)
		src, dst, ok := strings.Cut(strings.TrimSuffix(s.Volumes[0], ":ro"), ":")
		require.True(t, ok, name)
		assert.Equal(t, o.node.EnvoyRLSConfig, dst, "%s: the flag names the mounted directory", name)
		store, err := limiter.New(o.node.Limiter, o.node.Partitions)
		require.NoError(t, err)
		_, err = envoyrls.Load(filepath.Join(repoRoot, src), envoyrls.LoadOptions{Check: store.Validate, MergeDomains: o.node.EnvoyRLS.MergeDomains})
		require.NoError(t, err, "%s: the mounted directory loads under the node's caps", name)
	}
}
