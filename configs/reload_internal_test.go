package configs

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// orderedSource is a configuration file whose reloads
// TestReloadOutcomesRecordedInReadOrder races: three versions of it
// (good, fixed, bad), how to point a Set at it, reload it, and the
// series counting its failed reloads.
type orderedSource struct {
	src              string
	good, fixed, bad string
	errPart          string
	use              func(*Config, string)
	reload           func(*Set, reloadCause) error
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
		reload:  (*Set).reloadEnvoyRLS,
		errors:  "peerlimit_envoy_rls_config_reloads_total",
	},
	{
		src:     sourcePolicies,
		good:    "login: {limit: 5, window: 1m}\n",
		fixed:   "login: {limit: 6, window: 1m}\n",
		bad:     "login: {limit: 5, window: fortnight}\n",
		errPart: "window",
		use:     func(c *Config, path string) { c.PoliciesFile = path },
		reload:  (*Set).reloadPolicies,
		errors:  "peerlimit_policy_reloads_total",
	},
}

// Two reloads run at once, a watched one and a SIGHUP, and record their
// outcomes in the other order than they read the files: what Errors
// (/healthz) and peerlimit_config_reload_failing say is what the later
// read found, either way, and a failure overtaken by a later reload is
// neither logged nor counted. The hook holds one reload between its read
// and its record while the other runs whole, so the order is forced, not
// hoped for.
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
				cfg := DefaultConfig()
				o.use(&cfg, path)
				s, reg := newTestSet(t, cfg)
				read, release := make(chan struct{}), make(chan struct{})
				s.files.testHookRecord = func(_ string, why reloadCause) {
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
				go func() { defer close(done); _ = o.reload(s, c.held) }()
				<-read // the held reload has read c.first, and records nothing yet
				write(c.later)
				_ = o.reload(s, other)
				close(release)
				<-done

				failing := metrictest.Value(t, reg, "peerlimit_config_reload_failing", "source", o.src)
				assert.Equal(t, c.wantErrors, metrictest.Value(t, reg, o.errors, "result", "error"),
					"a failure overtaken by a later reload is neither logged nor counted as one")
				if c.wantFailing {
					assert.Contains(t, s.Errors()[o.src], o.errPart)
					assert.Equal(t, 1.0, failing)
				} else {
					assert.Empty(t, s.Errors())
					assert.Equal(t, 0.0, failing)
				}
			})
		}
	}
}

// newTestSet is a Set over cfg, not started: reloads are the test's.
func newTestSet(t *testing.T, cfg Config) (*Set, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := New(cfg, Deps{Self: "self", Check: func(limiter.Request) error { return nil }, Now: time.Now, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	return s, reg
}

// targetFunc is an xdsconfig.Target that answers as its function does.
type targetFunc func(xdsconfig.Update) error

func (f targetFunc) Apply(u xdsconfig.Update) error { return f(u) }

// Each configuration from the control plane counts as one load, as each
// update of upstream's xDS subscription does: put in force or resent
// alike, a success; refused, an error, which the subscriber still sees.
func TestEnvoyRLSXDSLoadsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := envoyrls.NewMetrics(reg, envoyrls.DefaultConfig())
	require.NoError(t, err)
	refused := errors.New("rls.yaml:2: bad")
	answers := []error{nil, nil, refused}
	target := (&envoyRLS{metrics: m}).countLoads(targetFunc(func(xdsconfig.Update) error {
		err := answers[0]
		answers = answers[1:]
		return err
	}))
	assert.NoError(t, target.Apply(xdsconfig.Update{Version: "1"}))
	assert.NoError(t, target.Apply(xdsconfig.Update{Version: "1"}))
	assert.ErrorIs(t, target.Apply(xdsconfig.Update{Version: "2"}), refused)
	assert.Equal(t, 2.0, metrictest.Value(t, reg, "ratelimit_service_config_load_success"))
	assert.Equal(t, 1.0, metrictest.Value(t, reg, "ratelimit_service_config_load_error"))
}
