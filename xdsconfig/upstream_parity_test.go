package xdsconfig_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/internal/testkit/xdsserver"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// Envoy Gateway's xDS server is a plain grpc.NewServer, whose default
// policy answers pings more often than every 5 minutes with GOAWAY
// too_many_pings: the subscription sends none unless told to, as
// upstream's, and never fewer than gRPC's 10 s apart.
func TestKeepaliveIsOffByDefaultAndNeverBelowGRPCsFloor(t *testing.T) {
	cfg := xdsconfig.DefaultConfig()
	cfg.ServerAddr = "cp:18001"
	if cfg.KeepaliveTime != 0 {
		t.Fatalf("default KeepaliveTime = %s; want 0, no pings", cfg.KeepaliveTime)
	}
	for _, ok := range []time.Duration{0, 10 * time.Second, 5 * time.Minute} {
		cfg.KeepaliveTime = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("KeepaliveTime %s: %v", ok, err)
		}
	}
	for _, bad := range []time.Duration{time.Nanosecond, 5 * time.Second, -time.Second} {
		cfg.KeepaliveTime = bad
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "KeepaliveTime") {
			t.Errorf("KeepaliveTime %s: Validate() = %v; want it refused by name", bad, err)
		}
	}
	cfg.KeepaliveTime, cfg.NoResponseWarning = 0, 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "NoResponseWarning") {
		t.Errorf("NoResponseWarning 0: Validate() = %v; want it refused by name", err)
	}
}

// Envoy Gateway serves its snapshot to node id envoy-ratelimit only: a
// node subscribing under another id gets an open, silent stream, and
// says so once.
func TestAWrongNodeIDIsServedNothingAndWarned(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", limitConfig("api", "api", 10))
	capture := testlog.NewCapture()
	cfg := fastConfig(srv.Addr)
	cfg.NodeID, cfg.NoResponseWarning = "default", 200*time.Millisecond
	target := newTarget()
	run(t, cfg, target, slog.New(capture))

	const warning = "does the control plane serve this node id?"
	wait.For(t, 5*time.Second, func() (bool, string) { return len(capture.Find(warning)) > 0, "no warning; " + srv.String() })
	w := capture.Find(warning)[0]
	if w.Level != slog.LevelWarn || w.Attrs["node_id"] != "default" || w.Attrs["xds_server"] != srv.Addr {
		t.Fatalf("warning %+v; want a Warn naming node_id default and xds_server %s", w, srv.Addr)
	}
	if n := len(capture.Find(warning)); n != 1 || srv.Streams() != 1 {
		t.Fatalf("%d warnings on %d streams; want one on one", n, srv.Streams())
	}
	if target.reg.Loaded() || len(srv.Answers()) != 0 {
		t.Fatalf("a wrong node id was served: loaded %v, %s", target.reg.Loaded(), srv)
	}

	// The same control plane serves the id it knows.
	right := subscribe(t, fastConfig(srv.Addr))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })
	if right.limit("api") != 10 || target.reg.Loaded() {
		t.Fatalf("envoy-ratelimit serves %d (want 10); default loaded %v (want false)", right.limit("api"), target.reg.Loaded())
	}
}

// Upstream refuses an unlimited rate limit with a unit ("should not
// specify rate limit unit when unlimited"), as peerlimit's file parser
// refuses it with a unit or a requests_per_unit: NACKed, with upstream's
// reason, and the limits in force stay.
func TestAnUnlimitedRateLimitWithAUnitIsNacked(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", limitConfig("api", "api", 10))
	target := subscribe(t, fastConfig(srv.Addr))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })

	bad := limitConfig("api", "api", 10)
	bad.Descriptors[0].RateLimit = &rlsconfpb.RateLimitPolicy{Unlimited: true, Unit: rlsconfpb.RateLimitUnit_SECOND}
	srv.Set(t, "v2", bad)
	wait.For(t, 5*time.Second, func() (bool, string) { return len(srv.Nacks()) >= 1, srv.String() })
	nack := srv.Answers()[len(srv.Answers())-1]
	if nack.Version != "v1" || !strings.Contains(nack.Nack, "should not specify rate limit unit when unlimited") ||
		!strings.Contains(nack.Nack, `"api"`) || !strings.Contains(nack.Nack, "descriptor user") {
		t.Fatalf("NACK = %+v; want v1 kept and upstream's reason naming the resource and the descriptor", nack)
	}
	if got := target.limit("api"); got != 10 {
		t.Fatalf("limit in force after the NACK = %d, want v1's 10", got)
	}
}

func TestAnUnlimitedRateLimitTakesNoLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy *rlsconfpb.RateLimitPolicy
		want   string
	}{
		{"unit", &rlsconfpb.RateLimitPolicy{Unlimited: true, Unit: rlsconfpb.RateLimitUnit_HOUR}, "descriptor k=v / inner: should not specify rate limit unit when unlimited"},
		{"requests_per_unit", &rlsconfpb.RateLimitPolicy{Unlimited: true, RequestsPerUnit: 5}, "descriptor k=v / inner: should not specify requests_per_unit when unlimited"},
		{"alone", &rlsconfpb.RateLimitPolicy{Unlimited: true, Name: "n"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &rlsconfpb.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconfpb.RateLimitDescriptor{{Key: "k", Value: "v",
				Descriptors: []*rlsconfpb.RateLimitDescriptor{{Key: "inner", RateLimit: tc.policy}}}}}
			_, err := xdsconfig.Document(c)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Document() = %v; want %q", err, tc.want)
			}
		})
	}
}

// When its last Gateway is deleted, Envoy Gateway serves a snapshot with
// no RateLimitConfig at all: acknowledged, and the service then has no
// domains.
func TestAnEmptySnapshotIsAckedAndLeavesNoDomains(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	srv.Set(t, "v1", limitConfig("api", "api", 10))
	target := subscribe(t, fastConfig(srv.Addr))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })

	srv.Set(t, "v2")
	// The snapshot has no version for the type: the response's is empty.
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("") == 1, srv.String() })
	if d := target.reg.Current().Domains(); len(d) != 0 || len(srv.Nacks()) != 0 {
		t.Fatalf("after the empty snapshot: %d domains, NACKs %v; want none", len(d), srv.Nacks())
	}
}

// With merge-domains (MERGE_DOMAIN_CONFIG) two resources may define one
// domain, each adding its descriptors.
func TestTwoResourcesOfOneDomainAreMergedWhenAsked(t *testing.T) {
	srv := xdsserver.Start(t, nil)
	other := limitConfig("b", "api", 20)
	other.Descriptors[0].Key = "team"
	srv.Set(t, "v1", limitConfig("a", "api", 10), other)
	target := newTarget()
	target.opts.MergeDomains = true
	run(t, fastConfig(srv.Addr), target, slog.New(slog.NewTextHandler(testlog.New(t), nil)))
	wait.For(t, 5*time.Second, func() (bool, string) { return srv.Acked("v1") == 1, srv.String() })
	rules := target.reg.Current().Rules()
	if len(target.reg.Current().Domains()) != 1 || len(rules) != 2 || rules[0].Path != "user" || rules[1].Path != "team" {
		t.Fatalf("%d domains, rules %+v; want domain api with user (a) then team (b)", len(target.reg.Current().Domains()), rules)
	}
}
