// Package configs holds the configurations a node serves from: its named
// policies (package policy) and the rules of Envoy's rate limit service
// (package envoyrls), read from files or received from an xDS control
// plane. It puts new versions in force (SIGHUP, a watched file, the
// control plane), keeps the one in force when a new one is unusable and
// says why (the log, the metrics, /healthz's config errors), advertises
// their digests to the cluster and counts the members that disagree, and
// keeps the rate limit service's health in step with its rules.
//
// Package node builds one Set, registers the Envoy service with it, and
// starts and stops it with the node.
package configs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/filewatch"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/policy"
)

// ErrNoPolicyFile is returned by ReloadPolicies on a Set without
// Config.PoliciesFile: there is nothing to reload.
var ErrNoPolicyFile = errors.New("no policy file configured")

// ErrNoEnvoyRLSConfig is returned by ReloadEnvoyRLS on a Set without Envoy
// rules (Config.EnvoyRLSConfig or Config.EnvoyRLSXDS): there is nothing
// to reload.
var ErrNoEnvoyRLSConfig = errors.New("no envoy rate limit service configuration")

// Set is the configurations a node serves from, and what reloads them.
//
// Its methods are safe for concurrent use. Reloads may run at once (a
// SIGHUP beside the watcher, the control plane): each source's registry
// serialises its own, and what they record is the latest read (see
// reload.go). The configurations in force are read without a lock. New
// loads; Start starts the watcher, the control plane's subscription and
// the advertising of digests, once; Stop stops them, Shutdown stops them
// and waits for them until its context ends; both may be called more
// than once.
type Set struct {
	cfg  Config
	deps Deps
	// policies is nil without Config.PoliciesFile.
	policies *policy.Registry
	// rls is nil without Envoy rules (EnvoyRLSConfig or EnvoyRLSXDS).
	rls *envoyRLS
	// policyReloads counts ReloadPolicies by result: ok, error (the
	// policies in force were kept).
	policyReloads *prometheus.CounterVec
	// files is how the configuration files' last reloads went.
	files outcomes
	// changes is what is noted each time a configuration is put in force
	// (advertise.go).
	changes changes
	// joined is the cluster the digests are advertised to, once the node
	// has joined it.
	joined atomic.Pointer[Cluster]

	watch    *filewatch.Watcher // nil unless watching; set by Start
	stop     chan struct{}      // closed by Stop
	stopOnce sync.Once
	wg       sync.WaitGroup // the advertiser and the subscription
	// stopped is closed once everything Stop stops has ended, the
	// watcher's reload under way included.
	stopped chan struct{}
}

// Deps are what a Set needs of the node that serves its configurations.
type Deps struct {
	// Self is the node's member id: the disagreement counts the others.
	Self string
	// Check validates each limit of the policies and the Envoy rules
	// against the store's caps (limiter.Store.Validate), so that a limit
	// no request could use is refused when it is read rather than on
	// every request. Required.
	Check func(limiter.Request) error
	// Now is the node's clock: when a configuration was put in force.
	// Required.
	Now func() time.Time
	// Logger receives what reloads do. Required.
	Logger *slog.Logger
	// Registerer takes the Set's metrics. Required.
	Registerer prometheus.Registerer
	// Health receives the Envoy rate limit service's gRPC health whenever
	// its rules change, while Serving reports true (the node serves, and
	// has not begun to shut down). Defaults: nowhere, and always serving.
	Health  Health
	Serving func() bool
}

// Health is where the Envoy rate limit service's health goes: the gRPC
// health server (*health.Server).
type Health interface {
	SetServingStatus(service string, status healthpb.HealthCheckResponse_ServingStatus)
}

// Cluster is the membership the digests are advertised to
// (*cluster.Cluster).
type Cluster interface {
	// Members are the live members, each with the digests it advertises.
	Members() []cluster.Member
	// SetConfigDigests advertises this node's digests.
	SetConfigDigests(digests map[string]string) error
}

type noHealth struct{}

func (noHealth) SetServingStatus(string, healthpb.HealthCheckResponse_ServingStatus) {}

// New loads the configurations of cfg, each checked against deps.Check,
// and registers the Set's metrics. An invalid file is an error naming its
// line. Nothing runs until Start.
func New(cfg Config, deps Deps) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Check == nil || deps.Now == nil || deps.Logger == nil || deps.Registerer == nil {
		return nil, errors.New("configs: Check, Now, Logger and Registerer are required")
	}
	if deps.Health == nil {
		deps.Health = noHealth{}
	}
	if deps.Serving == nil {
		deps.Serving = func() bool { return true }
	}
	s := &Set{cfg: cfg, deps: deps, changes: changes{kick: make(chan struct{}, 1)}, stop: make(chan struct{}), stopped: make(chan struct{})}
	var err error
	if cfg.PoliciesFile != "" {
		if s.policies, err = policy.Load(cfg.PoliciesFile, deps.Check); err != nil {
			return nil, err
		}
	}
	if s.rls, err = loadEnvoyRLS(cfg, deps.Check, deps.Logger); err != nil {
		return nil, err
	}
	if err := s.registerMetrics(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if err := s.subscribe(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start starts what keeps the configurations current: the watcher of the
// files (Config.WatchConfig), the subscription to the control plane
// (Config.EnvoyRLSXDS), and the advertising of digests once the node has
// Joined. Call it once the node can take a reload's consequences (the
// last of its start's steps); Shutdown stops them.
func (s *Set) Start() error {
	if err := s.startWatch(); err != nil {
		return err
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.advertise() }()
	s.startXDS()
	return nil
}

// Stop stops the watcher, the subscription and the advertising without
// waiting for them: no reload of the watcher's starts after it, and what
// is in force stays. Reloads called directly (ReloadPolicies, on SIGHUP)
// are the caller's. Safe to call more than once, and with Shutdown.
func (s *Set) Stop() {
	s.stopOnce.Do(func() {
		close(s.stop)
		go func() {
			if s.watch != nil {
				_ = s.watch.Close() // waits for the reload under way
			}
			s.wg.Wait()
			close(s.stopped)
		}()
	})
}

// Shutdown is Stop, then waits for what it stopped to end, a reload of
// the watcher's under way included, until ctx ends. A reload blocked on a
// file system that hangs must not hold up the node's shutdown: it is left
// to end on its own (what it reads then goes in force, or not, in a node
// that no longer serves), and the error says one was left. Safe to call
// more than once.
func (s *Set) Shutdown(ctx context.Context) error {
	s.Stop()
	select {
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("configs: a reload under way was left behind: %w", context.Cause(ctx))
	}
}

// Policies returns the policies in force, or nil without a policy file.
func (s *Set) Policies() *policy.Set {
	if s.policies == nil {
		return nil
	}
	return s.policies.Current()
}

// PolicyRegistry is what resolves policy names on the request path, or
// nil without a policy file.
func (s *Set) PolicyRegistry() *policy.Registry { return s.policies }

// EnvoyRLSConfig returns the Envoy rate limit service configuration in
// force, or nil without one.
func (s *Set) EnvoyRLSConfig() *envoyrls.RuleSet {
	if s.rls == nil {
		return nil
	}
	return s.rls.rules.Current()
}

// Errors returns why the last reload of each configuration source read
// from files failed (policies, envoy_rls), by source; empty when none is
// failing. The configuration in force is the one before.
func (s *Set) Errors() map[string]string { return s.files.errors() }
