package configs_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/internal/testkit/configmap"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/limiter"
)

// set is a started Set and what it reports to.
type set struct {
	*configs.Set
	t   *testing.T
	reg *prometheus.Registry
}

// startSet starts a Set over cfg, logging to the test at WARN and above
// unless edit says otherwise, and shuts it down at the test's end.
func startSet(t *testing.T, cfg configs.Config, edit func(*configs.Deps)) set {
	t.Helper()
	reg := prometheus.NewRegistry()
	deps := configs.Deps{Self: "self", Check: func(limiter.Request) error { return nil }, Now: time.Now, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if edit != nil {
		edit(&deps)
	}
	s, err := configs.New(cfg, deps)
	require.NoError(t, err)
	require.NoError(t, s.Start())
	t.Cleanup(func() { assert.NoError(t, s.Shutdown(context.Background())) })
	return set{Set: s, t: t, reg: reg}
}

// metric is s's series name{labels}.
func (s set) metric(name string, labels ...string) float64 {
	s.t.Helper()
	return metrictest.Value(s.t, s.reg, name, labels...)
}

// edgeLimit is the requests_per_unit of the rule for clients of edge in
// force, 0 without one.
func (s set) edgeLimit() uint32 {
	for _, r := range s.EnvoyRLSConfig().Rules() {
		if r.Domain == "edge" && r.Path == "client" {
			return r.RequestsPerUnit
		}
	}
	return 0
}

func (s set) awaitEdgeLimit(want uint32) {
	s.t.Helper()
	wait.For(s.t, 10*time.Second, func() (bool, string) {
		got := s.edgeLimit()
		return got == want, fmt.Sprintf("the limit is %d, want %d", got, want)
	})
}

// edgeRules limits every client of domain edge to limit a minute.
func edgeRules(limit int) string {
	return fmt.Sprintf("domain: edge\ndescriptors: [{key: client, rate_limit: {unit: minute, requests_per_unit: %d}}]\n", limit)
}

func write(t *testing.T, path, src string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
}

// within fails the test if f has not returned within a generous bound:
// what it guards against is blocking for ever.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // a deadline for the failure, not a wait for success
		t.Fatalf("%s blocked", what)
	}
}

func fileConfig(edit func(*configs.Config)) configs.Config {
	c := configs.DefaultConfig()
	edit(&c)
	return c
}

// The policy file, edited in place and replaced by rename, reloads by
// itself; a bad version keeps the policies in force and is reported.
func TestPolicyFileReloadsWhenWatched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	write(t, path, "login: {limit: 3, window: 1h}\n")
	s := startSet(t, fileConfig(func(c *configs.Config) { c.PoliciesFile = path }), nil)
	awaitLimit := func(want int64) {
		t.Helper()
		wait.For(t, 10*time.Second, func() (bool, string) {
			p, ok := s.Policies().Lookup("login")
			return ok && p.Limit == want, fmt.Sprintf("login is %+v (found: %v), want the limit %d", p, ok, want)
		})
	}

	write(t, path, "login: {limit: 4, window: 1h}\n")
	awaitLimit(4)
	tmp := filepath.Join(dir, ".policies.yaml.swp")
	write(t, tmp, "login: {limit: 5, window: 1h}\n")
	require.NoError(t, os.Rename(tmp, path))
	awaitLimit(5)

	write(t, path, "login: {limit: -1, window: 1h}\n")
	wait.For(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(s.Errors()["policies"], path+`:1: policy "login": limit must be positive, got -1`),
			fmt.Sprintf("config errors %q", s.Errors())
	})
	p, _ := s.Policies().Lookup("login")
	assert.EqualValues(t, 5, p.Limit, "the policies in force are kept")
	assert.Equal(t, 1.0, s.metric("peerlimit_config_reload_failing", "source", "policies"))

	write(t, path, "login: {limit: 6, window: 1h}\n")
	awaitLimit(6)
	assert.Empty(t, s.Errors())
	assert.Equal(t, 0.0, s.metric("peerlimit_config_reload_failing", "source", "policies"))
	assert.Equal(t, 3.0, s.metric("peerlimit_policy_reloads_total", "result", "ok"))
	assert.Equal(t, 1.0, s.metric("peerlimit_policies"))
}

// EnvoyRLSWatchRoot (upstream's RUNTIME_WATCH_ROOT=true): a new version
// is published by swapping the root symlink, and only that reloads.
func TestEnvoyRLSWatchRootSwap(t *testing.T) {
	parent := t.TempDir()
	for i, v := range []string{"v1", "v2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(parent, v, "ratelimit", "config"), 0o755))
		write(t, filepath.Join(parent, v, "ratelimit", "config", "rls.yaml"), edgeRules(10*(i+1)))
	}
	root := filepath.Join(parent, "current")
	require.NoError(t, os.Symlink("v1", root))
	s := startSet(t, fileConfig(func(c *configs.Config) {
		c.EnvoyRLSConfig, c.EnvoyRLSWatchRoot = filepath.Join(root, "ratelimit", "config"), root
	}), nil)
	require.EqualValues(t, 10, s.edgeLimit())

	tmp := filepath.Join(parent, "current_tmp")
	require.NoError(t, os.Symlink("v2", tmp))
	require.NoError(t, os.Rename(tmp, root))
	s.awaitEdgeLimit(20)

	cfg := configs.DefaultConfig()
	cfg.EnvoyRLSConfig, cfg.EnvoyRLSWatchRoot = filepath.Join(root, "ratelimit", "config"), filepath.Join(parent, "elsewhere")
	assert.ErrorContains(t, cfg.Validate(), "EnvoyRLSWatchRoot must be EnvoyRLSConfig or one of its ancestors")
}

// A ConfigMap with no keys, at start or after an update that removed
// every one, is a configuration with no domains, as upstream loads it:
// it loads, and the update is put in force, with a warning each time
// that every call is now answered OK; a key without an extension counts
// like any other, as upstream reads every file.
func TestEmptyConfigMapIsNoLimits(t *testing.T) {
	const warning = "envoy rls config has no domains: every call is answered OK with no limits"
	cm := configmap.New(t, t.TempDir())
	cm.Update(map[string]string{})
	logs := testlog.NewCapture()
	s := startSet(t, fileConfig(func(c *configs.Config) { c.EnvoyRLSConfig = cm.Dir() }),
		func(d *configs.Deps) { d.Logger = slog.New(logs) })
	// The node notes the rules put in force once it has joined.
	s.Joined(&fakeCluster{})
	assert.Empty(t, s.EnvoyRLSConfig().Domains())
	require.Len(t, logs.Find(warning), 1)
	assert.Equal(t, slog.LevelWarn, logs.Find(warning)[0].Level)

	cm.Update(map[string]string{"edge": edgeRules(3)})
	s.awaitEdgeLimit(3)

	cm.Update(map[string]string{})
	wait.For(t, 10*time.Second, func() (bool, string) {
		got := len(s.EnvoyRLSConfig().Domains())
		return got == 0, fmt.Sprintf("%d domains, want none", got)
	})
	assert.Empty(t, s.Errors())
	// The warning follows the rules being put in force.
	wait.For(t, 10*time.Second, func() (bool, string) {
		got := len(logs.Find(warning))
		return got >= 2, fmt.Sprintf("%d warnings", got)
	})
	assert.Len(t, logs.Find(warning), 2, "warned again, once")
}

// The Envoy rules' load time is when they were put in force: a reload
// that finds the same files (the watcher's at start, a SIGHUP, a touch)
// keeps the configuration in force, itself, and its load time; one that
// changes it moves the time.
func TestReloadThatChangesNothingKeepsItsLoadTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, edgeRules(2))
	clk := fakeclock.AtMilli(1_700_000_000_000)
	s := startSet(t, fileConfig(func(c *configs.Config) { c.EnvoyRLSConfig = path }), func(d *configs.Deps) { d.Now = clk.Now })
	loadedAt := func() time.Time { _, at := s.EnvoyRLSInForce(); return at }
	start := clk.Now()
	inForce := s.EnvoyRLSConfig()
	require.Equal(t, start, loadedAt())

	clk.Advance(time.Minute)
	require.NoError(t, s.ReloadEnvoyRLS())
	assert.Same(t, inForce, s.EnvoyRLSConfig())
	assert.Equal(t, start, loadedAt())

	clk.Advance(time.Minute)
	write(t, path, edgeRules(3))
	require.NoError(t, s.ReloadEnvoyRLS())
	assert.Equal(t, clk.Now(), loadedAt())
}

// A reload asked for puts the new rules in force and counts it; a bad
// file is refused naming its line, counted, reported by Errors and the
// failing gauge, and the rules in force are kept, until a good one.
func TestEnvoyRLSReloadAskedIsCountedAndReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, edgeRules(2))
	s := startSet(t, fileConfig(func(c *configs.Config) { c.EnvoyRLSConfig, c.WatchConfig = path, false }), nil)
	first := s.EnvoyRLSConfig()

	write(t, path, "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n")
	assert.ErrorContains(t, s.ReloadEnvoyRLS(), path+`:2: domain "edge", descriptor client: unknown unit "fortnight"`)
	assert.Same(t, first, s.EnvoyRLSConfig())
	assert.Contains(t, s.Errors()["envoy_rls"], `unknown unit "fortnight"`)
	assert.Equal(t, 1.0, s.metric("peerlimit_config_reload_failing", "source", "envoy_rls"))

	write(t, path, edgeRules(3))
	require.NoError(t, s.ReloadEnvoyRLS())
	assert.EqualValues(t, 3, s.edgeLimit())
	assert.Empty(t, s.Errors())
	for _, c := range []struct {
		want   float64
		series []string
	}{
		{1, []string{"peerlimit_envoy_rls_config_reloads_total", "result", "ok"}},
		{1, []string{"peerlimit_envoy_rls_config_reloads_total", "result", "error"}},
		{2, []string{"ratelimit_service_config_load_success"}}, // the start's and the good reload
		{1, []string{"ratelimit_service_config_load_error"}},
		{0, []string{"peerlimit_config_reload_failing", "source", "envoy_rls"}},
		{0, []string{"peerlimit_config_reload_failing", "source", "policies"}},
	} {
		assert.Equal(t, c.want, s.metric(c.series[0], c.series[1:]...), "%v", c.series)
	}
}

// A source the Set was started without has nothing to reload, and says so.
func TestReloadWithoutASource(t *testing.T) {
	s := startSet(t, configs.DefaultConfig(), nil)
	assert.ErrorIs(t, s.ReloadPolicies(), configs.ErrNoPolicyFile)
	assert.ErrorIs(t, s.ReloadEnvoyRLS(), configs.ErrNoEnvoyRLSConfig)
	assert.Nil(t, s.Policies())
	assert.Nil(t, s.PolicyRegistry())
	assert.Nil(t, s.EnvoyRLSConfig())
	assert.True(t, s.Ready())
	assert.Empty(t, s.Digests())
}

// fakeCluster is a membership that records what is advertised to it.
type fakeCluster struct {
	mu         sync.Mutex
	members    []cluster.Member
	advertised []map[string]string
}

func (c *fakeCluster) Members() []cluster.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members
}

func (c *fakeCluster) SetConfigDigests(d map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advertised = append(c.advertised, d)
	return nil
}

func (c *fakeCluster) last() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.advertised) == 0 {
		return nil
	}
	return c.advertised[len(c.advertised)-1]
}

// The digests in force are advertised once the node has joined, and
// again after each reload that changes them; the members whose digests
// differ are counted by source, this node and members advertising none
// left out, and each digest in force has its info series.
func TestDigestsAreAdvertisedAndDisagreementCounted(t *testing.T) {
	dir := t.TempDir()
	policies, rules := filepath.Join(dir, "policies.yaml"), filepath.Join(dir, "rls.yaml")
	write(t, policies, "login: {limit: 5, window: 1m}\n")
	write(t, rules, edgeRules(5))
	s := startSet(t, fileConfig(func(c *configs.Config) { c.PoliciesFile, c.EnvoyRLSConfig, c.WatchConfig = policies, rules, false }), nil)
	own := s.Digests()
	short := func(full string) string { return strings.TrimPrefix(full, "sha256:")[:12] }
	require.Equal(t, map[string]string{"policies": short(s.Policies().Digest), "envoy_rls": short(s.EnvoyRLSConfig().Digest)}, own)

	c := &fakeCluster{members: []cluster.Member{
		{ID: "self", Config: map[string]string{}}, // itself: never counted
		{ID: "same", Config: own},                 // agrees
		{ID: "old-policies", Config: map[string]string{"policies": "000000000000", "envoy_rls": own["envoy_rls"]}}, // differs in one
		{ID: "no-rls", Config: map[string]string{"policies": own["policies"]}},                                     // serves no Envoy rules
		{ID: "too-old"}, // advertises nothing: unknown, not different
	}}
	s.Joined(c)
	wait.For(t, 5*time.Second, func() (bool, string) {
		return assert.ObjectsAreEqual(own, c.last()), fmt.Sprintf("advertised %v", c.last())
	})
	assert.Equal(t, 1.0, s.metric("peerlimit_config_disagreement", "source", "policies"))
	assert.Equal(t, 1.0, s.metric("peerlimit_config_disagreement", "source", "envoy_rls"))
	assert.Equal(t, 1.0, s.metric("peerlimit_config_info", "source", "policies", "digest", s.Policies().Digest))

	write(t, policies, "login: {limit: 6, window: 1m}\n")
	require.NoError(t, s.ReloadPolicies())
	now := s.Digests()
	require.NotEqual(t, own["policies"], now["policies"])
	wait.For(t, 5*time.Second, func() (bool, string) {
		return assert.ObjectsAreEqual(now, c.last()), fmt.Sprintf("advertised %v", c.last())
	})
	assert.Equal(t, 3.0, s.metric("peerlimit_config_disagreement", "source", "policies"), "all three now differ")
}

// fakeHealth records the statuses set, by service.
type fakeHealth struct {
	mu  sync.Mutex
	set map[string]healthpb.HealthCheckResponse_ServingStatus
}

func (h *fakeHealth) SetServingStatus(service string, st healthpb.HealthCheckResponse_ServingStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.set[service] = st
}

func (h *fakeHealth) status() healthpb.HealthCheckResponse_ServingStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.set["envoy.service.ratelimit.v3.RateLimitService"]
}

// With EnvoyRLSHealthyNeedsDomains the rules keep the node unready while
// they have no domains, and the service's health follows them, but only
// while the node serves.
func TestHealthFollowsTheDomainsInForce(t *testing.T) {
	dir := t.TempDir() // empty: rules with no domains
	h := &fakeHealth{set: map[string]healthpb.HealthCheckResponse_ServingStatus{}}
	var serving atomicBool
	s := startSet(t, fileConfig(func(c *configs.Config) {
		c.EnvoyRLSConfig, c.EnvoyRLSHealthyNeedsDomains, c.WatchConfig = dir, true, false
	}),
		func(d *configs.Deps) { d.Health, d.Serving = h, serving.get })
	assert.False(t, s.Ready(), "no domains")
	s.UpdateHealth()
	assert.Equal(t, healthpb.HealthCheckResponse_UNKNOWN, h.status(), "nothing set before the node serves")

	serving.put(true)
	s.UpdateHealth()
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, h.status())

	write(t, filepath.Join(dir, "rls.yaml"), edgeRules(1))
	require.NoError(t, s.ReloadEnvoyRLS())
	assert.True(t, s.Ready())
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, h.status())
}

type atomicBool struct {
	mu sync.Mutex
	v  bool
}

func (b *atomicBool) get() bool  { b.mu.Lock(); defer b.mu.Unlock(); return b.v }
func (b *atomicBool) put(v bool) { b.mu.Lock(); defer b.mu.Unlock(); b.v = v }

// Validate names each field that is wrong, as node.Config's fields.
func TestConfigValidate(t *testing.T) {
	assert.NoError(t, configs.DefaultConfig().Validate())
	c := configs.DefaultConfig()
	c.EnvoyRLS.Headers = true
	assert.EqualError(t, c.Validate(), "EnvoyRLS needs EnvoyRLSConfig or EnvoyRLSXDS.ServerAddr")
	c = configs.DefaultConfig()
	c.EnvoyRLSConfig, c.EnvoyRLSXDS.ServerAddr = "rls.yaml", "cp:18001"
	assert.ErrorContains(t, c.Validate(), "EnvoyRLSXDS.ServerAddr and EnvoyRLSConfig are two sources of the same rules; set one")
}

// New refuses an invalid file, naming its line, and what it needs.
func TestNewRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, "ok: {limit: 5, window: 1m}\nbad: {limit: 0, window: 1m}\n")
	deps := configs.Deps{Check: func(limiter.Request) error { return nil }, Now: time.Now, Registerer: prometheus.NewRegistry(), Logger: slog.Default()}
	_, err := configs.New(fileConfig(func(c *configs.Config) { c.PoliciesFile = path }), deps)
	assert.ErrorContains(t, err, path+`:2: policy "bad"`)
	deps.Check = nil
	_, err = configs.New(configs.DefaultConfig(), deps)
	assert.ErrorContains(t, err, "Check")
}
