package xdsconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/internal/testkit/xdsserver"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// registryTarget puts updates in force in an envoyrls.Registry, as the
// node does.
type registryTarget struct {
	reg     *envoyrls.Registry
	opts    envoyrls.LoadOptions
	mu      sync.Mutex
	applied []string // versions put in force
}

func newTarget() *registryTarget { return &registryTarget{reg: envoyrls.EmptyRegistry("xds://test")} }

func (r *registryTarget) Apply(u xdsconfig.Update) error {
	cfg, err := envoyrls.ParseDocuments("xds://test", u.Documents, r.opts)
	if err != nil {
		return err
	}
	r.reg.Set(cfg)
	r.mu.Lock()
	r.applied = append(r.applied, u.Version)
	r.mu.Unlock()
	return nil
}

func (r *registryTarget) limit(domain string) uint32 {
	rules := r.reg.Current().Rules()
	for _, rule := range rules {
		if rule.Domain == domain {
			return rule.RequestsPerUnit
		}
	}
	return 0
}

func limitConfig(name, domain string, rpu uint32) *rlsconfpb.RateLimitConfig {
	return &rlsconfpb.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfpb.RateLimitDescriptor{{
		Key: "user", RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_MINUTE, RequestsPerUnit: rpu},
	}}}
}

// subscribe runs a Subscriber against srv until the test ends.
func subscribe(t *testing.T, cfg xdsconfig.Config) *registryTarget {
	t.Helper()
	target := newTarget()
	run(t, cfg, target, slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelDebug})))
	return target
}

// run runs a Subscriber for target, logging to log, until the test ends.
func run(t *testing.T, cfg xdsconfig.Config, target xdsconfig.Target, log *slog.Logger) {
	t.Helper()
	sub, err := xdsconfig.New(cfg, target, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sub.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// fastConfig subscribes to addr as Envoy Gateway's replicas do, with
// short waits.
func fastConfig(addr string) xdsconfig.Config {
	cfg := xdsconfig.DefaultConfig()
	cfg.ServerAddr, cfg.NodeID = addr, xdsserver.EnvoyGatewayNodeID
	cfg.BackoffInitial, cfg.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	cfg.NackPause = 500 * time.Millisecond
	return cfg
}

func TestASnapshotIsAppliedAndAcked(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", limitConfig("api", "api", 10))
	target := subscribe(t, fastConfig(srv.Addr))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })
	if got := target.limit("api"); got != 10 {
		t.Fatalf("limit in force = %d, want 10", got)
	}

	srv.Set(t, "v2", limitConfig("other", "other", 5), limitConfig("api", "api", 20))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v2") == 1, srv.String() })
	if target.limit("api") != 20 || target.limit("other") != 5 {
		t.Fatalf("after v2: limits %d and %d, want 20 and 5", target.limit("api"), target.limit("other"))
	}
	// Read in resource name order, whatever the order sent: every node
	// reads the same configuration, with the same digest.
	var domains []string
	for _, d := range target.reg.Current().Domains() {
		domains = append(domains, d.Name)
	}
	if !slices.Equal(domains, []string{"api", "other"}) {
		t.Fatalf("domains in the order %v; want name order", domains)
	}
}

func TestABadSnapshotIsNackedAndTheConfigInForceKept(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", limitConfig("api", "api", 10))
	target := subscribe(t, fastConfig(srv.Addr))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })

	bad := limitConfig("api", "api", 99)
	bad.Descriptors[0].RateLimit.Unit = rlsconfpb.RateLimitUnit_UNKNOWN
	srv.Set(t, "v2", bad)
	wait.For(t, 5*time.Second, func() (bool, string) { return len(srv.Nacks()) >= 1, srv.String() })
	nack := srv.Answers()[len(srv.Answers())-1]
	if nack.Version != "v1" || !strings.Contains(nack.Nack, "unit is missing") || !strings.Contains(nack.Nack, "xds:api") {
		t.Fatalf("NACK = %+v; want version v1 kept and the reason naming the resource and the field", nack)
	}
	if got := target.limit("api"); got != 10 {
		t.Fatalf("limit in force after a NACK = %d, want v1's 10", got)
	}

	srv.Set(t, "v3", limitConfig("api", "api", 30))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v3") == 1, srv.String() })
	if got := target.limit("api"); got != 30 {
		t.Fatalf("limit in force after v3 = %d, want 30", got)
	}
}

func TestTwoDomainsOfOneNameAreRefused(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", limitConfig("a", "api", 10), limitConfig("b", "api", 20))
	subscribe(t, fastConfig(srv.Addr))
	wait.For(t, 5*time.Second, func() (bool, string) { return len(srv.Nacks()) >= 1, srv.String() })
	if n := srv.Nacks()[0]; !strings.Contains(n, `domain "api": defined twice`) {
		t.Fatalf("NACK %q does not name the domain", n)
	}
	// The server answers every NACK with the same snapshot; the refusal
	// is repeated once per NackPause, not as fast as the link allows.
	start := len(srv.Nacks())
	time.Sleep(1500 * time.Millisecond) // a span of time to count in, not a wait for an outcome
	if n := len(srv.Nacks()) - start; n > 3 {
		t.Fatalf("%d NACKs of one refused snapshot in 1.5 s; want at most one per NackPause (%s)", n, fastConfig("").NackPause)
	}
}

func TestTheSubscriptionSurvivesAControlPlaneRestart(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", limitConfig("api", "api", 10))
	target := subscribe(t, fastConfig(srv.Addr))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })

	srv.Stop()
	again := xdsserver.Restart(t, srv, nil)
	again.Set(t, "v2", limitConfig("api", "api", 40))
	wait.For(t, 5*time.Second, func() (bool, string) { return again.Acked("v2") == 1, again.String() })
	if got := target.limit("api"); got != 40 {
		t.Fatalf("limit after the restart = %d, want 40", got)
	}
}

// mutualTLSControlPlane serves v1 over TLS with a certificate of ca for
// envoy-gateway and 127.0.0.1, requiring a client certificate of ca.
func mutualTLSControlPlane(t *testing.T, ca *testcerts.CA) *xdsserver.Server {
	t.Helper()
	server := ca.Issue(t, testcerts.Leaf{Name: "envoy-gateway", DNSNames: []string{"envoy-gateway"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	cert, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	srv := xdsserver.Start(t, &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	srv.Set(t, "v1", limitConfig("api", "api", 10))
	return srv
}

func TestMutualTLSToTheControlPlane(t *testing.T) {
	ca := testcerts.NewCA(t, "xds")
	srv := mutualTLSControlPlane(t, ca)
	client := ca.Issue(t, testcerts.Leaf{Name: "ratelimit", Client: true})

	cfg := fastConfig(srv.Addr)
	cfg.UseTLS, cfg.CAFile, cfg.CertFile, cfg.KeyFile, cfg.ServerName = true, ca.File, client.CertFile, client.KeyFile, "envoy-gateway"
	target := subscribe(t, cfg)
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })
	if got := target.limit("api"); got != 10 {
		t.Fatalf("limit = %d, want 10", got)
	}
}

func TestWithoutTheClientCertificateNothingIsApplied(t *testing.T) {
	ca := testcerts.NewCA(t, "xds")
	srv := mutualTLSControlPlane(t, ca)
	cfg := fastConfig(srv.Addr)
	cfg.UseTLS, cfg.CAFile = true, ca.File
	target := subscribe(t, cfg)
	// Several reconnect rounds (20–200 ms each) pass; none may deliver.
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Streams() == 0 && target.reg.Current().Rules() == nil, "" })
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if len(target.reg.Current().Rules()) != 0 || srv.Streams() != 0 {
			t.Fatalf("a client without a certificate got a configuration: %s", srv)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	cfg := xdsconfig.DefaultConfig()
	cfg.ServerAddr = "cp:18001"
	cfg.CertFile = "client.pem"
	cfg.BackoffMax = time.Millisecond
	err := cfg.Validate()
	for _, want := range []string{"CertFile", "BackoffMax", "UseTLS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to name %s", err, want)
		}
	}
}

// The same limits from xDS and from a file are the same rules.
func TestAResourceReadsAsTheSameFile(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"team": "a", "weight": 2.0})
	res := &rlsconfpb.RateLimitConfig{Name: "msgs", Domain: "messaging", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "message_type", Value: "marketing", Descriptors: []*rlsconfpb.RateLimitDescriptor{{
			Key: "to_number", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_DAY, RequestsPerUnit: 5, Name: "per-number",
				Replaces: []*rlsconfpb.RateLimitReplace{{Name: "global"}}},
		}}},
		{Key: "to_number", QuotaMode: true, Metadata: md, RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_WEEK, RequestsPerUnit: 100, Name: "global"}},
		{Key: "internal", RateLimit: &rlsconfpb.RateLimitPolicy{Unlimited: true}},
	}}
	doc, err := xdsconfig.Document(res)
	if err != nil {
		t.Fatal(err)
	}
	fromXDS, err := envoyrls.ParseDocuments("xds", []envoyrls.Document{doc}, envoyrls.LoadOptions{})
	if err != nil {
		t.Fatalf("%v\n%s", err, doc.Data)
	}
	file := `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        shadow_mode: true
        detailed_metric: true
        rate_limit: {unit: day, requests_per_unit: 5, name: per-number, replaces: [{name: global}]}
  - key: to_number
    quota_mode: true
    metadata: {team: a, weight: 2}
    rate_limit: {unit: week, requests_per_unit: 100, name: global}
  - key: internal
    rate_limit: {unlimited: true}
`
	fromFile, err := envoyrls.Parse("rls.yaml", []byte(file), envoyrls.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	describe := func(c *envoyrls.RuleSet) []string {
		var out []string
		for _, r := range c.Rules() {
			out = append(out, fmt.Sprintf("%s|%s|%s|%v|%d per %s|unlimited %v shadow %v quota %v detailed %v|%v",
				r.Domain, r.Path, r.Name, r.Replaces, r.RequestsPerUnit, r.Window, r.Unlimited, r.ShadowMode, r.QuotaMode, r.DetailedMetric, r.Metadata.AsMap()))
		}
		return out
	}
	if a, b := describe(fromXDS), describe(fromFile); !slices.Equal(a, b) {
		t.Fatalf("rules from xDS:\n%s\nfrom the file:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
}
