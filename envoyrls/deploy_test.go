package envoyrls_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterpb "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routepb "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmpb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/node"
)

// There is no Envoy here to run deploy/envoy/envoy.yaml, so it is checked
// against Envoy's own protos and validation rules, against the compose
// file and the rate limit configuration it points at, and by sending a
// node the descriptors its route actions generate.

const repoRoot = ".."

// loadBootstrap parses an Envoy YAML bootstrap as Envoy does: YAML to
// JSON to the proto, typed_config included, unknown fields refused.
func loadBootstrap(t *testing.T, path string) *bootstrappb.Bootstrap {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc any
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	js, err := json.Marshal(doc)
	require.NoError(t, err)
	var b bootstrappb.Bootstrap
	require.NoError(t, protojson.Unmarshal(js, &b), "Envoy would refuse %s", path)
	validateAll(t, b.ProtoReflect(), "bootstrap")
	return &b
}

// validateAll runs Envoy's validation rules (protoc-gen-validate) on m,
// and on every typed_config inside it, which the generated rules do not
// unpack.
func validateAll(t *testing.T, m protoreflect.Message, where string) {
	t.Helper()
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok {
		require.NoError(t, v.ValidateAll(), where)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		visit := func(mv protoreflect.Message) {
			if a, ok := mv.Interface().(*anypb.Any); ok {
				inner, err := a.UnmarshalNew()
				require.NoError(t, err, "%s.%s: %s", where, fd.Name(), a.GetTypeUrl())
				validateAll(t, inner.ProtoReflect(), where+"."+string(fd.Name()))
				return
			}
			validateAll(t, mv, where+"."+string(fd.Name()))
		}
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				visit(v.List().Get(i).Message())
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					visit(mv.Message())
				}
				return true
			})
		default:
			visit(v.Message())
		}
		return true
	})
}

func unpack[T proto.Message](t *testing.T, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	require.NoError(t, err)
	out, ok := m.(T)
	require.True(t, ok, "typed_config is %s", a.GetTypeUrl())
	return out
}

// envoySide is what the test needs of the bootstrap.
type envoySide struct {
	hcm    *hcmpb.HttpConnectionManager
	filter *ratelimitfilter.RateLimit
	rls    *clusterpb.Cluster
}

func readEnvoySide(t *testing.T) envoySide {
	t.Helper()
	b := loadBootstrap(t, filepath.Join(repoRoot, "deploy/envoy/envoy.yaml"))
	var e envoySide
	require.Len(t, b.GetStaticResources().GetListeners(), 1)
	for _, f := range b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters() {
		if f.GetName() == "envoy.filters.network.http_connection_manager" {
			e.hcm = unpack[*hcmpb.HttpConnectionManager](t, f.GetTypedConfig())
		}
	}
	require.NotNil(t, e.hcm)
	for _, f := range e.hcm.GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ratelimit" {
			e.filter = unpack[*ratelimitfilter.RateLimit](t, f.GetTypedConfig())
		}
	}
	require.NotNil(t, e.filter)
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == e.filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() {
			e.rls = c
		}
	}
	require.NotNil(t, e.rls, "the filter's cluster is defined")
	return e
}

func TestEnvoyBootstrapPointsAtTheComposeCluster(t *testing.T) {
	e := readEnvoySide(t)
	cfg, err := envoyrls.Load(filepath.Join(repoRoot, "deploy/envoy/rls"), envoyrls.LoadOptions{})
	require.NoError(t, err)
	assert.NotNil(t, cfg.Domain(e.filter.GetDomain()), "the filter's domain %q is configured", e.filter.GetDomain())
	assert.Equal(t, "V3", e.filter.GetRateLimitService().GetTransportApiVersion().String())
	assert.GreaterOrEqual(t, e.filter.GetTimeout().AsDuration(), 50*time.Millisecond, "room for a forward to the owner")

	// gRPC needs HTTP/2 to the nodes.
	opts := e.rls.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	require.NotNil(t, opts)
	require.NotNil(t, unpack[*upstreamhttp.HttpProtocolOptions](t, opts).GetExplicitHttpConfig().GetHttp2ProtocolOptions())
	// Health-checked on the service itself, which nodes without it lack.
	require.Len(t, e.rls.GetHealthChecks(), 1)
	assert.Equal(t, rlspb.RateLimitService_ServiceDesc.ServiceName, e.rls.GetHealthChecks()[0].GetGrpcHealthCheck().GetServiceName())

	// Every node the compose file publishes, and nothing else.
	var ports []int
	for _, ep := range e.rls.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints() {
		sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
		assert.Equal(t, "127.0.0.1", sa.GetAddress())
		ports = append(ports, int(sa.GetPortValue()))
	}
	assert.Equal(t, composeGRPCPorts(t), ports)
}

// composeGRPCPorts reads the default published gRPC ports of n1..n3.
func composeGRPCPorts(t *testing.T) []int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	require.NoError(t, err)
	var cf struct {
		Services map[string]struct {
			Ports []string `yaml:"ports"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &cf))
	published := regexp.MustCompile(`-(\d+)\}:9090$`) // "${PEERLIMIT_N1_GRPC-19090}:9090"
	var out []int
	for _, name := range []string{"n1", "n2", "n3"} {
		for _, p := range cf.Services[name].Ports {
			if m := published.FindStringSubmatch(p); m != nil {
				n, _ := strconv.Atoi(m[1])
				out = append(out, n)
			}
		}
	}
	require.Len(t, out, 3)
	return out
}

// docs/envoy.md shows both files as they are.
func TestDocsShowTheDeployFiles(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/envoy.md"))
	require.NoError(t, err)
	for _, f := range []string{"deploy/envoy/envoy.yaml", "deploy/envoy/rls/ratelimit.yaml"} {
		raw, err := os.ReadFile(filepath.Join(repoRoot, f))
		require.NoError(t, err)
		// Without the file's leading comment, which the doc replaces.
		body := string(raw)
		for strings.HasPrefix(body, "#") {
			_, body, _ = strings.Cut(body, "\n")
		}
		assert.Contains(t, string(doc), "```yaml\n"+body+"```", "docs/envoy.md shows %s verbatim", f)
	}
}

// request is an HTTP request as the route actions see it.
type request struct {
	path    string
	from    string
	headers map[string]string
}

// descriptors is what Envoy's rate limit filter sends for r: the route
// it matches, then one descriptor per rate_limits entry, built from the
// actions the bootstrap uses (an entry with a missing request header is
// not sent).
func (e envoySide) descriptors(t *testing.T, r request) []*rlscommon.RateLimitDescriptor {
	t.Helper()
	var route *routepb.Route
	for _, rt := range e.hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		m := rt.GetMatch()
		if (m.GetPath() != "" && m.GetPath() == r.path) || (m.GetPrefix() != "" && strings.HasPrefix(r.path, m.GetPrefix())) {
			route = rt
			break
		}
	}
	require.NotNil(t, route, "no route for %s", r.path)
	var out []*rlscommon.RateLimitDescriptor
next:
	for _, rl := range route.GetRoute().GetRateLimits() {
		d := &rlscommon.RateLimitDescriptor{}
		for _, a := range rl.GetActions() {
			var k, v string
			switch {
			case a.GetRemoteAddress() != nil:
				k, v = "remote_address", r.from
			case a.GetGenericKey() != nil:
				k, v = cmpOr(a.GetGenericKey().GetDescriptorKey(), "generic_key"), a.GetGenericKey().GetDescriptorValue()
			case a.GetRequestHeaders() != nil:
				h, ok := r.headers[a.GetRequestHeaders().GetHeaderName()]
				if !ok {
					continue next
				}
				k, v = a.GetRequestHeaders().GetDescriptorKey(), h
			default:
				t.Fatalf("the test does not know action %v", a)
			}
			d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		out = append(out, d)
	}
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// The table "What Envoy sends" of docs/envoy.md, against a node serving
// deploy/envoy/rls/.
func TestDocsEnvoyScenarios(t *testing.T) {
	e := readEnvoySide(t)
	cfg := node.DefaultLocalConfig("docs")
	cfg.EnvoyRLSConfig, cfg.EnvoyRLS.Headers = filepath.Join(repoRoot, "deploy/envoy/rls"), true
	cfg.Logger = slog.New(slog.DiscardHandler)
	n, err := node.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Kill() })
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	rls := rlspb.NewRateLimitServiceClient(conn)
	// From 203.0.113.9 unless said otherwise, as in the doc.
	from := func(r request) request {
		if r.from == "" {
			r.from = "203.0.113.9"
		}
		return r
	}
	send := func(r request) *rlspb.RateLimitResponse {
		t.Helper()
		r = from(r)
		resp, err := rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: e.filter.GetDomain(), Descriptors: e.descriptors(t, r)})
		require.NoError(t, err)
		return resp
	}
	entries := func(r request) [][]string {
		var out [][]string
		for _, d := range e.descriptors(t, from(r)) {
			var kv []string
			for _, en := range d.GetEntries() {
				kv = append(kv, en.GetKey()+"="+en.GetValue())
			}
			out = append(out, kv)
		}
		return out
	}

	// GET /: the address, 99 of 100 left this minute.
	get := request{path: "/"}
	assert.Equal(t, [][]string{{"remote_address=203.0.113.9"}}, entries(get))
	resp := send(get)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	assert.Equal(t, uint32(99), resp.GetStatuses()[0].GetLimitRemaining())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_MINUTE, resp.GetStatuses()[0].GetCurrentLimit().GetUnit())

	// From the blocked address: always over.
	for range 2 {
		assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, send(request{path: "/", from: "192.0.2.66"}).GetOverallCode())
	}

	// An API key: 999 of 1000 left this hour.
	withKey := request{path: "/", headers: map[string]string{"x-api-key": "k1"}}
	assert.Equal(t, [][]string{{"remote_address=203.0.113.9"}, {"api_key=k1"}}, entries(withKey))
	resp = send(withKey)
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	assert.Equal(t, uint32(999), resp.GetStatuses()[1].GetLimitRemaining())

	// The batch job's key is never counted.
	resp = send(request{path: "/", from: "198.51.100.1", headers: map[string]string{"x-api-key": "internal-batch"}})
	assert.Equal(t, uint32(1<<32-1), resp.GetStatuses()[1].GetLimitRemaining())
	assert.Nil(t, resp.GetStatuses()[1].GetCurrentLimit())

	// A partner's 201st call within the hour passes: shadow mode. (From
	// many addresses, so that the per-address limit stays out of it.)
	for i := range 201 {
		resp = send(request{path: "/", from: "198.51.100." + strconv.Itoa(i%200+2), headers: map[string]string{"x-api-key": "partner-acme"}})
		require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode(), "call %d", i+1)
	}
	assert.Zero(t, resp.GetStatuses()[1].GetLimitRemaining(), "reported as spent")
	assert.Equal(t, uint32(200), resp.GetStatuses()[1].GetCurrentLimit().GetRequestsPerUnit())

	// Logins: the 6th within 15 minutes is refused, with Retry-After.
	login := request{path: "/login", from: "198.51.100.250", headers: map[string]string{"x-user": "alice"}}
	assert.Equal(t, [][]string{{"remote_address=198.51.100.250"}, {"path=/login", "user=alice"}}, entries(login))
	for i := range 5 {
		require.Equal(t, rlspb.RateLimitResponse_OK, send(login).GetOverallCode(), "login %d", i+1)
	}
	resp = send(login)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetStatuses()[0].GetCode(), "the address is fine")
	st := resp.GetStatuses()[1]
	assert.Equal(t, uint32(15), st.GetCurrentLimit().GetUnitMultiplier().GetValue())
	hdr := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdr[h.GetKey()] = h.GetValue()
	}
	assert.Equal(t, `"path_/login.user";q=5;w=900`, hdr["RateLimit-Policy"])
	retry, err := strconv.Atoi(hdr["Retry-After"])
	require.NoError(t, err)
	assert.InDelta(t, 900, retry, 5, "the first of the five leaves the window in 15 minutes")

	// No x-user: the address's limit only.
	assert.Equal(t, [][]string{{"remote_address=198.51.100.251"}}, entries(request{path: "/login", from: "198.51.100.251"}))
}
