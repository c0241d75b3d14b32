package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
)

// orderedSource is a configuration file whose reloads
// TestReloadOutcomesRecordedInReadOrder races: three versions of it
// (good, fixed, bad), how to point a node at it, reload it, and the
// series counting its failed reloads.
type orderedSource struct {
	src              string
	good, fixed, bad string
	errPart          string
	use              func(*Config, string)
	reload           func(*Node, reloadCause) error
	errors           string // the reloads counter, result="error"
}

var orderedSources = []orderedSource{
	{
		src:     sourceEnvoyRLS,
		good:    "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: minute, requests_per_unit: 2}}]\n",
		fixed:   "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: minute, requests_per_unit: 3}}]\n",
		bad:     "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n",
		errPart: `unknown unit "fortnight"`,
		use:     func(c *Config, path string) { c.EnvoyRLSConfig = path },
		reload:  (*Node).reloadEnvoyRLS,
		errors:  "peerlimit_envoy_rls_config_reloads_total",
	},
	{
		src:     sourcePolicies,
		good:    "login: {limit: 5, window: 1m}\n",
		fixed:   "login: {limit: 6, window: 1m}\n",
		bad:     "login: {limit: 5, window: fortnight}\n",
		errPart: "window",
		use:     func(c *Config, path string) { c.PoliciesFile = path },
		reload:  (*Node).reloadPolicies,
		errors:  "peerlimit_policy_reloads_total",
	},
}

// Two reloads run at once, a watched one and a SIGHUP, and record their
// outcomes in the other order than they read the files: what /healthz
// and peerlimit_config_reload_failing say is what the later read found,
// either way, and a failure overtaken by a later reload is neither logged
// nor counted. The hook holds one reload between its read and its record
// while the other runs whole, so the order is forced, not hoped for.
func TestReloadOutcomesRecordedInReadOrder(t *testing.T) {
	for _, o := range orderedSources {
		for _, c := range []struct {
			name        string
			held        reloadCause // read first, recorded last
			first       string      // what each read
			later       string
			wantFailing bool
			wantErrors  float64 // failures logged and counted
		}{
			{"a watched reload of a broken file recorded after a SIGHUP read the fix", reloadWatched, o.bad, o.fixed, false, 0},
			{"a SIGHUP of a good file recorded after the watcher read it broken", reloadAsked, o.good, o.bad, true, 1},
		} {
			t.Run(o.src+"/"+c.name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "config.yaml")
				write := func(src string) { require.NoError(t, os.WriteFile(path, []byte(src), 0o600)) }
				write(o.good)
				n, _ := testNode(t, func(cfg *Config) { o.use(cfg, path); cfg.WatchConfig = false })
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
				go func() { defer close(done); _ = o.reload(n, c.held) }()
				<-read // the held reload has read c.first, and records nothing yet
				write(c.later)
				_ = o.reload(n, other)
				close(release)
				<-done

				scrape := metrictest.Scrape("http://" + n.HTTPAddr() + "/metrics")
				failing := metrictest.Value(t, scrape, "peerlimit_config_reload_failing", "source", o.src)
				assert.Equal(t, c.wantErrors, metrictest.Value(t, scrape, o.errors, "result", "error"),
					"a failure overtaken by a later reload is neither logged nor counted as one")
				if c.wantFailing {
					assert.Contains(t, n.ConfigErrors()[o.src], o.errPart)
					assert.Equal(t, 1.0, failing)
				} else {
					assert.Empty(t, n.ConfigErrors())
					assert.Equal(t, 0.0, failing)
				}
			})
		}
	}
}
