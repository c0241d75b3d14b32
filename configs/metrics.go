package configs

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/envoyrls"
)

// registerMetrics registers the Set's metrics: the reloads of each
// source, how the files' last reloads went, the policies in force, and
// the digests and disagreement (configCollector); and, with Envoy rules,
// upstream's statistics of the service.
func (s *Set) registerMetrics() error {
	reg := s.deps.Registerer
	s.policyReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "policy_reloads_total",
		Help: "Reloads of the policy file (SIGHUP), by result: ok, or error (the policies in force were kept)."}, []string{"result"})
	s.policyReloads.WithLabelValues("ok")
	s.policyReloads.WithLabelValues("error")
	policies := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "policies",
		Help: "Named policies in force (0 without a policy file)."}, func() float64 {
		if set := s.Policies(); set != nil {
			return float64(set.Len())
		}
		return 0
	})
	cs := []prometheus.Collector{s.policyReloads, policies, newConfigCollector(s)}
	cs = append(cs, s.files.init(s)...)
	if s.rls != nil {
		rc, err := s.rls.initMetrics(reg)
		if err != nil {
			return err
		}
		cs = append(cs, rc...)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// init sets f up for s's sources and returns its gauges, each with a
// series for every source: a failing gauge at 0, and the files' read at
// start as their last success.
func (f *outcomes) init(s *Set) []prometheus.Collector {
	f.log, f.now = s.deps.Logger, s.deps.Now
	f.sources = map[string]bool{sourcePolicies: s.policies != nil, sourceEnvoyRLS: s.cfg.EnvoyRLSConfig != ""}
	f.errs, f.seqs, f.reported = map[string]error{}, map[string]uint64{}, map[string]string{}
	f.failing = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "config_reload_failing",
		Help: "1 while the last reload of the source's files (policies, envoy_rls) failed: the configuration in force is older than " +
			"the files, and GET /healthz says why; 0 once one succeeds, and for a source not read from files."}, []string{"source"})
	f.lastOK = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "config_last_reload_success_timestamp_seconds",
		Help: "When the source's files (policies, envoy_rls) were last read and found valid: at start, on SIGHUP, or when watched " +
			"files changed (even if the configuration did not)."}, []string{"source"})
	start := float64(f.now().UnixMilli()) / 1e3
	for src, ok := range f.sources {
		// A series for every source, so that one alert on > 0 covers
		// every node whatever it reads.
		f.failing.WithLabelValues(src).Set(0)
		if ok {
			f.lastOK.WithLabelValues(src).Set(start)
		}
	}
	return []prometheus.Collector{f.failing, f.lastOK}
}

// initMetrics creates the service's metrics, which count every load of
// its configuration as upstream's config_load_success and _error (the
// files', read by loadEnvoyRLS, already: a failure there stops the
// start), and the count of its reloads; it returns the latter, to be
// registered. envoyrls.NewMetrics registers its own.
func (e *envoyRLS) initMetrics(reg prometheus.Registerer) ([]prometheus.Collector, error) {
	m, err := envoyrls.NewMetrics(reg, e.settings)
	if err != nil {
		return nil, err
	}
	e.metrics = m
	if e.rules.Path() != "" { // from files, not a control plane
		m.ConfigLoaded(nil)
	}
	e.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_config_reloads_total",
		Help: "Reloads of the Envoy rate limit service configuration (SIGHUP), by result: ok, or error (the configuration in force was kept)."},
		[]string{"result"})
	e.reloads.WithLabelValues("ok")
	e.reloads.WithLabelValues("error")
	return []prometheus.Collector{e.reloads}, nil
}
