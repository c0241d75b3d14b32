package node

import (
	"context"
	"fmt"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// xdsTarget puts the control plane's configurations in force: parsed and
// checked exactly as the same files would be, then swapped in as a
// reload swaps them. The Subscriber calls Apply from one goroutine.
type xdsTarget struct {
	n    *Node
	opts envoyrls.LoadOptions
}

func (t xdsTarget) Apply(u xdsconfig.Update) error {
	rls := t.n.rls
	cfg, err := envoyrls.ParseDocuments(rls.xds.Source(), u.Documents, t.opts)
	if err != nil {
		return err
	}
	if rls.rules.Loaded() && rls.rules.Current().Digest == cfg.Digest {
		return nil // the same limits, resent (a reconnect, or a version bump of nothing)
	}
	rls.rules.Set(cfg)
	t.n.refreshRLSHealth()
	t.n.log.Info("envoy rls config from the control plane in force", "version", u.Version, "domains", len(cfg.Domains()),
		"rules", len(cfg.Rules()), "digest", cfg.Digest)
	t.n.configChanged()
	return nil
}

// newXDS prepares the subscription of a node whose Envoy rules come from
// a control plane; it starts with startXDS.
func (n *Node) newXDS() error {
	if n.rls == nil || !n.cfg.EnvoyRLSXDS.Enabled() {
		return nil
	}
	opts := envoyrls.LoadOptions{Check: n.store.Validate, MergeDomains: n.cfg.EnvoyRLS.MergeDomains}
	sub, err := xdsconfig.New(n.cfg.EnvoyRLSXDS, n.rls.countLoads(xdsTarget{n: n, opts: opts}), n.reg, n.log)
	if err != nil {
		return fmt.Errorf("envoy rls xds: %w", err)
	}
	n.rls.xds = sub
	return nil
}

// startXDS runs the subscription among the node's loops. Until the first
// configuration is in force the rate limit service answers UNAVAILABLE,
// as envoyproxy/ratelimit fails every call before its first
// configuration: an Envoy asking then gets an error, which its
// failure_mode_deny decides, never an OK that limits nothing. With
// EnvoyRLSAwaitConfig the node's health (the service's gRPC health,
// /healthz) is down too, and whenever the configuration in force has no
// domains, so that probes keep traffic away (see unready).
func (n *Node) startXDS() {
	ctx, cancel := context.WithCancel(context.Background())
	n.loops.Add(2)
	go func() { defer n.loops.Done(); n.rls.xds.Run(ctx) }()
	go func() { defer n.loops.Done(); <-n.stop; cancel() }()
}

// rlsHealth is the rate limit service's health while the node serves.
func (n *Node) rlsHealth() healthpb.HealthCheckResponse_ServingStatus {
	if n.rls.unready() {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// refreshRLSHealth sets the service's health from the rules in force:
// the first configuration, one with no domains, or the first with some
// again may change it. Reloads run concurrently (SIGHUP beside the
// watcher, the control plane), so reading the rules and setting the
// status is one step under healthMu: otherwise a reload that read the
// empty rules could set NOT_SERVING after one that read the new rules set
// SERVING. Shutdown's health.Shutdown makes it a no-op once it has run.
func (n *Node) refreshRLSHealth() {
	n.rls.healthMu.Lock()
	defer n.rls.healthMu.Unlock()
	if n.serving.Load() {
		n.health.SetServingStatus(envoyRLSServiceName, n.rlsHealth())
	}
}

// healthy is /healthz's (and /healthcheck's) answer: serving, and not
// unready for want of a configuration (unready).
func (n *Node) healthy() bool {
	return n.serving.Load() && (n.rls == nil || !n.rls.unready())
}

// awaiting reports whether calls must wait for a first configuration
// from a control plane.
func (e *envoyRLS) awaiting() bool { return e.xds != nil && !e.rules.Loaded() }

// unready reports whether the rules keep the node's health down: with
// EnvoyRLSAwaitConfig, none yet from the control plane (upstream does not
// even listen then, unless FORCE_START_WITHOUT_INITIAL_CONFIG); with
// EnvoyRLSHealthyNeedsDomains, rules in force with no domains, at any
// time. Upstream's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED fails its
// health whenever a configuration with no domains is put in force, not
// only before the first (service.SetConfig), and Envoy Gateway serves one
// with no domains when its last Gateway is deleted. The calls are
// answered meanwhile (after the first), an empty configuration limiting
// nothing, as upstream's.
func (e *envoyRLS) unready() bool {
	if e.awaitConfig && e.awaiting() {
		return true
	}
	return e.needsDomains && (!e.rules.Loaded() || len(e.rules.Current().Domains()) == 0)
}

// awaitGate answers UNAVAILABLE until the first configuration from the
// control plane is in force, then steps aside.
type awaitGate struct {
	rlspb.RateLimitServiceServer
	rls *envoyRLS
}

func (g awaitGate) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	if g.rls.awaiting() {
		g.rls.metrics.Unanswered(start) // upstream counts it, as a service error
		return nil, status.Errorf(codes.Unavailable, "no rate limit configuration yet from the control plane %s", g.rls.xds.Source())
	}
	return g.RateLimitServiceServer.ShouldRateLimit(ctx, req)
}
