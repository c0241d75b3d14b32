package configs

import (
	"fmt"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/filewatch"
)

// startWatch starts the watcher of the configuration files, with
// Config.WatchConfig and files to watch.
func (s *Set) startWatch() error {
	targets := s.watchTargets()
	if !s.cfg.WatchConfig || len(targets) == 0 {
		return nil
	}
	w, err := filewatch.New(filewatch.DefaultConfig(), s.deps.Logger, targets...)
	if err != nil {
		return field.Wrap("WatchConfig", fmt.Errorf("%w (raise fs.inotify.max_user_instances or max_user_watches, or turn watching off)", err))
	}
	s.watch = w
	// The files were read by New, before the watch began: one reload
	// now catches a change made in between, which would otherwise wait
	// for the next.
	w.Trigger()
	paths := make([]string, len(targets))
	for i, t := range targets {
		paths[i] = t.Path
	}
	s.deps.Logger.Info("watching config files; a change reloads them", "paths", paths)
	return nil
}

// watchTargets are the files to watch and how: the policy file through
// its directory; EnvoyRLSConfig as a directory or a file, or through its
// root (EnvoyRLSWatchRoot).
func (s *Set) watchTargets() []filewatch.Target {
	var ts []filewatch.Target
	if s.policies != nil {
		ts = append(ts, filewatch.Target{Path: s.cfg.PoliciesFile, Mode: filewatch.File,
			OnChange: whileRunning(s.stop, s.reloadPolicies)})
	}
	if s.rls != nil && s.cfg.EnvoyRLSConfig != "" {
		t := filewatch.Target{Path: s.cfg.EnvoyRLSConfig, Mode: filewatch.Auto,
			OnChange: whileRunning(s.stop, s.reloadEnvoyRLS)}
		if root := s.cfg.EnvoyRLSWatchRoot; root != "" {
			t.Path, t.Mode = root, filewatch.Root
		}
		ts = append(ts, t)
	}
	return ts
}

// whileRunning is the watcher's callback of reload: it reloads until stop
// is closed (Set.Stop, which does not wait for the watcher to close).
func whileRunning(stop <-chan struct{}, reload func(reloadCause) error) func() {
	return func() {
		select {
		case <-stop:
		default:
			_ = reload(reloadWatched)
		}
	}
}
