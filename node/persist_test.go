package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// dataDirs gives every node of a test cluster a data directory of its own,
// kept across its restarts.
func dataDirs(t *testing.T) func(*node.Config) {
	var mu sync.Mutex
	dirs := map[string]string{}
	return func(cfg *node.Config) {
		mu.Lock()
		defer mu.Unlock()
		if dirs[cfg.ID] == "" {
			dirs[cfg.ID] = t.TempDir()
		}
		cfg.Persist.Dir, cfg.ClusterName = dirs[cfg.ID], "test"
	}
}

// persistKeys is what the full-restart tests count: sliding and calendar
// limits alike, on keys every node owns some of.
var persistKeys = func() []*pb.CheckRequest {
	var out []*pb.CheckRequest
	for i := range 30 {
		out = append(out,
			&pb.CheckRequest{Key: fmt.Sprint("p:", i), Limit: 1000, WindowMs: hourish.Milliseconds()},
			&pb.CheckRequest{Key: fmt.Sprint("q:", i), Limit: 1000, Calendar: pb.CalendarUnit_DAY, TimeZone: "Europe/Paris"},
			&pb.CheckRequest{Key: fmt.Sprint("l:", i), Limit: 1000, WindowMs: hourish.Milliseconds(), Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
	}
	return out
}()

// admit sends hits[i] hits of persistKeys[i], through every node in turn,
// and requires each admitted.
func admitAll(t *testing.T, c *testcluster.Cluster, hits func(i int) int64) {
	t.Helper()
	nodes := c.Live()
	for i, req := range persistKeys {
		r := proto.Clone(req).(*pb.CheckRequest)
		h := hits(i)
		r.Hits = &h
		resp, err := apiClient(t, nodes[i%len(nodes)]).Check(context.Background(), r)
		require.NoError(t, err)
		require.True(t, resp.Allowed, "%s", r.Key)
	}
}

// counts peeks every persistKey's count on its owner.
func counts(t *testing.T, c *testcluster.Cluster) map[string]int64 {
	t.Helper()
	cl := apiClient(t, c.Live()[0])
	out := map[string]int64{}
	for _, req := range persistKeys {
		r := proto.Clone(req).(*pb.CheckRequest)
		zero := int64(0)
		r.Hits = &zero
		resp, err := cl.Check(context.Background(), r)
		require.NoError(t, err)
		out[fmt.Sprint(r.Key, "/", r.Algorithm)] = resp.Limit - resp.Remaining
	}
	return out
}

// A whole cluster stopped at once (SIGTERM to every node, a node-pool
// upgrade) and started again keeps every count, exactly: each node's last
// word to its disk comes after its last handoff.
func TestAFullStopKeepsEveryCount(t *testing.T) {
	c := testcluster.New(t, 3, dataDirs(t))
	admitAll(t, c, func(i int) int64 { return int64(i%7 + 1) })
	before := counts(t, c)

	for _, err := range c.StopAll() {
		if err != nil {
			// Each leaves while the others do: telling them may find
			// nobody; handing off to them may too, and what a node could
			// not hand off stays on its disk, which is no error.
			assert.ErrorContains(t, err, "leave", "the only error a full stop may see")
			assert.NotContains(t, err.Error(), "handed off")
		}
	}
	c.RestartAll()
	assert.Equal(t, before, counts(t, c), "after a full stop and start")
}

// A whole cluster stopped at once and started again one node at a time:
// with two of three back every count is there, as after a full kill
// (TestNodesBackBeforeTheOthersDecideFromTheReplicasTheyRestored). Each
// leaver keeps its own keys on its own disk: the others, leaving too,
// refuse its handoffs. A leaver that took them would have kept them on its
// disk, and a node back before it would have decided their keys from its
// own disk without them, unmarked (the simulation's full-stop seeds).
func TestAFullStopKeepsEachCountWhereItsOwnerFindsIt(t *testing.T) {
	c := testcluster.New(t, 3, dataDirs(t))
	admitAll(t, c, func(i int) int64 { return int64(i%6 + 1) })
	before := counts(t, c)
	// Ten rounds of the local profile's 20 ms: every change replicated.
	// A leaver's last round goes to its disk, not to its backups, which
	// are leaving too: node-2's heirs would lack it until it is back.
	time.Sleep(200 * time.Millisecond)
	c.StopAll()

	c.Restart(0)
	c.Restart(1)
	c.WaitConverged()
	assert.Equal(t, before, counts(t, c), "node-2 absent: every other count on its owner's disk, node-2's on its heirs'")
	c.Restart(2)
	c.WaitConverged()
	assert.Equal(t, before, counts(t, c), "node-2 back from its disk: once, not twice")
}

// A whole cluster killed at once (a power cut to the process, kill -9)
// loses at most what changed within a round of the kill: waited out
// here, it loses nothing.
func TestAFullKillKeepsEveryCountWrittenBeforeIt(t *testing.T) {
	c := testcluster.New(t, 3, dataDirs(t))
	admitAll(t, c, func(i int) int64 { return int64(i%5 + 1) })
	before := counts(t, c)
	time.Sleep(200 * time.Millisecond) // ten rounds of the local profile's 20 ms: every change written
	for i := range c.Live() {
		c.Kill(i)
	}
	c.RestartAll()
	assert.Equal(t, before, counts(t, c), "after every node was killed and started again")
}

// A node killed and restarted from its disk while the others run: its
// heir promoted its replicas meanwhile, and hands its partitions back
// without them (the restarted node holds them, restored), so nothing
// counts twice.
func TestARestartFromDiskCountsOnce(t *testing.T) {
	c := testcluster.New(t, 3, dataDirs(t))
	admitAll(t, c, func(i int) int64 { return 3 })
	before := counts(t, c)
	time.Sleep(200 * time.Millisecond)
	c.Kill(2)
	c.WaitConverged() // the heirs took over node-2's keys from their replicas
	assert.Equal(t, before, counts(t, c), "the heirs decide from the replicas")
	c.Restart(2)
	c.WaitConverged()
	assert.Equal(t, before, counts(t, c), "node-2 back from its disk: once, not twice")
}

// A whole cluster killed and started again one node at a time: until the
// last is back, the first ones decide its keys from the replicas they
// restored, not from nothing; once it is back (from its own disk) they
// hand them back without what they promoted, so nothing counts twice.
// With two of three back every count is there: the absent member's
// partitions are owned by their backups, which hold its replicas.
func TestNodesBackBeforeTheOthersDecideFromTheReplicasTheyRestored(t *testing.T) {
	c := testcluster.New(t, 3, dataDirs(t))
	admitAll(t, c, func(i int) int64 { return int64(i%4 + 2) })
	before := counts(t, c)
	time.Sleep(200 * time.Millisecond) // ten rounds of the local profile's 20 ms: every change written
	for i := range c.Live() {
		c.Kill(i)
	}
	c.Restart(0) // alone: no seed is up
	c.Restart(1)
	c.WaitConverged()
	assert.Equal(t, before, counts(t, c), "node-2 absent: its heirs decide from its replicas")
	c.Restart(2)
	c.WaitConverged()
	assert.Equal(t, before, counts(t, c), "node-2 back from its disk: once, not twice")
}

// A node restarted from its disk with a smaller --max-keys than its
// calendar quotas fill keeps every one: a spent quota is never dropped
// for room. It counts them and says so; new keys are refused meanwhile.
func TestARestoreKeepsEveryCalendarQuotaPastMaxKeys(t *testing.T) {
	logs := testlog.NewCapture()
	dirs, maxKeys := dataDirs(t), 1000
	c := testcluster.New(t, 1, func(cfg *node.Config) {
		dirs(cfg)
		cfg.Partitions, cfg.Limiter.MaxKeys = 7, maxKeys
		cfg.SweepInterval = sweepInterval // the capacity warning comes with the sweep
		cfg.Logger = slog.New(logs)
	})
	var quotas []*pb.CheckRequest
	for _, r := range persistKeys {
		if r.Calendar != pb.CalendarUnit_CALENDAR_NONE {
			quotas = append(quotas, r)
		}
	}
	cl := apiClient(t, c.Node(0))
	for i, r := range quotas {
		r = proto.Clone(r).(*pb.CheckRequest)
		h := int64(i%3 + 1)
		r.Hits = &h
		resp, err := cl.Check(context.Background(), r)
		require.NoError(t, err)
		require.True(t, resp.Allowed, "%s", r.Key)
	}
	before := counts(t, c)
	for _, err := range c.StopAll() {
		require.NoError(t, err)
	}

	maxKeys = 7 // a key per partition: far fewer than the quotas
	c.RestartAll()
	assert.Equal(t, before, counts(t, c), "every quota restored")
	over := scrape(t, c.Node(0), "peerlimit_calendar_keys_over_cap_total")
	assert.GreaterOrEqual(t, over, float64(len(quotas)-7), "the quotas past a partition's share are counted")
	restored := logs.Find("restored counts from the data directory")
	require.NotEmpty(t, restored)
	assert.NotContains(t, restored[len(restored)-1].Attrs, "refused", "no state refused at the restore")
	wait.For(t, 5*time.Second, func() (bool, string) {
		return len(logs.Find("kept calendar quotas")) > 0, "a capacity warning"
	})
	assert.Equal(t, fmt.Sprint(over), logs.Find("kept calendar quotas")[0].Attrs["calendar_keys_over_cap"])

	_, err := apiClient(t, c.Node(0)).Check(context.Background(), &pb.CheckRequest{Key: "new", Limit: 10, Calendar: pb.CalendarUnit_DAY})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "a new key is still refused: %v", err)
}

// Without --data-dir a node says once, at start, that its counts die with
// the cluster; with one it does not.
func TestWithoutADataDirectoryTheNodeSaysCountsDieWithTheCluster(t *testing.T) {
	const msg = "no --data-dir: counts are kept in memory only"
	logs := testlog.NewCapture()
	testcluster.New(t, 1, func(cfg *node.Config) { cfg.Logger = slog.New(logs) })
	got := logs.Find(msg)
	require.Len(t, got, 1)
	assert.Contains(t, got[0].Msg, "a restart of the whole cluster forgets them")

	logs = testlog.NewCapture()
	dirs := dataDirs(t)
	testcluster.New(t, 1, func(cfg *node.Config) { dirs(cfg); cfg.Logger = slog.New(logs) })
	assert.Empty(t, logs.Find(msg))
	assert.NotEmpty(t, logs.Find("restored counts from the data directory"))
}
