package configs

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/internal/reloads"
)

// Configurations that reload. The policy file and the Envoy rules are
// read again whenever asked (ReloadPolicies, ReloadEnvoyRLS: SIGHUP) and,
// with Config.WatchConfig, when they change on disk (watch.go), as
// envoyproxy/ratelimit does. Both go through the same reload. A file
// that cannot be used keeps the configuration in force, and the Set says
// why in three places: its log, the gauge peerlimit_config_reload_failing,
// and Errors (GET /healthz), whose status the node leaves SERVING: it
// serves well from the configuration in force, and one bad ConfigMap must
// not take every node out of rotation at once.

// reloadCause says who started a reload, which decides what of its
// outcome is news.
type reloadCause int

const (
	// reloadAsked is ReloadPolicies or ReloadEnvoyRLS (SIGHUP): someone
	// asked, so every outcome is logged and counted, an unchanged
	// configuration included.
	reloadAsked reloadCause = iota
	// reloadWatched is the watcher: something changed in the watched
	// directory. A reload that finds the configuration in force unchanged
	// does nothing (logged at debug, not counted), and a failure with the
	// same error as the attempt before is logged at debug and not counted
	// again: an editor writing its swap file next to a broken file must
	// not flood the log.
	reloadWatched
)

func (c reloadCause) String() string {
	if c == reloadWatched {
		return "watch"
	}
	return "asked"
}

// ReloadPolicies reads Config.PoliciesFile again and puts it in force
// (cmd/node calls it on SIGHUP, through node.Node.Reload; with
// Config.WatchConfig a change of the file does too). On any error, such
// as a bad line or a missing file, the policies in force stay as they
// were; the error names the line, is logged, counted in
// peerlimit_policy_reloads_total{result="error"}, and shown by Errors
// (GET /healthz) and peerlimit_config_reload_failing until a reload
// succeeds.
//
// Limiter state is untouched: it is keyed by (key, window, algorithm),
// never by policy name. A policy whose limit changed applies the new limit
// at once to what its keys already counted; one whose window or algorithm
// changed starts its keys on a fresh state (the old one expires by
// itself), since that is another limit.
//
// Only this node reloads: the policy is resolved where a request arrives,
// so until every node has reloaded the same file, the same policy name may
// mean different numbers on different nodes.
func (s *Set) ReloadPolicies() error {
	if s.policies == nil {
		s.deps.Logger.Warn("policy reload asked, but the node was started without a policy file")
		return ErrNoPolicyFile
	}
	return s.reloadPolicies(reloadAsked)
}

// reloadPolicies is ReloadPolicies, for the reason why (reloadCause).
func (s *Set) reloadPolicies(why reloadCause) error {
	log := s.deps.Logger
	old := s.policies.Current().Digest
	set, err := s.policies.Reload()
	recorded := s.files.latest(sourcePolicies, why, s.policies.LastReload, err)
	if err != nil {
		if !s.files.failed(sourcePolicies, why, err, recorded) {
			log.Debug("policy file still unusable; the policies in force are kept", "file", s.policies.Path(), "err", err)
			return err
		}
		s.policyReloads.WithLabelValues("error").Inc()
		log.Error("policy reload failed; the policies in force are kept", "file", s.policies.Path(), "err", err, "by", why.String())
		return err
	}
	if !s.files.succeeded(sourcePolicies, why, set.Digest != old, recorded, "file", set.File, "digest", set.Digest) {
		return nil
	}
	s.policyReloads.WithLabelValues("ok").Inc()
	s.changed()
	log.Info("policies reloaded", "file", set.File, "policies", set.Len(), "digest", set.Digest, "by", why.String())
	return nil
}

// ReloadEnvoyRLS reads Config.EnvoyRLSConfig again and puts it in force
// (cmd/node calls it on SIGHUP, through node.Node.Reload; with
// Config.WatchConfig a change of the files does too). On any error, such
// as a bad line or a missing file, the configuration in force stays as it
// was; the error names the file and line, is logged, counted in
// peerlimit_envoy_rls_config_reloads_total{result="error"}, and shown by
// Errors (GET /healthz) and peerlimit_config_reload_failing until a
// reload succeeds. Rules from a control plane are not read: it sends
// every change.
//
// Limiter state is untouched: it is keyed by domain and descriptor, window
// and algorithm, never by rule. A rule whose requests_per_unit changed
// applies the new limit at once to what is already counted; one whose
// window or algorithm changed starts on a fresh state.
//
// Only this node reloads: until every node has reloaded the same files,
// the same descriptor may be limited differently depending on which node
// Envoy asks.
func (s *Set) ReloadEnvoyRLS() error {
	if s.rls == nil {
		return ErrNoEnvoyRLSConfig
	}
	if s.rls.xds != nil {
		// Nothing to read: the control plane sends every change.
		s.deps.Logger.Info("envoy rls config comes from the control plane; nothing to reload", "source", s.rls.xds.Source())
		return nil
	}
	return s.reloadEnvoyRLS(reloadAsked)
}

// reloadEnvoyRLS is ReloadEnvoyRLS, for the reason why (reloadCause).
func (s *Set) reloadEnvoyRLS(why reloadCause) error {
	log, rls := s.deps.Logger, s.rls
	old := rls.rules.Current().Digest
	cfg, err := rls.rules.Reload()
	// Every attempt, as upstream counts every reload its watcher makes;
	// peerlimit_envoy_rls_config_reloads_total counts only the news.
	rls.metrics.ConfigLoaded(err)
	last := func() reloads.Result {
		if rls.rules.Path() == "" {
			return reloads.Result{} // rules from a control plane are not numbered here
		}
		return rls.rules.LastReload()
	}
	recorded := s.files.latest(sourceEnvoyRLS, why, last, err)
	if err != nil {
		if !s.files.failed(sourceEnvoyRLS, why, err, recorded) {
			log.Debug("envoy rls config still unusable; the configuration in force is kept", "path", rls.rules.Path(), "err", err)
			return err
		}
		rls.reloads.WithLabelValues("error").Inc()
		log.Error("envoy rls config reload failed; the configuration in force is kept", "path", rls.rules.Path(), "err", err, "by", why.String())
		return err
	}
	if !s.files.succeeded(sourceEnvoyRLS, why, cfg.Digest != old, recorded, "path", cfg.Source, "digest", cfg.Digest) {
		return nil
	}
	rls.reloads.WithLabelValues("ok").Inc()
	s.UpdateHealth()
	s.changed()
	log.Info("envoy rls config reloaded", "path", cfg.Source, "domains", len(cfg.Domains()), "rules", len(cfg.Rules()), "digest", cfg.Digest,
		"by", why.String())
	return nil
}

// Reloads run concurrently (SIGHUP beside the watcher) and record their
// outcomes after the registry's lock is released, so they may record in
// another order than they read the files. What is recorded is therefore
// the registry's latest reload, numbered (outcomes.latest), and never one
// older than recorded already: a watched reload that read a file before
// it was fixed cannot report it broken after a SIGHUP that read the fix.

// latest returns the outcome to record for src after one of its reloads,
// started for why, which returned own (nil: success): its registry's
// latest (last, read now: another reload may have been recorded since
// this one read its file), numbered; own, unnumbered (Seq 0), for a
// source read otherwise.
func (o *outcomes) latest(src string, why reloadCause, last func() reloads.Result, own error) reloads.Result {
	if h := o.testHookRecord; h != nil {
		h(src, why)
	}
	if r := last(); r.Seq != 0 {
		return r
	}
	return reloads.Result{Err: own}
}

// outcomes is how the last reload of each configuration file went.
type outcomes struct {
	log *slog.Logger
	now func() time.Time
	// sources are those read from files: sourcePolicies with a policy
	// file, sourceEnvoyRLS with EnvoyRLSConfig (rules from a control
	// plane are not files).
	sources map[string]bool
	failing *prometheus.GaugeVec
	lastOK  *prometheus.GaugeVec

	mu   sync.Mutex
	errs map[string]error // by source: why its last reload failed; absent once one succeeded
	// seqs is, by source whose registry numbers its reloads, the number
	// of the reload errs describes (reloads.Result.Seq).
	seqs map[string]uint64
	// reported is, by source, the failure last logged as news, until a
	// reload succeeds: a watched reload failing alike is not news.
	reported map[string]string
	// testHookRecord, if not nil, is called as a reload's outcome is
	// about to be recorded, before its latest is read: for tests that
	// interleave reloads.
	testHookRecord func(src string, why reloadCause)
}

// failed records that a reload of src failed with err, latest being what
// to record (outcomes.latest), and reports whether that is news, to be
// logged as an error and counted (see reloadCause).
func (f *outcomes) failed(src string, why reloadCause, err error, latest reloads.Result) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(src, latest)
	if latest.Seq > 0 && (latest.Err == nil || latest.Err.Error() != err.Error()) {
		// A later reload read other files: its outcome is what is in
		// force and what it reports; this one read files since replaced.
		f.log.Debug("a reload's failure was overtaken by a later reload", "source", src, "err", err)
		return false
	}
	news := why == reloadAsked || f.reported[src] != err.Error()
	if news && f.errs[src] != nil {
		f.reported[src] = err.Error()
	}
	return news
}

// succeeded records that a reload of src read valid files, latest being
// what to record (outcomes.latest), and reports whether what it read is to
// be put in force, logged and counted: always when asked, only when
// changed when watched. attrs describe the configuration, for the log.
func (f *outcomes) succeeded(src string, why reloadCause, changed bool, latest reloads.Result, attrs ...any) bool {
	f.mu.Lock()
	wasFailing := f.errs[src] != nil
	f.record(src, latest)
	if f.sources[src] {
		// This reload found the files valid, whatever a later one found.
		f.lastOK.WithLabelValues(src).Set(float64(f.now().UnixMilli()) / 1e3)
	}
	f.mu.Unlock()
	if changed || why == reloadAsked {
		return true
	}
	attrs = append([]any{"source", src}, attrs...)
	if wasFailing {
		f.log.Info("config files usable again, and the same as the configuration in force", attrs...)
	} else {
		f.log.Debug("watched config files changed, the configuration did not", attrs...)
	}
	return false
}

// record puts r in errs and the failing gauge, unless it is older than
// what they hold. Requires f.mu held.
func (f *outcomes) record(src string, r reloads.Result) {
	if !f.sources[src] || (r.Seq > 0 && r.Seq <= f.seqs[src]) {
		return
	}
	if r.Seq > 0 {
		f.seqs[src] = r.Seq
	}
	if r.Err != nil {
		f.errs[src] = r.Err
		f.failing.WithLabelValues(src).Set(1)
		return
	}
	delete(f.errs, src)
	delete(f.reported, src)
	f.failing.WithLabelValues(src).Set(0)
}

// errors returns errs as text, by source.
func (f *outcomes) errors() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.errs))
	for src, err := range f.errs {
		out[src] = err.Error()
	}
	return out
}
