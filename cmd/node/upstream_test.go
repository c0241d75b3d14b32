package main

import (
	"bufio"
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/internal/testkit/xdsserver"
)

// Envoy Gateway's rate limit Deployment, as its controller renders it
// (envoyGatewayEnv), with deploy/envoy-gateway's additions: every
// variable, read by the real flag parser.
func TestUpstreamVariablesOfEnvoyGatewaysDeployment(t *testing.T) {
	env := envoyGatewayEnv(egMounted, envoyGatewayMapper(t, egMapperResponseTime))
	maps.Copy(env, envoyGatewayAdditions(t))
	getenv := func(k string) string { return env[k] }
	args, notes, err := upstreamArgs(getenv, keys(env))
	require.NoError(t, err)
	o, err := parseFlags(args, getenv, io.Discard)
	require.NoError(t, err, "%q", args)

	c := o.node
	assert.Equal(t, "0.0.0.0:8081", c.GRPCAddr)
	assert.Equal(t, "0.0.0.0:8080", c.HTTPAddr)
	assert.Equal(t, "envoy-gateway:18001", c.EnvoyRLSXDS.ServerAddr)
	assert.Equal(t, "envoy-ratelimit", c.EnvoyRLSXDS.NodeID)
	assert.True(t, c.EnvoyRLSXDS.UseTLS)
	assert.Equal(t, "/certs/ca.crt", c.EnvoyRLSXDS.CAFile)
	assert.Equal(t, "/certs/tls.crt", c.EnvoyRLSXDS.CertFile)
	assert.False(t, c.EnvoyRLSAwaitConfig, "FORCE_START_WITHOUT_INITIAL_CONFIG=true")
	assert.Empty(t, c.EnvoyRLSConfig, "the xDS source, not files")
	assert.Equal(t, "/certs/tls.crt", c.Security.TLSCertFile)
	// GRPC_SERVER_TLS_CA_CERT, which upstream does not read, makes no
	// client certificate required (upstream's is GRPC_CLIENT_TLS_CACERT,
	// which deploy/envoy-gateway adds); the peers verify each other with it.
	assert.Equal(t, "/certs/ca.crt", c.Security.ClientCAFile)
	assert.True(t, c.Security.RequireClientCert)
	assert.Equal(t, "/certs/ca.crt", c.Security.PeerCAFile)
	assert.Equal(t, 10*time.Second, c.EnvoyRLSXDS.BackoffInitial, "upstream's default")
	assert.Equal(t, 60*time.Second, c.EnvoyRLSXDS.BackoffMax, "upstream's default")
	assert.True(t, c.Security.HTTPPlaintext, "Envoy Gateway probes /healthcheck over HTTP")
	assert.Equal(t, ":19001", o.metricsAddr, "where Envoy Gateway's Service and annotations point Prometheus")
	assert.Equal(t, "envoy-ratelimit.envoy-gateway-system", c.Security.PeerServerName, "a name the certificate's *.envoy-gateway-system covers")
	assert.Len(t, c.Security.ClusterSecrets, 1)
	assert.True(t, c.Tracing.Enabled)
	assert.Equal(t, "envoy-ratelimit", c.Tracing.ServiceName)
	assert.Equal(t, []string{"envoy-ratelimit-peers.envoy-gateway-system.svc.cluster.local:7946"}, c.Join)
	joined := strings.Join(notes, "\n")
	assert.Contains(t, joined, "REDIS_SOCKET_TYPE, REDIS_URL")
	assert.True(t, o.node.EnvoyRLS.ResponseTimeMilliseconds, "Envoy Gateway's mapping leaves the response time in milliseconds, as upstream then exports it")
	assert.NoError(t, sharedCANeedsSecret(o), "the cluster secret comes with the additions")
}

// envoyGatewayAdditions reads the variables deploy/envoy-gateway adds to
// Envoy Gateway's rate limit container, a Secret's as a stand-in value,
// and checks that its headless Service selects the pods Envoy Gateway
// labels.
func envoyGatewayAdditions(t *testing.T) map[string]string {
	t.Helper()
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/envoy-gateway/envoy-gateway-config.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &cm))
	var eg struct {
		Provider struct {
			Kubernetes struct {
				RateLimitDeployment struct {
					Replicas  int `yaml:"replicas"`
					Container struct {
						Image string `yaml:"image"`
						Env   []struct {
							Name      string         `yaml:"name"`
							Value     string         `yaml:"value"`
							ValueFrom map[string]any `yaml:"valueFrom"`
						} `yaml:"env"`
					} `yaml:"container"`
				} `yaml:"rateLimitDeployment"`
			} `yaml:"kubernetes"`
		} `yaml:"provider"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(cm.Data["envoy-gateway.yaml"]), &eg))
	d := eg.Provider.Kubernetes.RateLimitDeployment
	assert.GreaterOrEqual(t, d.Replicas, 3)
	env := map[string]string{}
	for _, e := range d.Container.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			env[e.Name] = "a-secret-of-at-least-16-bytes"
		}
	}

	var svc struct {
		Spec struct {
			ClusterIP                string            `yaml:"clusterIP"`
			PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
			Selector                 map[string]string `yaml:"selector"`
		} `yaml:"spec"`
		Metadata struct {
			Name, Namespace string
		} `yaml:"metadata"`
	}
	b, err = os.ReadFile(filepath.Join(repoRoot, "deploy/envoy-gateway/peers.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &svc))
	assert.Equal(t, "None", svc.Spec.ClusterIP, "headless: the name resolves to every pod")
	assert.True(t, svc.Spec.PublishNotReadyAddresses)
	assert.Equal(t, map[string]string{"app.kubernetes.io/name": "envoy-ratelimit", "app.kubernetes.io/component": "ratelimit",
		"app.kubernetes.io/managed-by": "envoy-gateway"}, svc.Spec.Selector, "the labels Envoy Gateway gives its rate limit pods")
	assert.Equal(t, svc.Metadata.Name+"."+svc.Metadata.Namespace+".svc.cluster.local:7946", env["PEERLIMIT_JOIN"])
	return env
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestUpstreamVariablesAreCheckedByName(t *testing.T) {
	for env, want := range map[string]string{
		"CONFIG_TYPE=REDIS":                        `CONFIG_TYPE="REDIS": want FILE or GRPC_XDS_SOTW`,
		"SHADOW_MODE=yes":                          `SHADOW_MODE="yes": want true or false`,
		"GRPC_UDS=/tmp/rl.sock":                    `GRPC_UDS="/tmp/rl.sock"`,
		"PROMETHEUS_PATH=/x":                       "", // only with USE_PROMETHEUS
		"LOG_LEVEL=loud":                           `LOG_LEVEL="loud": want trace, debug, info, warn, error, fatal or panic`,
		"LOG_FORMAT=logfmt":                        "", // upstream: anything but json is text
		"GRPC_PORT=eighty":                         `GRPC_PORT="eighty": want a port number`,
		"GRPC_CLIENT_TLS_SAN=envoy":                `GRPC_CLIENT_TLS_SAN="envoy": client certificates are verified against GRPC_CLIENT_TLS_CACERT only`,
		"NEAR_LIMIT_RATIO=most":                    `NEAR_LIMIT_RATIO="most": want a number in (0, 1]`,
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL=1m":       "",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=soon": `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL="soon": want a duration`,
	} {
		k, v, _ := strings.Cut(env, "=")
		vars := map[string]string{k: v, "GRPC_SERVER_USE_TLS": "true", "CONFIG_TYPE": "GRPC_XDS_SOTW"}
		_, _, err := upstreamArgs(func(name string) string { return vars[name] }, []string{k})
		if want == "" {
			assert.NoError(t, err, env)
			continue
		}
		assert.ErrorContains(t, err, want, env)
	}
}

// Upstream's client certificate check (GRPC_CLIENT_TLS_CACERT) is kept,
// and its node metadata read as upstream reads it.
func TestUpstreamClientCertificatesAndMetadata(t *testing.T) {
	env := map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c/tls.crt", "GRPC_SERVER_TLS_KEY": "/c/tls.key",
		"GRPC_CLIENT_TLS_CACERT": "/c/clients.pem", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "key1:val1,key2=val2",
		"PEERLIMIT_CLUSTER_SECRET": "a-secret-of-at-least-16-bytes"}
	getenv := func(k string) string { return env[k] }
	args, _, err := upstreamArgs(getenv, keys(env))
	require.NoError(t, err)
	o, err := parseFlags(args, getenv, io.Discard)
	require.NoError(t, err, "%q", args)
	assert.Equal(t, "/c/clients.pem", o.node.Security.ClientCAFile)
	assert.True(t, o.node.Security.RequireClientCert)
	assert.Equal(t, "/c/clients.pem", o.node.Security.PeerCAFile, "without GRPC_SERVER_TLS_CA_CERT the peers use the client CA")
	assert.Equal(t, map[string]string{"key2": "val2"}, o.node.EnvoyRLSXDS.NodeMetadata, "upstream skips what is not key=value")
}

// The file source: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
// as upstream reads it, watched as RUNTIME_WATCH_ROOT says.
func TestUpstreamFileSource(t *testing.T) {
	env := map[string]string{"RUNTIME_ROOT": "/srv/runtime/current", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "true"}
	args, _, err := upstreamArgs(func(k string) string { return env[k] }, keys(env))
	require.NoError(t, err)
	o, err := parseFlags(args, func(k string) string {
		return map[string]string{"PEERLIMIT_CLUSTER_SECRET": "a-secret-of-at-least-16-bytes"}[k]
	}, io.Discard)
	require.NoError(t, err, "%q", args)
	assert.Equal(t, "/srv/runtime/current/ratelimit/config", o.node.EnvoyRLSConfig)
	assert.Equal(t, "/srv/runtime/current", o.node.EnvoyRLSWatchRoot)
	assert.True(t, o.node.EnvoyRLSAwaitConfig)
}

// ratelimitProcess runs the node binary as /bin/ratelimit is run: under
// that name, configured by upstream's variables (and PEERLIMIT_GOSSIP_ADDR,
// for a free port in tests).
func ratelimitProcess(t *testing.T, env ...string) *process {
	t.Helper()
	link := filepath.Join(t.TempDir(), "ratelimit")
	require.NoError(t, os.Symlink(os.Args[0], link))
	cmd := exec.Command(link)
	cmd.Env = append([]string{runMainEnv + "=1", "PEERLIMIT_GOSSIP_ADDR=127.0.0.1:0", "PEERLIMIT_GOSSIP_PROFILE=local",
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0", "LOG_LEVEL=info", "LOG_FORMAT=json"}, env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &process{cmd: cmd, lines: make(chan string, 1000)}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	rec := waitForLog(t, p.lines, "node started")
	p.http, p.grpc, p.gossip = rec["http"].(string), rec["grpc"].(string), rec["gossip"].(string)
	return p
}

// A node started from upstream's variables alone, as Envoy Gateway
// starts its rate limit service, serves Envoy's API with the limits its
// control plane serves, answers Envoy Gateway's probe and exports
// Prometheus on PROMETHEUS_ADDR.
func TestRatelimitModeServesEnvoyFromXDS(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", &rlsconfpb.RateLimitConfig{Name: "default/eg", Domain: "default/eg/http", Descriptors: []*rlsconfpb.RateLimitDescriptor{{
		Key: "client", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: 2}}}})
	p := ratelimitProcess(t, "CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+srv.Addr, "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis.redis.svc:6379",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0")
	side := map[string]string{}
	for len(side) < 2 {
		rec := waitForLog(t, p.lines, "metrics served", "debug page served")
		side[logMessage(rec)] = rec["addr"].(string)
	}
	metrics := side["metrics served"]
	wait.For(t, 10*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })

	resp, err := http.Get("http://" + p.http + "/healthcheck")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "Envoy Gateway's readiness probe")

	conn, err := grpc.NewClient(grpcAddrOf(t, p.http, hostname(t)), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	rls := rlspb.NewRateLimitServiceClient(conn)
	codes := []rlspb.RateLimitResponse_Code{}
	for range 3 {
		resp, err := rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "default/eg/http",
			Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "client", Value: "a"}}}}})
		require.NoError(t, err)
		codes = append(codes, resp.GetOverallCode())
	}
	assert.Equal(t, []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}, codes)

	mresp, err := http.Get("http://" + metrics + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	assert.Contains(t, string(body), `ratelimit_service_rate_limit_over_limit{domain="default/eg/http"`)

	dresp, err := http.Get("http://" + side["debug page served"] + "/rlconfig")
	require.NoError(t, err)
	body, _ = io.ReadAll(dresp.Body)
	dresp.Body.Close()
	assert.Contains(t, string(body), "default/eg/http.client: unit=MINUTE requests_per_unit=2, shadow_mode: false", "upstream's /rlconfig on DEBUG_PORT")
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}
