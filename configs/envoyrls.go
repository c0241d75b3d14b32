package configs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// envoyRLSServiceName is the gRPC service Envoy calls, also reported by
// the health service while the node serves it.
var envoyRLSServiceName = rlspb.RateLimitService_ServiceDesc.ServiceName

// envoyRLS is the node's Envoy rate limit service: its rules, its
// metrics and the count of their reloads.
type envoyRLS struct {
	rules    *envoyrls.Registry
	settings envoyrls.Config
	// xds is the subscription to a control plane, nil when the rules
	// come from files; until its first configuration the service answers
	// UNAVAILABLE, and with awaitConfig the node's health waits for it too
	// (Config.EnvoyRLSAwaitConfig).
	xds         *xdsconfig.Subscriber
	awaitConfig bool
	// needsDomains: health is down while the rules in force have no
	// domains (Config.EnvoyRLSHealthyNeedsDomains).
	needsDomains bool
	healthMu     sync.Mutex             // serialises UpdateHealth
	reloads      *prometheus.CounterVec // by result: ok, error
	// metrics are the service's; they count every load of the
	// configuration as upstream's config_load_success and _error.
	metrics *envoyrls.Metrics
}

// loadEnvoyRLS reads Config.EnvoyRLSConfig, checked by check, or holds
// the place of a control plane's rules; nil without either. A directory's
// entries that are not files are logged to log at each load.
func loadEnvoyRLS(cfg Config, check func(limiter.Request) error, log *slog.Logger) (*envoyRLS, error) {
	if cfg.EnvoyRLSXDS.Enabled() {
		return &envoyRLS{rules: envoyrls.EmptyRegistry(cfg.EnvoyRLSXDS.Source()), settings: cfg.EnvoyRLS,
			awaitConfig: cfg.EnvoyRLSAwaitConfig, needsDomains: cfg.EnvoyRLSHealthyNeedsDomains}, nil
	}
	if cfg.EnvoyRLSConfig == "" {
		return nil, nil
	}
	skipped := func(path, why string) {
		log.Warn("envoy rls config: skipped an entry of the directory that is no file to read", "path", path, "why", why)
	}
	rules, err := envoyrls.NewRegistry(cfg.EnvoyRLSConfig, envoyrls.LoadOptions{Check: check, MergeDomains: cfg.EnvoyRLS.MergeDomains, Skipped: skipped})
	if err != nil {
		return nil, err
	}
	return &envoyRLS{rules: rules, settings: cfg.EnvoyRLS, needsDomains: cfg.EnvoyRLSHealthyNeedsDomains}, nil
}

// RegisterEnvoyRLS serves Envoy's rate limit service on srv from the
// rules in force, if the Set has any; deps are the service's but for its
// Rules and Metrics, which the Set supplies. With a control plane the
// service answers UNAVAILABLE until its first configuration is in force.
func (s *Set) RegisterEnvoyRLS(srv grpc.ServiceRegistrar, deps envoyrls.ServerDeps) error {
	if s.rls == nil {
		return nil
	}
	deps.Rules, deps.Metrics = s.rls.rules, s.rls.metrics
	rls, err := envoyrls.NewServer(s.rls.settings, deps)
	if err != nil {
		return err
	}
	if s.rls.xds != nil {
		rlspb.RegisterRateLimitServiceServer(srv, awaitGate{RateLimitServiceServer: rls, rls: s.rls})
		return nil
	}
	rlspb.RegisterRateLimitServiceServer(srv, rls)
	return nil
}

// subscribe prepares the subscription of a Set whose Envoy rules come
// from a control plane; it runs from Start.
func (s *Set) subscribe() error {
	if s.rls == nil || !s.cfg.EnvoyRLSXDS.Enabled() {
		return nil
	}
	opts := envoyrls.LoadOptions{Check: s.deps.Check, MergeDomains: s.cfg.EnvoyRLS.MergeDomains}
	sub, err := xdsconfig.New(s.cfg.EnvoyRLSXDS, s.rls.countLoads(xdsTarget{s: s, opts: opts}), s.deps.Registerer, s.deps.Logger)
	if err != nil {
		return fmt.Errorf("envoy rls xds: %w", err)
	}
	s.rls.xds = sub
	return nil
}

// startXDS runs the subscription, if any, until Shutdown. Until the first
// configuration is in force the rate limit service answers UNAVAILABLE,
// as envoyproxy/ratelimit fails every call before its first
// configuration: an Envoy asking then gets an error, which its
// failure_mode_deny decides, never an OK that limits nothing. With
// EnvoyRLSAwaitConfig the node's health (the service's gRPC health,
// /healthz) is down too, and whenever the configuration in force has no
// domains, so that probes keep traffic away (see unready).
func (s *Set) startXDS() {
	if s.rls == nil || s.rls.xds == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.rls.xds.Run(ctx) }()
	go func() { defer s.wg.Done(); <-s.stop; cancel() }()
}

// xdsTarget puts the control plane's configurations in force: parsed and
// checked exactly as the same files would be, then swapped in as a
// reload swaps them. The Subscriber calls Apply from one goroutine.
type xdsTarget struct {
	s    *Set
	opts envoyrls.LoadOptions
}

func (t xdsTarget) Apply(u xdsconfig.Update) error {
	rls := t.s.rls
	cfg, err := envoyrls.ParseDocuments(rls.xds.Source(), u.Documents, t.opts)
	if err != nil {
		return err
	}
	if rls.rules.Loaded() && rls.rules.Current().Digest == cfg.Digest {
		return nil // the same limits, resent (a reconnect, or a version bump of nothing)
	}
	rls.rules.Set(cfg)
	t.s.UpdateHealth()
	t.s.deps.Logger.Info("envoy rls config from the control plane in force", "version", u.Version, "domains", len(cfg.Domains()),
		"rules", len(cfg.Rules()), "digest", cfg.Digest)
	t.s.changed()
	return nil
}

// countLoads wraps t, the target of the control plane's configurations,
// so that each one Applied, put in force, found the same, or refused,
// counts in ratelimit_service_config_load_success or _error, as upstream
// counts each update of its xDS subscription.
func (e *envoyRLS) countLoads(t xdsconfig.Target) xdsconfig.Target { return loadCounter{t, e} }

type loadCounter struct {
	xdsconfig.Target
	rls *envoyRLS
}

func (c loadCounter) Apply(u xdsconfig.Update) error {
	err := c.Target.Apply(u)
	c.rls.metrics.ConfigLoaded(err) // set by New, before the subscription runs
	return err
}

// UpdateHealth sets the Envoy rate limit service's gRPC health from the
// rules in force, while Deps.Serving: the first configuration, one with
// no domains, or the first with some again may change it. The Set calls
// it whenever it puts rules in force; the node, when it starts serving.
// Reloads run concurrently (SIGHUP beside the watcher, the control
// plane), so reading the rules and setting the status is one step under
// a lock: otherwise a reload that read the empty rules could set
// NOT_SERVING after one that read the new rules set SERVING. A Set
// without Envoy rules sets nothing.
func (s *Set) UpdateHealth() {
	if s.rls == nil {
		return
	}
	s.rls.healthMu.Lock()
	defer s.rls.healthMu.Unlock()
	if !s.deps.Serving() {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if s.rls.unready() {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	s.deps.Health.SetServingStatus(envoyRLSServiceName, st)
}

// Ready reports whether the rules let the node report itself ready
// (/healthz): not with EnvoyRLSAwaitConfig before the control plane's
// first configuration, nor with EnvoyRLSHealthyNeedsDomains while the
// rules in force have no domains (see unready).
func (s *Set) Ready() bool { return s.rls == nil || !s.rls.unready() }

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
