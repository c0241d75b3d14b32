package node

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/filewatch"
	"github.com/peerlimit/peerlimit/internal/reloads"
)

// Configuration files that reload themselves. The node reads its policy
// file and its Envoy rules again when they change on disk (Config.
// WatchConfig), as envoyproxy/ratelimit does, and whenever asked
// (ReloadPolicies, ReloadEnvoyRLS: SIGHUP). Both go through the same
// reload. A file that cannot be used keeps the configuration in force,
// and the node says why in three places: its log, the gauge
// peerlimit_config_reload_failing, and GET /healthz, whose status it
// leaves SERVING: the node serves well from the configuration in force,
// and one bad ConfigMap must not take every node out of rotation at once.

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

// configFiles is the node's account of its configuration files: how the
// last reload of each went, and the watcher that reloads them.
type configFiles struct {
	// sources are those read from files: sourcePolicies with a policy
	// file, sourceEnvoyRLS with EnvoyRLSConfig (rules from a control
	// plane are not files).
	sources map[string]bool
	failing *prometheus.GaugeVec
	lastOK  *prometheus.GaugeVec
	watch   *filewatch.Watcher // nil unless watching

	mu   sync.Mutex
	errs map[string]error // by source: why its last reload failed; absent once one succeeded
	// seqs is, by source whose registry numbers its reloads, the number
	// of the reload errs describes (reloads.Result.Seq).
	seqs map[string]uint64
	// reported is, by source, the failure last logged as news, until a
	// reload succeeds: a watched reload failing alike is not news.
	reported map[string]string
	// testHookRecord, if not nil, is called as a reload's outcome is
	// about to be recorded, before f.mu: for tests that interleave
	// reloads.
	testHookRecord func(src string, why reloadCause)
}

// initConfigFiles registers the reload gauges and, with WatchConfig,
// starts watching the files: the last of Start's steps, so that a
// reload's configChanged finds the node complete.
func (n *Node) initConfigFiles() error {
	f := &n.cfgFiles
	sources := map[string]bool{sourcePolicies: n.policies != nil, sourceEnvoyRLS: n.cfg.EnvoyRLSConfig != ""}
	f.failing = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "config_reload_failing",
		Help: "1 while the last reload of the source's files (policies, envoy_rls) failed: the configuration in force is older than " +
			"the files, and GET /healthz says why; 0 once one succeeds, and for a source not read from files."}, []string{"source"})
	f.lastOK = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "config_last_reload_success_timestamp_seconds",
		Help: "When the source's files (policies, envoy_rls) were last read and found valid: at start, on SIGHUP, or when watched " +
			"files changed (even if the configuration did not)."}, []string{"source"})
	start := float64(n.cfg.Now().UnixMilli()) / 1e3
	for src, ok := range sources {
		// A series for every source, so that one alert on > 0 covers
		// every node whatever it reads.
		f.failing.WithLabelValues(src).Set(0)
		if ok {
			f.lastOK.WithLabelValues(src).Set(start)
		}
	}
	for _, c := range []prometheus.Collector{f.failing, f.lastOK} {
		if err := n.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	// Published under the lock, gauges first: the HTTP API serves
	// already (/healthz reads errs), and a SIGHUP may reload meanwhile.
	f.mu.Lock()
	f.errs, f.seqs, f.reported, f.sources = map[string]error{}, map[string]uint64{}, map[string]string{}, sources
	f.mu.Unlock()
	return n.watchConfigFiles()
}

// watchConfigFiles starts the watcher of the configuration files, if
// WatchConfig and there are any.
func (n *Node) watchConfigFiles() error {
	targets := n.watchTargets()
	if !n.cfg.WatchConfig || len(targets) == 0 {
		return nil
	}
	w, err := filewatch.New(filewatch.DefaultConfig(), n.log, targets...)
	if err != nil {
		return field.Wrap("WatchConfig", fmt.Errorf("%w (raise fs.inotify.max_user_instances or max_user_watches, or turn watching off)", err))
	}
	n.cfgFiles.watch = w
	n.onUndo(n.cfgFiles.stopWatch)
	// The files were read by Start's first step, before the watch began:
	// one reload now catches a change made in between, which would
	// otherwise wait for the next.
	w.Trigger()
	paths := make([]string, len(targets))
	for i, t := range targets {
		paths[i] = t.Path
	}
	n.log.Info("watching config files; a change reloads them", "paths", paths)
	return nil
}

// watchTargets are the files to watch and how: the policy file through
// its directory; EnvoyRLSConfig as a directory or a file, or through its
// root (EnvoyRLSWatchRoot).
func (n *Node) watchTargets() []filewatch.Target {
	var ts []filewatch.Target
	if n.policies != nil {
		ts = append(ts, filewatch.Target{Path: n.cfg.PoliciesFile, Mode: filewatch.File,
			OnChange: func() { _ = n.reloadPolicies(reloadWatched) }})
	}
	if n.rls != nil && n.cfg.EnvoyRLSConfig != "" {
		t := filewatch.Target{Path: n.cfg.EnvoyRLSConfig, Mode: filewatch.Auto,
			OnChange: func() { _ = n.reloadEnvoyRLS(reloadWatched) }}
		if root := n.cfg.EnvoyRLSWatchRoot; root != "" {
			t.Path, t.Mode = root, filewatch.Root
		}
		ts = append(ts, t)
	}
	return ts
}

// stopWatch stops the watcher and waits for a reload under way. Safe to
// call more than once.
func (f *configFiles) stopWatch() {
	if f.watch != nil {
		_ = f.watch.Close()
	}
}

// Reloads run concurrently (SIGHUP beside the watcher) and record their
// outcomes after the registry's lock is released, so they may record in
// another order than they read the files. What is recorded is therefore
// the registry's latest reload, numbered (latestReload), and never one
// older than recorded already: a watched reload that read a file before
// it was fixed cannot report it broken after a SIGHUP that read the fix.

// reloadFailed records that a reload of src failed with err, and reports
// whether that is news, to be logged as an error and counted (see
// reloadCause).
func (n *Node) reloadFailed(src string, why reloadCause, err error) bool {
	f := &n.cfgFiles
	if f.testHookRecord != nil {
		f.testHookRecord(src, why)
	}
	latest := n.latestReload(src, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(src, latest)
	if latest.Seq > 0 && (latest.Err == nil || latest.Err.Error() != err.Error()) {
		// A later reload read other files: its outcome is what is in
		// force and what it reports; this one read files since replaced.
		n.log.Debug("a reload's failure was overtaken by a later reload", "source", src, "err", err)
		return false
	}
	news := why == reloadAsked || f.reported[src] != err.Error()
	if news && f.errs[src] != nil {
		f.reported[src] = err.Error()
	}
	return news
}

// reloadSucceeded records that a reload of src read valid files, and
// reports whether what it read is to be put in force, logged and counted:
// always when asked, only when changed when watched. attrs describe the
// configuration, for the log.
func (n *Node) reloadSucceeded(src string, why reloadCause, changed bool, attrs ...any) bool {
	f := &n.cfgFiles
	if f.testHookRecord != nil {
		f.testHookRecord(src, why)
	}
	latest := n.latestReload(src, nil)
	f.mu.Lock()
	wasFailing := f.errs[src] != nil
	f.record(src, latest)
	if f.sources[src] {
		// This reload found the files valid, whatever a later one found.
		f.lastOK.WithLabelValues(src).Set(float64(n.cfg.Now().UnixMilli()) / 1e3)
	}
	f.mu.Unlock()
	if changed || why == reloadAsked {
		return true
	}
	attrs = append([]any{"source", src}, attrs...)
	if wasFailing {
		n.log.Info("config files usable again, and the same as the configuration in force", attrs...)
	} else {
		n.log.Debug("watched config files changed, the configuration did not", attrs...)
	}
	return false
}

// latestReload returns the outcome to record for src after one of its
// reloads returned own (nil: success): its registry's latest, numbered;
// own, unnumbered (Seq 0), for a source read otherwise.
func (n *Node) latestReload(src string, own error) reloads.Result {
	var r reloads.Result
	switch {
	case src == sourceEnvoyRLS && n.rls != nil && n.rls.rules.Path() != "":
		r = n.rls.rules.LastReload()
	case src == sourcePolicies && n.policies != nil:
		r = n.policies.LastReload()
	}
	if r.Seq == 0 {
		return reloads.Result{Err: own}
	}
	return r
}

// record puts r in errs and the failing gauge, unless it is older than
// what they hold. Requires f.mu held.
func (f *configFiles) record(src string, r reloads.Result) {
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

// ConfigErrors returns why the last reload of each configuration source
// read from files failed (policies, envoy_rls), by source; empty when
// none is failing. The configuration in force is the one before.
func (n *Node) ConfigErrors() map[string]string {
	f := &n.cfgFiles
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.errs))
	for src, err := range f.errs {
		out[src] = err.Error()
	}
	return out
}
