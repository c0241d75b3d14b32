package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/internal/testkit/configmap"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
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
	inForce := nodes[0].Configs().EnvoyRLSConfig().Digest
	for _, n := range nodes {
		assert.Equal(t, inForce, n.Configs().EnvoyRLSConfig().Digest, n.ID())
	}

	cm.Update(map[string]string{"rls.yaml": badEdgeRules})
	want := cm.Path("rls.yaml") + `:2: domain "edge", descriptor client: unknown unit "fortnight"`
	c.Eventually(10*time.Second, func() (bool, string) {
		for _, n := range nodes {
			if got := n.Configs().Errors()["envoy_rls"]; !strings.Contains(got, want) {
				return false, fmt.Sprintf("%s's config errors are %q", n.ID(), n.Configs().Errors())
			}
		}
		return true, ""
	})
	for i, n := range nodes {
		assert.Equal(t, inForce, n.Configs().EnvoyRLSConfig().Digest, "%s keeps the rules in force", n.ID())
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
			if errs := n.Configs().Errors(); len(errs) > 0 {
				return false, fmt.Sprintf("%s's config errors are %q", n.ID(), errs)
			}
		}
		return true, ""
	})
	for _, n := range nodes {
		assert.Equal(t, inForce, n.Configs().EnvoyRLSConfig().Digest, n.ID())
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
