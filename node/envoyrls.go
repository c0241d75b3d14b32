package node

import (
	"errors"
	"log/slog"
	"sync"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/tracing"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// envoyRLSServiceName is the gRPC service Envoy calls, also reported by
// the health service while the node serves it.
var envoyRLSServiceName = rlspb.RateLimitService_ServiceDesc.ServiceName

// ErrNoEnvoyRLSConfig is returned by ReloadEnvoyRLS on a node started
// without Config.EnvoyRLSConfig: there is nothing to reload.
var ErrNoEnvoyRLSConfig = errors.New("no envoy rate limit service configuration")

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
	healthMu     sync.Mutex             // serialises refreshRLSHealth
	reloads      *prometheus.CounterVec // by result: ok, error
	// metrics are the service's, set by register; they count every load
	// of the configuration as upstream's config_load_success and _error.
	metrics *envoyrls.Metrics
}

// loadEnvoyRLS reads Config.EnvoyRLSConfig, checked against the store's
// caps; nil without one.
func loadEnvoyRLS(cfg Config, store *limiter.Store) (*envoyRLS, error) {
	if cfg.EnvoyRLSXDS.Enabled() {
		return &envoyRLS{rules: envoyrls.EmptyRegistry(cfg.EnvoyRLSXDS.Source()), settings: cfg.EnvoyRLS,
			awaitConfig: cfg.EnvoyRLSAwaitConfig, needsDomains: cfg.EnvoyRLSHealthyNeedsDomains}, nil
	}
	if cfg.EnvoyRLSConfig == "" {
		return nil, nil
	}
	rules, err := envoyrls.NewRegistry(cfg.EnvoyRLSConfig, envoyrls.LoadOptions{Check: store.Validate, MergeDomains: cfg.EnvoyRLS.MergeDomains})
	if err != nil {
		return nil, err
	}
	return &envoyRLS{rules: rules, settings: cfg.EnvoyRLS, needsDomains: cfg.EnvoyRLSHealthyNeedsDomains}, nil
}

// register serves the service on srv, over the node's request path, and
// registers its metrics. A nil *envoyRLS registers nothing.
func (e *envoyRLS) register(srv *grpc.Server, svc *route.Service, reg prometheus.Registerer, log *slog.Logger, traces *tracing.Provider) error {
	if e == nil {
		return nil
	}
	m, err := envoyrls.NewMetrics(reg, e.settings)
	if err != nil {
		return err
	}
	e.metrics = m
	if e.xds == nil {
		m.ConfigLoaded(nil) // the files, read by loadEnvoyRLS: a failure there stops the start
	}
	e.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_config_reloads_total",
		Help: "Reloads of the Envoy rate limit service configuration (SIGHUP), by result: ok, or error (the configuration in force was kept)."},
		[]string{"result"})
	e.reloads.WithLabelValues("ok")
	e.reloads.WithLabelValues("error")
	if err := reg.Register(e.reloads); err != nil {
		return err
	}
	s, err := envoyrls.NewServer(e.settings, envoyrls.ServerDeps{Rules: e.rules, Checker: svc, Validate: svc.Store().Validate,
		MaxKeyBytes: svc.Store().Config().MaxKeyBytes, Metrics: m, Logger: log,
		Tracer: traces.Tracer(envoyRLSTracer), Propagator: tracing.Propagator()})
	if err != nil {
		return err
	}
	if e.xds != nil {
		rlspb.RegisterRateLimitServiceServer(srv, awaitGate{RateLimitServiceServer: s, rls: e})
		return nil
	}
	rlspb.RegisterRateLimitServiceServer(srv, s)
	return nil
}

// ReloadEnvoyRLS reads Config.EnvoyRLSConfig again and puts it in force
// (cmd/node calls it on SIGHUP; with Config.WatchConfig a change of the
// files does too, configwatch.go). On any error, such as a bad line or a
// missing file, the configuration in force stays as it was; the error
// names the file and line, is logged, counted in
// peerlimit_envoy_rls_config_reloads_total{result="error"}, and shown by
// ConfigErrors (GET /healthz) and peerlimit_config_reload_failing until a
// reload succeeds.
//
// Limiter state is untouched: it is keyed by domain and descriptor, window
// and algorithm, never by rule. A rule whose requests_per_unit changed
// applies the new limit at once to what is already counted; one whose
// window or algorithm changed starts on a fresh state.
//
// Only this node reloads: until every node has reloaded the same files,
// the same descriptor may be limited differently depending on which node
// Envoy asks.
func (n *Node) ReloadEnvoyRLS() error {
	if n.rls == nil {
		return ErrNoEnvoyRLSConfig
	}
	if n.rls.xds != nil {
		// Nothing to read: the control plane sends every change.
		n.log.Info("envoy rls config comes from the control plane; nothing to reload", "source", n.rls.xds.Source())
		return nil
	}
	return n.reloadEnvoyRLS(reloadAsked)
}

// reloadEnvoyRLS is ReloadEnvoyRLS, for the reason why (reloadCause).
func (n *Node) reloadEnvoyRLS(why reloadCause) error {
	old := n.rls.rules.Current().Digest
	cfg, err := n.rls.rules.Reload()
	// Every attempt, as upstream counts every reload its watcher makes;
	// peerlimit_envoy_rls_config_reloads_total counts only the news.
	n.rls.metrics.ConfigLoaded(err)
	if err != nil {
		if !n.reloadFailed(sourceEnvoyRLS, why, err) {
			n.log.Debug("envoy rls config still unusable; the configuration in force is kept", "path", n.rls.rules.Path(), "err", err)
			return err
		}
		n.rls.reloads.WithLabelValues("error").Inc()
		n.log.Error("envoy rls config reload failed; the configuration in force is kept", "path", n.rls.rules.Path(), "err", err, "by", why.String())
		return err
	}
	if !n.reloadSucceeded(sourceEnvoyRLS, why, cfg.Digest != old, "path", cfg.Source, "digest", cfg.Digest) {
		return nil
	}
	n.rls.reloads.WithLabelValues("ok").Inc()
	n.refreshRLSHealth()
	n.configChanged()
	n.log.Info("envoy rls config reloaded", "path", cfg.Source, "domains", len(cfg.Domains()), "rules", len(cfg.Rules()), "digest", cfg.Digest,
		"by", why.String())
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
	c.rls.metrics.ConfigLoaded(err) // set by register, before the subscription runs
	return err
}

// EnvoyRLSConfig returns the Envoy rate limit service configuration in
// force, or nil without one.
func (n *Node) EnvoyRLSConfig() *envoyrls.RuleSet {
	if n.rls == nil {
		return nil
	}
	return n.rls.rules.Current()
}
