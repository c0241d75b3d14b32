package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

const (
	policiesA = "login: {limit: 5, window: 1m}\n"
	policiesB = "login: {limit: 6, window: 1m}\n"
	rulesA    = "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 5}}]\n"
	rulesB    = "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 6}}]\n"
)

// configFiles gives every node its own policy file, alike to begin with
// (a node's copy is what an operator forgets to update), and one Envoy
// rules file for all (a node that missed the reload differs): the rules'
// digest covers their files' paths, the policies' only the bytes.
type configFiles struct{ dir string }

func (f configFiles) policies(id string) string { return filepath.Join(f.dir, id+"-policies.yaml") }
func (f configFiles) rules() string             { return filepath.Join(f.dir, "rls.yaml") }

func (f configFiles) edit(t *testing.T) func(*node.Config) {
	require.NoError(t, os.WriteFile(f.rules(), []byte(rulesA), 0o600))
	return func(c *node.Config) {
		require.NoError(t, os.WriteFile(f.policies(c.ID), []byte(policiesA), 0o600))
		c.PoliciesFile, c.EnvoyRLSConfig = f.policies(c.ID), f.rules()
		// Each node reloads when the test says so: a watcher would reload
		// every node from the shared rules file, and the disagreement
		// these tests look at would never be seen.
		c.WatchConfig = false
	}
}

// disagreement is n's peerlimit_config_disagreement, by source, as
// Prometheus would scrape it.
func disagreement(t *testing.T, n *node.Node) string {
	g := metrictest.Scrape("http://" + n.HTTPAddr() + "/metrics")
	return fmt.Sprintf("policies=%v envoy_rls=%v",
		metrictest.Value(t, g, "peerlimit_config_disagreement", "source", "policies"),
		metrictest.Value(t, g, "peerlimit_config_disagreement", "source", "envoy_rls"))
}

// infoDigests lists n's peerlimit_config_info series of source, as
// digest=value.
func infoDigests(t *testing.T, n *node.Node, source string) []string {
	t.Helper()
	mfs, err := metrictest.Scrape("http://" + n.HTTPAddr() + "/metrics").Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "peerlimit_config_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source {
				out = append(out, fmt.Sprintf("%s=%v", labels["digest"], m.GetGauge().GetValue()))
			}
		}
	}
	return out
}

// awaitDisagreement waits until every node reports want[its index].
func awaitDisagreement(t *testing.T, c *testcluster.Cluster, want ...string) {
	t.Helper()
	c.Eventually(10*time.Second, func() (bool, string) {
		for i, n := range c.Live() {
			if got := disagreement(t, n); got != want[i] {
				return false, fmt.Sprintf("%s reports %s, want %s", n.ID(), got, want[i])
			}
		}
		return true, ""
	})
}

// envoyRLSConfigOf is n's GET /v1/envoy-rls/config.
func envoyRLSConfigOf(t *testing.T, n *node.Node) httpapi.EnvoyRLSConfig {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/envoy-rls/config")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out httpapi.EnvoyRLSConfig
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

func httpMembers(t *testing.T, n *node.Node) map[string]httpapi.MemberInfo {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/v1/members")
	require.NoError(t, err)
	defer resp.Body.Close()
	var ms httpapi.Members
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ms))
	out := map[string]httpapi.MemberInfo{}
	for _, m := range ms.Members {
		out[m.ID] = m
	}
	return out
}

// One node that reloads another policy file is seen by the others as
// differing, counted, and shown in both members APIs; the count returns
// to 0 once it has the same file again. The same for the Envoy rules.
func TestConfigDisagreementIsSeenAndClears(t *testing.T) {
	files := configFiles{dir: t.TempDir()}
	c := testcluster.New(t, 3, files.edit(t))
	nodes := c.Live()
	n0, n2 := nodes[0], nodes[2]
	awaitDisagreement(t, c, "policies=0 envoy_rls=0", "policies=0 envoy_rls=0", "policies=0 envoy_rls=0")
	digestA := n0.Configs().Policies().Digest
	require.Equal(t, []string{digestA + "=1"}, infoDigests(t, n0, "policies"))
	short := func(d string) string { return strings.TrimPrefix(d, "sha256:")[:12] }
	assert.Equal(t, map[string]string{"policies": short(digestA), "envoy_rls": short(n0.Configs().EnvoyRLSConfig().Digest)},
		httpMembers(t, n0)["node-2"].Config, "advertised from the join on")

	require.NoError(t, os.WriteFile(files.policies("node-2"), []byte(policiesB), 0o600))
	require.NoError(t, n2.Configs().ReloadPolicies())
	digestB := n2.Configs().Policies().Digest
	awaitDisagreement(t, c, "policies=1 envoy_rls=0", "policies=1 envoy_rls=0", "policies=2 envoy_rls=0")
	assert.Equal(t, []string{digestB + "=1"}, infoDigests(t, n2, "policies"), "only the digest in force")

	m2 := httpMembers(t, n0)["node-2"]
	assert.Equal(t, []string{"policies"}, m2.ConfigDiffers)
	assert.Equal(t, short(digestB), m2.Config["policies"])
	assert.Empty(t, httpMembers(t, n0)["node-1"].ConfigDiffers)
	assert.Equal(t, []string{"policies"}, httpMembers(t, n2)["node-0"].ConfigDiffers, "seen from node-2, node-0 differs")
	resp, err := apiClient(t, n0).Members(context.Background(), &pb.MembersRequest{})
	require.NoError(t, err)
	i := slices.IndexFunc(resp.Members, func(m *pb.Member) bool { return m.Id == "node-2" })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, []string{"policies"}, resp.Members[i].ConfigDiffers)
	assert.Equal(t, short(digestB), resp.Members[i].Config["policies"])

	require.NoError(t, os.WriteFile(files.policies("node-2"), []byte(policiesA), 0o600))
	require.NoError(t, n2.Configs().ReloadPolicies())
	awaitDisagreement(t, c, "policies=0 envoy_rls=0", "policies=0 envoy_rls=0", "policies=0 envoy_rls=0")

	require.NoError(t, os.WriteFile(files.rules(), []byte(rulesB), 0o600))
	require.NoError(t, n0.Configs().ReloadEnvoyRLS())
	awaitDisagreement(t, c, "policies=0 envoy_rls=2", "policies=0 envoy_rls=1", "policies=0 envoy_rls=1")
	require.NoError(t, nodes[1].Configs().ReloadEnvoyRLS())
	require.NoError(t, n2.Configs().ReloadEnvoyRLS())
	awaitDisagreement(t, c, "policies=0 envoy_rls=0", "policies=0 envoy_rls=0", "policies=0 envoy_rls=0")
}

// GET /v1/envoy-rls/config shows the rules in force and when they were
// put in force; a reload moves both.
func TestEnvoyRLSConfigEndpointFollowsReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	writeRLS(t, path, rulesA)
	n := startRLSNode(t, func(c *node.Config) { c.EnvoyRLSConfig = path })
	get := func() httpapi.EnvoyRLSConfig { return envoyRLSConfigOf(t, n) }
	first := get()
	assert.Equal(t, path, first.Source)
	assert.Equal(t, n.Configs().EnvoyRLSConfig().Digest, first.Digest)
	require.Len(t, first.Rules, 1)
	assert.Equal(t, "d.k", first.Rules[0].Key)
	assert.EqualValues(t, 5, first.Rules[0].RequestsPerUnit)
	assert.Positive(t, first.LoadedAtMS)
	assert.Equal(t, first, get(), "asking again changes nothing")

	writeRLS(t, path, rulesB)
	require.NoError(t, n.Configs().ReloadEnvoyRLS())
	second := get()
	assert.NotEqual(t, first.Digest, second.Digest)
	assert.EqualValues(t, 6, second.Rules[0].RequestsPerUnit)
	assert.GreaterOrEqual(t, second.LoadedAtMS, first.LoadedAtMS)
}
