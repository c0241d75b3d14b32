package node_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
)

// A node running with a fault injected on purpose, or an open peer port,
// says so for as long as it runs (issue 38, item 7): a gauge per fault in
// its /metrics, its faults in its /v1/members, and a flag on it in every
// member's /v1/members. A node without any shows nothing.
func TestFaultInjectionIsShownWhileItRuns(t *testing.T) {
	c := testcluster.New(t, 2, func(cfg *node.Config) {
		if cfg.ID == "node-0" {
			cfg.Faults = []string{"clock_offset", "clock_step"}
			cfg.Security.OpenPeers = true
		}
	})
	faulty, clean := c.Node(0), c.Node(1)
	require.Equal(t, "node-0", faulty.ID())

	for _, kind := range []string{"clock_offset", "clock_step", "insecure_open_peers"} {
		assert.Equal(t, 1.0, scrape(t, faulty, `peerlimit_fault_injection_active{kind="`+kind+`"}`), kind)
	}
	resp, err := http.Get("http://" + clean.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.NotContains(t, string(body), "peerlimit_fault_injection_active{", "no series on a clean node")

	for _, asked := range []*node.Node{faulty, clean} {
		var m httpapi.Members
		require.Equal(t, http.StatusOK, getJSON(t, "http://"+asked.HTTPAddr()+"/v1/members", &m))
		if asked == faulty {
			assert.Equal(t, []string{"clock_offset", "clock_step", "insecure_open_peers"}, m.FaultInjection)
		} else {
			assert.Empty(t, m.FaultInjection)
		}
		flagged := map[string]bool{}
		for _, mi := range m.Members {
			flagged[mi.ID] = mi.FaultInjection
		}
		assert.Equal(t, map[string]bool{"node-0": true, "node-1": false}, flagged, "asked %s", asked.ID())
	}
}

func TestFaultsValidated(t *testing.T) {
	cfg := node.DefaultLocalConfig("n")
	cfg.Faults = []string{"clock_offset", "Bad Name"}
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Faults[1]")
}
