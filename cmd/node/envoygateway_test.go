package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
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

	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/internal/testkit/xdsserver"
)

// egNamespace is the namespace Envoy Gateway's controller runs in, which
// names its certificates.
const egNamespace = "envoy-gateway-system"

// envoyGatewayEnv is the environment Envoy Gateway (d32f282,
// internal/infrastructure/kubernetes/ratelimit/resource.go) gives its rate
// limit container, with a Redis backend named, Prometheus and tracing on;
// certs is where the envoy-rate-limit Secret is mounted (/certs), mapper
// the statsd_exporter mapping it mounts (envoyGatewayMapper).
func envoyGatewayEnv(certs, mapper string) map[string]string {
	crt, key, ca := filepath.Join(certs, "tls.crt"), filepath.Join(certs, "tls.key"), filepath.Join(certs, "ca.crt")
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

// egCerts are certificates shaped as Envoy Gateway's certgen makes them
// (internal/crypto/certgen.go): one RSA CA; the controller's certificate
// for its Service's names; and, for the rate limit service and for Envoy
// alike, CN "*" with the one name "*.<namespace>", no extended key usage,
// PKCS#1 keys. Files: ca.crt, and <name>.crt/.key for each.
type egCerts struct {
	dir    string
	ca     *x509.Certificate
	caKey  *rsa.PrivateKey
	serial int64
}

func newEGCerts(t *testing.T) *egCerts {
	t.Helper()
	c := &egCerts{dir: t.TempDir(), caKey: rsaKey(t)}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "envoy-gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &c.caKey.PublicKey, c.caKey)
	require.NoError(t, err)
	c.ca, err = x509.ParseCertificate(der)
	require.NoError(t, err)
	writePEMFile(t, filepath.Join(c.dir, "ca.crt"), "CERTIFICATE", der)
	return c
}

// issue writes name.crt and name.key: a certificate for cn and dnsNames,
// as certgen's newCert issues it.
func (c *egCerts) issue(t *testing.T, name, cn string, dnsNames ...string) {
	t.Helper()
	key := rsaKey(t)
	c.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(100 + c.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageDataEncipherment | x509.KeyUsageKeyEncipherment | x509.KeyUsageContentCommitment,
		DNSNames: dnsNames}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	require.NoError(t, err)
	writePEMFile(t, filepath.Join(c.dir, name+".crt"), "CERTIFICATE", der)
	writePEMFile(t, filepath.Join(c.dir, name+".key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
}

// tlsConfig is a TLS configuration presenting name's certificate and
// trusting the CA.
func (c *egCerts) tlsConfig(t *testing.T, name string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(c.dir, name+".crt"), filepath.Join(c.dir, name+".key"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(c.ca)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ClientCAs: pool, MinVersion: tls.VersionTLS12}
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return k
}

func writePEMFile(t *testing.T, path, typ string, der []byte) {
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
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
	certs.issue(t, "controller", "envoy-gateway", "envoy-gateway", "envoy-gateway."+egNamespace,
		"envoy-gateway."+egNamespace+".svc", "envoy-gateway."+egNamespace+".svc.cluster.local")
	certs.issue(t, "tls", "*", "*."+egNamespace) // the envoy-rate-limit Secret
	certs.issue(t, "envoy", "*", "*."+egNamespace)
	srvTLS := certs.tlsConfig(t, "controller")
	srvTLS.ClientAuth = tls.RequireAndVerifyClientCert
	srv := xdsserver.Start(t, srvTLS)
	srv.Set(t, "v1", &rlsconfpb.RateLimitConfig{Name: "default/eg", Domain: "default/eg/http", Descriptors: []*rlsconfpb.RateLimitDescriptor{{
		Key: "client", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: 3}}}})

	env := envoyGatewayEnv(certs.dir, envoyGatewayMapper(t, egMapperResponseTime))
	for k, v := range envoyGatewayAdditions(t) {
		env[k] = strings.ReplaceAll(v, "/certs/", certs.dir+"/")
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

	envoy := certs.tlsConfig(t, "envoy")
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

	anon := certs.tlsConfig(t, "envoy")
	anon.Certificates = nil
	_, err = call(a, anon)
	assert.Error(t, err, "GRPC_CLIENT_TLS_CACERT: a caller without a certificate from the CA is refused")
}

// The ratelimit mode refuses peer TLS without a cluster secret: the CA
// that makes a certificate a peer's also issues Envoy's.
func TestRatelimitModeWithTLSNeedsAClusterSecret(t *testing.T) {
	env := envoyGatewayEnv("/certs", envoyGatewayMapper(t, egMapperResponseTime))
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
