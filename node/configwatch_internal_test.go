package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
)

// Two reloads run at once, a watched one and a SIGHUP, and record their
// outcomes in the other order than they read the files: what /healthz
// and peerlimit_config_reload_failing say is what the later read found,
// either way. The hook holds one reload between its read and its record
// while the other runs whole, so the order is forced, not hoped for.
func TestReloadOutcomesRecordedInReadOrder(t *testing.T) {
	const (
		good  = "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: minute, requests_per_unit: 2}}]\n"
		fixed = "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: minute, requests_per_unit: 3}}]\n"
		bad   = "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"
	)
	for _, c := range []struct {
		name         string
		held         reloadCause // read first, recorded last
		first, later string      // what each read
		wantFailing  bool
	}{
		{"a watched reload of a broken file recorded after a SIGHUP read the fix", reloadWatched, bad, fixed, false},
		{"a SIGHUP of a good file recorded after the watcher read it broken", reloadAsked, good, bad, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rls.yaml")
			write := func(src string) { require.NoError(t, os.WriteFile(path, []byte(src), 0o600)) }
			write(good)
			n, _ := testNode(t, func(cfg *Config) { cfg.EnvoyRLSConfig, cfg.WatchConfig = path, false })
			read, release := make(chan struct{}), make(chan struct{})
			n.cfgFiles.testHookRecord = func(_ string, why reloadCause) {
				if why == c.held {
					close(read)
					<-release
				}
			}
			other := reloadWatched
			if c.held == reloadWatched {
				other = reloadAsked
			}
			write(c.first)
			done := make(chan struct{})
			go func() { defer close(done); _ = n.reloadEnvoyRLS(c.held) }()
			<-read // the held reload has read c.first, and records nothing yet
			write(c.later)
			_ = n.reloadEnvoyRLS(other)
			close(release)
			<-done

			failing := metrictest.Value(t, metrictest.Scrape("http://"+n.HTTPAddr()+"/metrics"), "peerlimit_config_reload_failing", "source", "envoy_rls")
			if c.wantFailing {
				assert.Contains(t, n.ConfigErrors()[sourceEnvoyRLS], `unknown unit "fortnight"`)
				assert.Equal(t, 1.0, failing)
			} else {
				assert.Empty(t, n.ConfigErrors())
				assert.Equal(t, 0.0, failing)
			}
		})
	}
}
