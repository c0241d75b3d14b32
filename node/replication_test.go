package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
)

// waitReplicated polls until every key state the live nodes hold is also
// held once as a replica by another: the cluster's replica count equals
// its key count.
func waitReplicated(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	c.Eventually(10*time.Second, func() (bool, string) {
		keys, replicas := 0, 0.0
		for _, n := range c.Live() {
			st := n.Store().Stats()
			keys += st.CounterKeys + st.LogKeys + st.GCRAKeys
			replicas += metrictest.Value(t, metrictest.Scrape("http://"+n.HTTPAddr()+"/metrics"), "peerlimit_replica_keys")
		}
		return float64(keys) == replicas, fmt.Sprintf("%d keys, %.0f replicas", keys, replicas)
	})
}

// A crash loses no count: the killed owner's keys continue on their heirs
// from the replicas, exactly (neither lost nor counted twice), and when
// the node comes back empty under the same id, its keys come back to it
// with their counts.
func TestKillKeepsCountsThroughTheReplicas(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	keys := manyKeys(300)
	consume(t, c.Live(), keys, 3)
	victim := c.Node(2)
	owned := victim.Store().Stats().CounterKeys + victim.Store().Stats().LogKeys
	require.Positive(t, owned)
	waitReplicated(t, c)

	c.Kill(2)
	c.WaitConverged()
	waitCounts(t, c, c.Node(0), keys, 3)
	t.Logf("%d keys of the killed node kept their counts", owned)

	restarted := c.Restart(2)
	c.WaitConverged()
	waitCounts(t, c, c.Node(1), keys, 3)
	back := restarted.Store().Stats().CounterKeys + restarted.Store().Stats().LogKeys
	require.Positive(t, back, "the restarted node owns keys again, with their counts")
}

// With replication off, nothing is replicated and a node says so.
func TestReplicationOff(t *testing.T) {
	c := testcluster.New(t, 2, func(cfg *node.Config) { cfg.Replication.Factor = 0 })
	consume(t, c.Live(), manyKeys(20), 2)
	for _, n := range c.Live() {
		require.False(t, n.Store().Config().TrackChanges)
	}
}
