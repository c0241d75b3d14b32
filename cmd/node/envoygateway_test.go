package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/peerlimit/peerlimit/internal/testkit/mdexamples"
	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/internal/testkit/xdsserver"
)

// egNamespace is the namespace Envoy Gateway's controller runs in, which
// names its certificates.
const egNamespace = "envoy-gateway-system"

// envoyGatewayEnv is the environment Envoy Gateway (d32f282,
// internal/infrastructure/kubernetes/ratelimit/resource.go) gives its rate
// limit container, with a Redis backend named, Prometheus and tracing on;
// certs are the envoy-rate-limit Secret's files (egMounted where Envoy
// Gateway mounts them), mapper the statsd_exporter mapping it mounts
// (envoyGatewayMapper).
func envoyGatewayEnv(certs egFiles, mapper string) map[string]string {
	crt, key, ca := certs.cert, certs.key, certs.ca
	return map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": crt, "GRPC_SERVER_TLS_KEY": key, "GRPC_SERVER_TLS_CA_CERT": ca,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": crt, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": key,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": ca, "FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "redis.redis.svc:6379",
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":19001", "PROMETHEUS_MAPPER_YAML": mapper,
		"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "envoy-ratelimit", "TRACING_SERVICE_NAMESPACE": egNamespace,
		"TRACING_SERVICE_INSTANCE_ID": "envoy-ratelimit-7d9f", "TRACING_SAMPLING_RATE": "1.0",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.monitoring.svc:4317",
	}
}

// egMapperResponseTime is the response time's entry of Envoy Gateway's
// statsd_exporter mapping (d32f282, internal/infrastructure/kubernetes/
// ratelimit/statsd_conf.yaml), which has no scale: upstream's
// milliseconds pass unscaled. upstreamMapperResponseTime is the same entry
// in upstream's default mapping (src/stats/prom/default_mapper.yaml).
const (
	egMapperResponseTime = `mappings:
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    timer_type: histogram
    labels:
      grpc_method: "$1"
`
	upstreamMapperResponseTime = `mappings:
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    timer_type: histogram
    scale: 0.001
    labels:
      grpc_method: "$1"
`
)

// envoyGatewayMapper writes a mapping file holding text, as Envoy Gateway
// mounts its ConfigMap at /etc/statsd-exporter/conf.yaml.
func envoyGatewayMapper(t *testing.T, text string) string {
	path := filepath.Join(t.TempDir(), "conf.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// egFiles are a certificate, its key and the CA, as files.
type egFiles struct{ cert, key, ca string }

// egMounted is the envoy-rate-limit Secret where Envoy Gateway mounts it.
var egMounted = egFiles{"/certs/tls.crt", "/certs/tls.key", "/certs/ca.crt"}

// egCerts are certificates shaped as Envoy Gateway's certgen makes them
// (internal/crypto/certgen.go): the controller's, for its Service's
// names; and, for the rate limit service and for Envoy alike, CN "*" with
// the one name "*.<namespace>"; all with no extended key usage and
// PKCS#1 RSA keys. (Its CA is RSA too; this one's key is ECDSA, which
// changes nothing a verifier checks.)
type egCerts struct {
	ca                       *testcerts.CA
	controller, rls, envoyCl testcerts.Pair
}

func newEGCerts(t *testing.T) *egCerts {
	t.Helper()
	ca := testcerts.NewCA(t, "envoy-gateway")
	wildcard := func(name string) testcerts.Leaf {
		return testcerts.Leaf{Name: name, CommonName: "*", DNSNames: []string{"*." + egNamespace}, AnyUsage: true, RSA: true}
	}
	return &egCerts{ca: ca,
		controller: ca.Issue(t, testcerts.Leaf{Name: "controller", CommonName: "envoy-gateway", AnyUsage: true, RSA: true,
			DNSNames: []string{"envoy-gateway", "envoy-gateway." + egNamespace, "envoy-gateway." + egNamespace + ".svc",
				"envoy-gateway." + egNamespace + ".svc.cluster.local"}}),
		rls:     ca.Issue(t, wildcard("envoy-rate-limit")),
		envoyCl: ca.Issue(t, wildcard("envoy")),
	}
}

// tlsConfig presents p and trusts the CA, as a client and as a server.
func (c *egCerts) tlsConfig(t *testing.T, p testcerts.Pair) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(c.ca.Cert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS12}
}

// Envoy Gateway's rate limit Deployment with peerlimit's image: two pods
// started from the environment Envoy Gateway renders and the additions of
// deploy/envoy-gateway, with certificates shaped as Envoy Gateway issues
// them, take their limits over mutual TLS from the controller's xDS
// server, find each other, forward to each other over TLS with the
// cluster secret, and enforce one limit for Envoy, which calls them with
// its own certificate from the same CA; a caller without one is refused.
func TestEnvoyGatewaysDeploymentWithPeerlimitsImage(t *testing.T) {
	certs := newEGCerts(t)
	srvTLS := certs.tlsConfig(t, certs.controller)
	srvTLS.ClientAuth = tls.RequireAndVerifyClientCert
	srv := xdsserver.Start(t, srvTLS)
	srv.Set(t, "v1", &rlsconfpb.RateLimitConfig{Name: "default/eg", Domain: "default/eg/http", Descriptors: []*rlsconfpb.RateLimitDescriptor{{
		Key: "client", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: 3}}}})

	env := envoyGatewayEnv(egFiles{certs.rls.CertFile, certs.rls.KeyFile, certs.ca.File}, envoyGatewayMapper(t, egMapperResponseTime))
	for k, v := range envoyGatewayAdditions(t) {
		env[k] = strings.ReplaceAll(v, egMounted.ca, certs.ca.File)
	}
	// What differs on one machine: the controller is on loopback, under
	// the name its certificate carries; free ports; one id per pod (a
	// pod's hostname); the first pod is the one the Service resolves to.
	env["CONFIG_GRPC_XDS_SERVER_URL"], env["CONFIG_GRPC_XDS_SERVER_TLS_SAN"] = srv.Addr, "envoy-gateway"
	env["PROMETHEUS_ADDR"] = "127.0.0.1:0"
	vars := func(id, join string) []string {
		out := []string{"PEERLIMIT_ID=" + id}
		for k, v := range env {
			if k == "PEERLIMIT_JOIN" {
				v = join
			}
			if v != "" {
				out = append(out, k+"="+v)
			}
		}
		return out
	}
	a := ratelimitProcess(t, vars("envoy-ratelimit-a", "")...)
	b := ratelimitProcess(t, vars("envoy-ratelimit-b", a.gossip)...)
	wait.For(t, 15*time.Second, func() (bool, string) { return srv.Acked("v1") >= 2, "both pods ACK v1: " + srv.String() })

	resp, err := http.Get("http://" + b.http + "/healthcheck")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "Envoy Gateway's probes: plain HTTP")
	resp, err = http.Post("http://"+b.http+"/v1/reset", "application/json", strings.NewReader(`{"key":"x"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the API beyond the probe needs a client certificate")

	envoy := certs.tlsConfig(t, certs.envoyCl)
	envoy.ServerName = "envoy-ratelimit." + egNamespace // what Envoy dials: envoy-ratelimit.<ns>.svc…, a name the wildcard covers
	call := func(p *process, tc *tls.Config) (rlspb.RateLimitResponse_Code, error) {
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		require.NoError(t, err)
		defer conn.Close()
		resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "default/eg/http",
			Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "client", Value: "acme"}}}}})
		return resp.GetOverallCode(), err
	}
	var codes []rlspb.RateLimitResponse_Code
	wait.For(t, 15*time.Second, func() (bool, string) { // the pods joined: the first call forwarded or decided by its owner
		code, err := call(b, envoy)
		if err != nil {
			return false, err.Error()
		}
		codes = append(codes, code)
		return true, ""
	})
	for _, p := range []*process{a, b, a} {
		code, err := call(p, envoy)
		require.NoError(t, err)
		codes = append(codes, code)
	}
	ok, over := rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT
	assert.Equal(t, []rlspb.RateLimitResponse_Code{ok, ok, ok, over}, codes, "one limit of 3 a minute over both pods")

	anon := certs.tlsConfig(t, certs.envoyCl)
	anon.Certificates = nil
	_, err = call(a, anon)
	assert.Error(t, err, "GRPC_CLIENT_TLS_CACERT: a caller without a certificate from the CA is refused")

	// docs/envoy.md's check that the pods formed one cluster, as written
	// there, but for the pod's files and port here.
	args := egMembersCheck(t)
	for i, a := range args {
		args[i] = strings.NewReplacer(egMounted.cert, certs.rls.CertFile, egMounted.key, certs.rls.KeyFile, egMounted.ca, certs.ca.File,
			"127.0.0.1:8081", b.grpc).Replace(a)
	}
	code, out, errOut := cli(t, args...)
	require.Equal(t, exitOK, code, "%q: %s", args, errOut)
	assert.Regexp(t, `(?m)^envoy-ratelimit-a +alive `, out, "both pods, from either")
	assert.Regexp(t, `(?m)^envoy-ratelimit-b +alive `, out, "both pods, from either")
}

// egMembersCheck is the command docs/envoy.md's "Replace Envoy Gateway's
// rate limit service" runs in a pod to see its members: the words after
// `kubectl … exec … -- /peerlimit-node`.
func egMembersCheck(t *testing.T) []string {
	t.Helper()
	sec := section(t, readDoc(t, "docs/envoy.md"), "## Replace Envoy Gateway's rate limit service")
	for _, b := range mdexamples.Blocks(sec) {
		for _, line := range b.Lines {
			_, cmd, ok := strings.Cut(line, " -- /peerlimit-node ")
			if !ok || !strings.HasPrefix(strings.TrimSpace(line), "kubectl") {
				continue
			}
			// NS, as the section sets it.
			words, err := mdexamples.Split(strings.ReplaceAll(cmd, "$NS", egNamespace))
			require.NoError(t, err, line)
			return words
		}
	}
	t.Fatal("docs/envoy.md: no `kubectl … exec … -- /peerlimit-node members …` line in a block")
	return nil
}

// The ratelimit mode refuses peer TLS without a cluster secret: the CA
// that makes a certificate a peer's also issues Envoy's.
func TestRatelimitModeWithTLSNeedsAClusterSecret(t *testing.T) {
	env := envoyGatewayEnv(egMounted, envoyGatewayMapper(t, egMapperResponseTime))
	getenv := func(k string) string { return env[k] }
	args, _, err := upstreamArgs(getenv, keys(env))
	require.NoError(t, err)
	o, err := parseFlags(args, getenv, io.Discard)
	require.NoError(t, err)
	assert.ErrorContains(t, sharedCANeedsSecret(o), "PEERLIMIT_CLUSTER_SECRET (or --cluster-secret-file) is required with GRPC_SERVER_USE_TLS")
	env["PEERLIMIT_CLUSTER_SECRET"] = "a-secret-of-at-least-16-bytes"
	o, err = parseFlags(args, getenv, io.Discard)
	require.NoError(t, err)
	assert.NoError(t, sharedCANeedsSecret(o))
}

// The response time's unit follows what upstream's exporter would do:
// its default mapping scales to seconds unless
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS; a mapping file of one's own
// decides by its response_time entry.
func TestResponseTimeUnitFollowsUpstreamsMapping(t *testing.T) {
	for name, tc := range map[string]struct {
		env     map[string]string
		ms      bool
		wantErr string
	}{
		"default":                 {env: map[string]string{"USE_PROMETHEUS": "true"}},
		"as milliseconds":         {env: map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"}, ms: true},
		"Envoy Gateway's mapping": {env: map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": envoyGatewayMapper(t, egMapperResponseTime)}, ms: true},
		"upstream's mapping, the variable ignored as upstream ignores it": {env: map[string]string{"USE_PROMETHEUS": "true",
			"PROMETHEUS_MAPPER_YAML": envoyGatewayMapper(t, upstreamMapperResponseTime), "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": "true"}},
		"a mapping without the response time": {env: map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": envoyGatewayMapper(t, "mappings: []\n")}},
		"a missing mapping file": {env: map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": "/nonexistent/conf.yaml"},
			wantErr: `PROMETHEUS_MAPPER_YAML="/nonexistent/conf.yaml"`},
	} {
		t.Run(name, func(t *testing.T) {
			tc.env["PEERLIMIT_CLUSTER_SECRET"] = "a-secret-of-at-least-16-bytes"
			getenv := func(k string) string { return tc.env[k] }
			args, _, err := upstreamArgs(getenv, keys(tc.env))
			if tc.wantErr != "" {
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			o, err := parseFlags(args, getenv, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tc.ms, o.node.EnvoyRLS.ResponseTimeMilliseconds)
		})
	}
}
