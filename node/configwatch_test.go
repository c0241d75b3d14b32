package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/internal/testkit/configmap"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/node"
)

// edgeRules limits every client of domain edge to limit a minute.
func edgeRules(limit int) string {
	return fmt.Sprintf("domain: edge\ndescriptors: [{key: client, rate_limit: {unit: minute, requests_per_unit: %d}}]\n", limit)
}

const badEdgeRules = "domain: edge\ndescriptors: [{key: client, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"

// envoyLimit returns the limit n's Envoy rate limit service answers a
// client of edge with, asked through rls.
func envoyLimit(t *testing.T, rls rlspb.RateLimitServiceClient) uint32 {
	t.Helper()
	resp, err := rls.ShouldRateLimit(context.Background(), rlsRequest("edge", "client=probe"))
	require.NoError(t, err)
	require.Len(t, resp.GetStatuses(), 1)
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

func rlsClient(t *testing.T, n *node.Node) rlspb.RateLimitServiceClient {
	return rlspb.NewRateLimitServiceClient(dialWith(t, n.GRPCAddr(), insecure.NewCredentials()))
}

type healthzBody struct {
	Status       string            `json:"status"`
	ConfigErrors map[string]string `json:"config_errors"`
}

func healthz(t *testing.T, n *node.Node) (int, healthzBody) {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/healthz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b healthzBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	return resp.StatusCode, b
}

// metric returns n's series name{labels}, as Prometheus scrapes it.
func metric(t *testing.T, n *node.Node, name string, labels ...string) float64 {
	t.Helper()
	return metrictest.Value(t, metrictest.Scrape("http://"+n.HTTPAddr()+"/metrics"), name, labels...)
}

// Three nodes read their Envoy rules from one ConfigMap volume. kubelet's
// update reaches every node without a signal; a bad version is refused by
// every node, which keeps serving the rules in force, stays in rotation
// and says why (/healthz, peerlimit_config_reload_failing); the good
// version back ends the failure without reloading anything.
func TestConfigMapUpdateReachesEveryNode(t *testing.T) {
	cm := configmap.New(t, t.TempDir())
	cm.Update(map[string]string{"rls.yaml": edgeRules(2)})
	c := testcluster.New(t, 3, func(cfg *node.Config) { cfg.EnvoyRLSConfig = cm.Dir() })
	nodes := c.Live()
	clients := make([]rlspb.RateLimitServiceClient, len(nodes))
	for i, n := range nodes {
		clients[i] = rlsClient(t, n)
	}
	awaitLimit := func(want uint32) {
		t.Helper()
		c.Eventually(10*time.Second, func() (bool, string) {
			for i, n := range nodes {
				if got := envoyLimit(t, clients[i]); got != want {
					return false, fmt.Sprintf("%s answers with the limit %d, want %d", n.ID(), got, want)
				}
			}
			return true, ""
		})
	}
	awaitLimit(2)

	cm.Update(map[string]string{"rls.yaml": edgeRules(5)})
	awaitLimit(5)
	inForce := nodes[0].EnvoyRLSConfig().Digest
	for _, n := range nodes {
		assert.Equal(t, inForce, n.EnvoyRLSConfig().Digest, n.ID())
	}

	cm.Update(map[string]string{"rls.yaml": badEdgeRules})
	want := cm.Path("rls.yaml") + `:2: domain "edge", descriptor client: unknown unit "fortnight"`
	c.Eventually(10*time.Second, func() (bool, string) {
		for _, n := range nodes {
			if got := n.ConfigErrors()["envoy_rls"]; !strings.Contains(got, want) {
				return false, fmt.Sprintf("%s's config errors are %q", n.ID(), n.ConfigErrors())
			}
		}
		return true, ""
	})
	for i, n := range nodes {
		assert.Equal(t, inForce, n.EnvoyRLSConfig().Digest, "%s keeps the rules in force", n.ID())
		assert.EqualValues(t, 5, envoyLimit(t, clients[i]), n.ID())
		code, body := healthz(t, n)
		assert.Equal(t, http.StatusOK, code, "%s stays in rotation", n.ID())
		assert.Equal(t, "SERVING", body.Status, n.ID())
		assert.Contains(t, body.ConfigErrors["envoy_rls"], want, n.ID())
		assert.Equal(t, 1.0, metric(t, n, "peerlimit_config_reload_failing", "source", "envoy_rls"), n.ID())
		assert.Equal(t, 1.0, metric(t, n, "peerlimit_envoy_rls_config_reloads_total", "result", "error"), n.ID())
	}

	cm.Update(map[string]string{"rls.yaml": edgeRules(5)})
	c.Eventually(10*time.Second, func() (bool, string) {
		for _, n := range nodes {
			if errs := n.ConfigErrors(); len(errs) > 0 {
				return false, fmt.Sprintf("%s's config errors are %q", n.ID(), errs)
			}
		}
		return true, ""
	})
	for _, n := range nodes {
		assert.Equal(t, inForce, n.EnvoyRLSConfig().Digest, n.ID())
		code, body := healthz(t, n)
		assert.Equal(t, http.StatusOK, code, n.ID())
		assert.Empty(t, body.ConfigErrors, n.ID())
		assert.Equal(t, 0.0, metric(t, n, "peerlimit_config_reload_failing", "source", "envoy_rls"), n.ID())
		assert.Positive(t, metric(t, n, "peerlimit_config_last_reload_success_timestamp_seconds", "source", "envoy_rls"), n.ID())
		// One change put in force; the start's check, the swaps' other
		// events and the version already in force counted nothing.
		assert.Equal(t, 1.0, metric(t, n, "peerlimit_envoy_rls_config_reloads_total", "result", "ok"), n.ID())
		assert.Equal(t, 1.0, metric(t, n, "peerlimit_envoy_rls_config_reloads_total", "result", "error"), n.ID())
	}
}

// The policy file, edited in place and replaced by rename, reloads by
// itself; a bad version keeps the policies in force and is reported.
func TestPolicyFileReloadsWhenWatched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	writePolicyFile := func(src string) { require.NoError(t, os.WriteFile(path, []byte(src), 0o600)) }
	writePolicyFile("login: {limit: 3, window: 1h}\n")
	n := startRLSNode(t, func(c *node.Config) { c.PoliciesFile = path })
	awaitLimit := func(want int64) {
		t.Helper()
		wait.For(t, 10*time.Second, func() (bool, string) {
			p, ok := n.Policies().Lookup("login")
			return ok && p.Limit == want, fmt.Sprintf("login is %+v (found: %v), want the limit %d", p, ok, want)
		})
	}

	writePolicyFile("login: {limit: 4, window: 1h}\n")
	awaitLimit(4)
	tmp := filepath.Join(dir, ".policies.yaml.swp")
	require.NoError(t, os.WriteFile(tmp, []byte("login: {limit: 5, window: 1h}\n"), 0o600))
	require.NoError(t, os.Rename(tmp, path))
	awaitLimit(5)

	writePolicyFile("login: {limit: -1, window: 1h}\n")
	wait.For(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(n.ConfigErrors()["policies"], path+`:1: policy "login": limit must be positive, got -1`),
			fmt.Sprintf("config errors %q", n.ConfigErrors())
	})
	p, _ := n.Policies().Lookup("login")
	assert.EqualValues(t, 5, p.Limit, "the policies in force are kept")
	assert.Equal(t, 1.0, metric(t, n, "peerlimit_config_reload_failing", "source", "policies"))
	_, body := healthz(t, n)
	assert.Contains(t, body.ConfigErrors["policies"], "limit must be positive")

	writePolicyFile("login: {limit: 6, window: 1h}\n")
	awaitLimit(6)
	assert.Empty(t, n.ConfigErrors())
	assert.Equal(t, 0.0, metric(t, n, "peerlimit_config_reload_failing", "source", "policies"))
	assert.Equal(t, 3.0, metric(t, n, "peerlimit_policy_reloads_total", "result", "ok"))
}

// EnvoyRLSWatchRoot (upstream's RUNTIME_WATCH_ROOT=true): a new version
// is published by swapping the root symlink, and only that reloads.
func TestEnvoyRLSWatchRootSwap(t *testing.T) {
	parent := t.TempDir()
	for i, v := range []string{"v1", "v2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(parent, v, "ratelimit", "config"), 0o755))
		writeRLS(t, filepath.Join(parent, v, "ratelimit", "config", "rls.yaml"), edgeRules(10*(i+1)))
	}
	root := filepath.Join(parent, "current")
	require.NoError(t, os.Symlink("v1", root))
	n := startRLSNode(t, func(c *node.Config) {
		c.EnvoyRLSConfig, c.EnvoyRLSWatchRoot = filepath.Join(root, "ratelimit", "config"), root
	})
	rls := rlsClient(t, n)
	require.EqualValues(t, 10, envoyLimit(t, rls))

	tmp := filepath.Join(parent, "current_tmp")
	require.NoError(t, os.Symlink("v2", tmp))
	require.NoError(t, os.Rename(tmp, root))
	wait.For(t, 10*time.Second, func() (bool, string) {
		got := envoyLimit(t, rls)
		return got == 20, fmt.Sprintf("the limit is %d, want 20", got)
	})

	cfg := node.DefaultLocalConfig("x")
	cfg.EnvoyRLSConfig, cfg.EnvoyRLSWatchRoot = filepath.Join(root, "ratelimit", "config"), filepath.Join(parent, "elsewhere")
	assert.ErrorContains(t, cfg.Validate(), "EnvoyRLSWatchRoot must be EnvoyRLSConfig or one of its ancestors")
}

// A ConfigMap with no keys, at start or after an update that removed
// every one, is a configuration with no domains, as upstream loads it:
// the node starts, and the update is put in force, with a warning each
// time that every call is now answered OK; a key without an extension
// counts like any other, as upstream reads every file.
func TestEmptyConfigMapIsNoLimits(t *testing.T) {
	const warning = "envoy rls config has no domains: every call is answered OK with no limits"
	cm := configmap.New(t, t.TempDir())
	cm.Update(map[string]string{})
	logs := testlog.NewCapture()
	n := startRLSNode(t, func(c *node.Config) { c.EnvoyRLSConfig, c.Logger = cm.Dir(), slog.New(logs) })
	rls := rlsClient(t, n)
	assert.Empty(t, n.EnvoyRLSConfig().Domains())
	assert.EqualValues(t, 0, envoyLimit(t, rls), "no limit applies")
	require.Len(t, logs.Find(warning), 1)
	assert.Equal(t, slog.LevelWarn, logs.Find(warning)[0].Level)

	cm.Update(map[string]string{"edge": edgeRules(3)})
	wait.For(t, 10*time.Second, func() (bool, string) {
		got := envoyLimit(t, rls)
		return got == 3, fmt.Sprintf("the limit is %d, want 3", got)
	})

	cm.Update(map[string]string{})
	wait.For(t, 10*time.Second, func() (bool, string) {
		got := envoyLimit(t, rls)
		return got == 0, fmt.Sprintf("the limit is %d, want none", got)
	})
	assert.Empty(t, n.ConfigErrors())
	assert.Empty(t, n.EnvoyRLSConfig().Domains())
	// The warning follows the rules being put in force (configChanged).
	wait.For(t, 10*time.Second, func() (bool, string) {
		got := len(logs.Find(warning))
		return got >= 2, fmt.Sprintf("%d warnings", got)
	})
	assert.Len(t, logs.Find(warning), 2, "warned again, once")
}

// loaded_at_ms is when this node put the configuration in force: a
// reload that finds the same files (the watcher's at start, a SIGHUP, a
// touch) keeps the configuration in force, itself, and its load time;
// one that changes it moves the time.
func TestReloadThatChangesNothingKeepsItsLoadTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	writeRLS(t, path, edgeRules(2))
	clk := fakeclock.AtMilli(1_700_000_000_000)
	n := startRLSNode(t, func(c *node.Config) { c.EnvoyRLSConfig, c.Now = path, clk.Now })
	loadedAt := func() int64 { return envoyRLSConfigOf(t, n).LoadedAtMS }
	start := clk.Now().UnixMilli()
	inForce := n.EnvoyRLSConfig()
	require.Equal(t, start, loadedAt())

	clk.Advance(time.Minute)
	require.NoError(t, n.ReloadEnvoyRLS())
	assert.Same(t, inForce, n.EnvoyRLSConfig())
	assert.Equal(t, start, loadedAt())

	clk.Advance(time.Minute)
	writeRLS(t, path, edgeRules(3))
	require.NoError(t, n.ReloadEnvoyRLS())
	assert.Equal(t, clk.Now().UnixMilli(), loadedAt())
}
