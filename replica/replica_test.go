package replica_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const t0 = 1_700_000_000_000 // ms; whole seconds

// member is a node's request path with replication: its store, the
// replicas it keeps and their failover, its replicator, on the cluster's
// in-memory network.
type member struct {
	id       string
	boot     string
	svc      *route.Service
	store    *limiter.Store
	replicas *replica.Store
	failover *replica.Failover
	sender   *replica.Replicator
	peers    *memnet.Peers
	logs     *testlog.Capture
	reg      *prometheus.Registry
	// offset is how far the member's clock is off the cluster's, clk.
	offset time.Duration
	clk    *fakeclock.Clock
	// journal is told what its replica store applies, as persistence is.
	journal *journal
}

// journal records the replications a replica store applied.
type journal struct {
	mu      sync.Mutex
	applied []peer.Replication
}

func (j *journal) Replicated(_ string, r peer.Replication) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.applied = append(j.applied, r)
}

func (j *journal) Dropped([]int) {}

// replications returns what the store applied, in order.
func (j *journal) replications() []peer.Replication {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.applied)
}

// now is the member's clock: the cluster's, off by its offset.
func (m *member) now() time.Time { return m.clk.Now().Add(m.offset) }

// cluster is members sharing one ring, which a test may change (as
// gossip would), and one clock: route.Cluster for all of them.
type cluster struct {
	net     *memnet.Network
	ring    atomic.Pointer[ring.Ring]
	clk     *fakeclock.Clock
	members map[string]*member
	boots   int // processes started
}

func (c *cluster) Ring() *ring.Ring { return c.ring.Load() }

// newCluster starts members ids sharing one ring and one clock; the
// network's seed is printed if the test fails.
func newCluster(t *testing.T, ids ...string) *cluster {
	t.Helper()
	seed := rand.Uint64()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("memnet seed: %d", seed)
		}
	})
	c := &cluster{net: memnet.New(seed, 500*time.Millisecond), clk: fakeclock.AtMilli(t0), members: map[string]*member{}}
	c.ring.Store(testring.New(t, ids...))
	t.Cleanup(c.net.Close)
	for _, id := range ids {
		c.members[id] = c.start(t, id)
	}
	return c
}

func (c *cluster) start(t *testing.T, id string) *member {
	t.Helper()
	lc := limiter.DefaultConfig()
	lc.TrackChanges = true
	store, err := limiter.New(lc, partition.DefaultCount)
	require.NoError(t, err)
	m := &member{id: id, store: store, reg: prometheus.NewRegistry(), clk: c.clk, journal: &journal{}}
	rm, err := replica.NewMetrics(m.reg)
	require.NoError(t, err)
	m.replicas = replica.NewStore(partition.DefaultCount, 1000, lc.MaxLogLimit, rm, m.journal)
	peers := c.net.Join(id)
	m.peers = peers
	m.logs = testlog.NewCapture()
	log := slog.New(m.logs)
	c.boots++
	boot := fmt.Sprint(id, "#", c.boots) // a process of its own at every start
	m.boot = boot
	m.failover, err = replica.NewFailover(replica.FailoverDeps{Self: id, Boot: boot, Store: store, Replicas: m.replicas, Ring: c.Ring,
		Now: m.now, Logger: log, Metrics: rm})
	require.NoError(t, err)
	m.svc, err = route.NewService(route.DefaultConfig(), route.Deps{NodeID: id, Store: store, Now: m.now, Cluster: route.RingCluster(c.Ring),
		Peers: peers, Failover: m.failover, Logger: log})
	require.NoError(t, err)
	peers.Serve(m.svc.Peer)
	m.sender, err = replica.NewReplicator(replica.Deps{Self: id, Boot: boot, Store: store, Peers: peers,
		Ring: c.Ring, Now: m.now, Logger: log, Metrics: rm})
	require.NoError(t, err)
	return m
}

// key returns the first key "<prefix>:<i>" owned by owner.
func (c *cluster) key(t *testing.T, owner, prefix string) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("%s:%d", prefix, i); c.Ring().Owner(k).ID == owner {
			return k
		}
	}
	t.Fatalf("no key of %s's", owner)
	return ""
}

// heirOf returns the member that inherits key.
func (c *cluster) heirOf(key string) string {
	b, _ := c.Ring().Backup(c.Ring().Partition(key))
	return b.ID
}

func logReq(key string, limit int64) limiter.Request {
	return limiter.Request{Key: key, Limit: limit, Window: time.Minute, Algorithm: limiter.SlidingWindowLog, Hits: 1}
}

// admit checks req n times through m and returns how many were allowed.
func admit(t *testing.T, m *member, req limiter.Request, n int) (allowed int) {
	t.Helper()
	for range n {
		res := m.svc.Check(context.Background(), req)
		require.NoError(t, res.Err)
		if res.Decision.Allowed {
			allowed++
		}
	}
	return allowed
}

// The owner is cut off from every member while gossip still names it:
// its key's checks go to its heir, which decides from the owner's
// replica, so the cluster admits what was left of the limit, not a new
// one.
func TestHeirDecidesFromTheReplicaWhenTheOwnerIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, "n1", "n2", "n3")
		key := c.key(t, "n2", "k")
		req := logReq(key, 5)
		require.Equal(t, 3, admit(t, c.members["n2"], req, 3))
		require.Zero(t, c.members["n2"].sender.Round(context.Background()))
		for _, id := range []string{"n1", "n3"} {
			c.net.Partition([]string{"n2"}, []string{id})
		}

		heir := c.heirOf(key)
		other := map[string]string{"n1": "n3", "n3": "n1"}[heir]
		allowed := admit(t, c.members[other], req, 2) + admit(t, c.members[heir], req, 2)
		assert.Equal(t, 2, allowed, "the 2 left of the limit, over both survivors")
		res := c.members[other].svc.Check(context.Background(), req)
		assert.True(t, res.Degraded, "answered without the owner")
		assert.Equal(t, heir, res.Owner, "by the heir")
		assert.False(t, res.Decision.Allowed)
		assert.Zero(t, c.members[heir].replicas.Len(), "the replica was merged into the heir's own state")
	})
}

// held returns how many hits m's own store counts for req now.
func held(t *testing.T, c *cluster, m *member, req limiter.Request) int64 {
	t.Helper()
	req.Hits = 0
	d, err := m.store.Check(c.clk.Now(), req)
	require.NoError(t, err)
	return d.CurrentCount
}

// replicated returns how many hits the replica of req's key on its backup holds,
// by taking its partition out (and putting it back).
func replicated(t *testing.T, c *cluster, req limiter.Request) int64 {
	t.Helper()
	b := c.members[c.heirOf(req.Key)]
	p := b.store.Transfer().PartitionOf(req.Key)
	states, from := b.replicas.Take(p)
	defer b.replicas.Apply(from.ID, peer.Replication{Whole: []int{p}, States: states, Boot: from.Boot}) // put back as it was
	for _, ks := range states {
		if ks.Key == req.Key && ks.Algorithm == req.Algorithm {
			return int64(len(ks.Log))
		}
	}
	return 0
}

// A round sends a new backup the whole partition, then only what changed;
// a key reset at the owner is dropped at the backup; a round that fails
// sends its partitions whole the next time.
func TestReplicatorSendsChangesAndWholePartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, "n1", "n2", "n3")
		owner := c.members["n1"]
		a, b := logReq(c.key(t, "n1", "a"), 10), logReq(c.key(t, "n1", "b"), 10)
		admit(t, owner, a, 2)
		admit(t, owner, b, 1)
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.EqualValues(t, 2, replicated(t, c, a))
		assert.EqualValues(t, 1, replicated(t, c, b))
		whole := metrictest.Value(t, owner.reg, "peerlimit_replication_keys_total", "result", "sent")

		admit(t, owner, a, 1)
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.EqualValues(t, 3, replicated(t, c, a))
		assert.Equal(t, whole+1, metrictest.Value(t, owner.reg, "peerlimit_replication_keys_total", "result", "sent"),
			"only the key that changed")

		owner.store.Admin().Delete(c.clk.Now(), b.Key, b.Window, b.Algorithm)
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.Zero(t, replicated(t, c, b), "the reset reached the backup")

		backup := c.heirOf(a.Key)
		c.net.Cut("n1", backup)
		admit(t, owner, a, 1)
		assert.Positive(t, owner.sender.Round(context.Background()), "undelivered")
		assert.Positive(t, metrictest.Value(t, owner.reg, "peerlimit_replication_keys_total", "result", "failed"))
		c.net.Heal()
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.EqualValues(t, 4, replicated(t, c, a), "sent whole after the failure")
		assert.EqualValues(t, 4, held(t, c, owner, a))
	})
}

// A backup holds at most MaxKeys states, split over its partitions: past
// its share, a partition keeps the keys replicated last and counts the
// others refused. It sweeps what expired.
func TestStoreIsBoundedAndSwept(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := replica.NewMetrics(reg)
	require.NoError(t, err)
	s := replica.NewStore(1, 2, 3, m, nil)
	state := func(key string, log ...int64) limiter.KeyState {
		return limiter.KeyState{Key: key, Window: time.Second, Algorithm: limiter.SlidingWindowLog, Log: log}
	}
	s.Apply("n1", peer.Replication{States: []limiter.KeyState{state("a", t0), state("b", t0, t0+1, t0+2, t0+3), state("c", t0)}})
	assert.Equal(t, 2, s.Len())
	assert.Equal(t, 1.0, metrictest.Value(t, reg, "peerlimit_replica_refused_total"))
	got, origin := s.Take(0)
	assert.Equal(t, "n1", origin.ID)
	require.Len(t, got, 2)
	assert.Equal(t, []string{"b", "c"}, []string{got[0].Key, got[1].Key}, "a was replicated longest ago")
	assert.Equal(t, []int64{t0 + 1, t0 + 2, t0 + 3}, got[0].Log, "trimmed to the newest MaxLogLimit")

	s.Apply("n1", peer.Replication{States: []limiter.KeyState{state("a", t0)}})
	s.Apply("n1", peer.Replication{States: []limiter.KeyState{state("a")}})
	assert.Zero(t, s.Len(), "an empty state drops the copy")
	s.Apply("n1", peer.Replication{States: []limiter.KeyState{state("a", t0), state("c", t0+5000)}})
	assert.Equal(t, 1, s.Sweep(time.UnixMilli(t0+1000)), "a's entry left its window")
	assert.Equal(t, 1, s.Len())
	s.Apply("n1", peer.Replication{Whole: []int{0}})
	assert.Zero(t, s.Len(), "a whole partition starts from nothing")
}

// A calendar quota's replica is never refused for the share: a promotion
// must find the month's count. It takes its place first, the sliding
// states replicated longest ago are refused in its stead.
func TestStoreKeepsCalendarStatesPastItsShare(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := replica.NewMetrics(reg)
	require.NoError(t, err)
	s := replica.NewStore(1, 2, 3, m, nil)
	month, err := limiter.NewCalendar(limiter.CalendarMonth, "")
	require.NoError(t, err)
	quota := func(key string, curr int64) limiter.KeyState {
		return limiter.KeyState{Key: key, Algorithm: limiter.SlidingWindowCounter, Calendar: month, WindowID: t0 - t0%1000, Curr: curr}
	}
	sliding := limiter.KeyState{Key: "s", Window: time.Second, Algorithm: limiter.SlidingWindowLog, Log: []int64{t0}}
	s.Apply("n1", peer.Replication{States: []limiter.KeyState{sliding, quota("a", 1), quota("b", 2), quota("c", 3)}})
	got, _ := s.Take(0)
	keys := map[string]int64{}
	for _, ks := range got {
		keys[ks.Key] = ks.Curr
	}
	assert.Equal(t, map[string]int64{"a": 1, "b": 2, "c": 3}, keys, "every quota, past a share of 2")
	assert.Equal(t, 1.0, metrictest.Value(t, reg, "peerlimit_replica_refused_total"), "the sliding state, replicated first")
}

// However many rounds a backup receives, it holds one state per key, the
// last it received, and a bounded list of what it received since its
// last compaction.
func TestStoreKeepsTheLastStateOfEachKey(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := replica.NewMetrics(reg)
	require.NoError(t, err)
	s := replica.NewStore(1, 1<<20, 100, m, nil)
	keys := []string{"a", "b", "c"}
	maxHeld := 0.0
	for round := int64(1); round <= 1000; round++ {
		r := peer.Replication{}
		for _, k := range keys {
			r.States = append(r.States, limiter.KeyState{Key: k, Window: time.Minute, WindowID: t0 / 60_000, Curr: round})
		}
		require.Equal(t, len(keys), s.Apply("n1", r).Kept)
		maxHeld = max(maxHeld, metrictest.Value(t, reg, "peerlimit_replica_keys"))
	}
	assert.LessOrEqual(t, maxHeld, float64(2*len(keys)+64), "compacted as it grows")
	assert.Equal(t, len(keys), s.Len())
	assert.EqualValues(t, len(keys), metrictest.Value(t, reg, "peerlimit_replica_keys"), "exact once compacted")
	got, _ := s.Take(0)
	require.Len(t, got, len(keys))
	for i, k := range keys {
		assert.Equal(t, k, got[i].Key)
		assert.EqualValues(t, 1000, got[i].Curr, "%s: its last state", k)
	}
}

// A backup says which partitions it holds no whole copy of: changes to
// a partition it never had whole, restored from its disk (Stale), or
// taken (promoted); a whole copy, and the changes after it, are synced.
func TestStoreSaysWhichPartitionsItHoldsNoWholeCopyOf(t *testing.T) {
	s := replica.NewStore(4, 100, 100, nil, nil)
	state := func(key string, curr int64) limiter.KeyState {
		return limiter.KeyState{Key: key, Window: time.Minute, WindowID: t0 / 60_000, Curr: curr}
	}
	k := "a"
	p := partition.Of(k, 4)
	changes := peer.Replication{States: []limiter.KeyState{state(k, 1)}, Boot: "b1"}

	assert.Equal(t, []int{p}, s.Apply("n1", changes).Unsynced, "changes alone")
	assert.Equal(t, []int{p}, s.Apply("n1", changes).Unsynced, "still no whole copy")
	assert.Empty(t, s.Apply("n1", peer.Replication{Whole: []int{p}, States: []limiter.KeyState{state(k, 2)}, Boot: "b1"}).Unsynced)
	assert.Empty(t, s.Apply("n1", changes).Unsynced, "changes after a whole copy")
	assert.Equal(t, []int{p}, s.Apply("n2", changes).Unsynced, "another sender's changes")

	s.Apply("n1", peer.Replication{Whole: []int{p}, States: []limiter.KeyState{state(k, 3)}, Boot: "b1"})
	s.Stale()
	assert.Equal(t, []int{p}, s.Apply("n1", changes).Unsynced, "restored from a disk")
	assert.Equal(t, replica.Origin{ID: "n1", Boot: "b1"}, s.Origin(p))

	s.Apply("n1", peer.Replication{Whole: []int{p}, Boot: "b1"})
	s.Apply("n1", changes)
	_, from := s.Take(p)
	assert.Equal(t, replica.Origin{ID: "n1", Boot: "b1"}, from, "taken with the boot it is of")
	assert.Equal(t, []int{p}, s.Apply("n1", changes).Unsynced, "taken")
}

// sameOwnerAndPartition returns another key of key's partition.
func sameOwnerAndPartition(t *testing.T, c *cluster, key string) string {
	t.Helper()
	for i := range 100_000 {
		if k := fmt.Sprint("s:", i); c.Ring().Partition(k) == c.Ring().Partition(key) {
			return k
		}
	}
	t.Fatalf("no key in %s's partition", key)
	return ""
}

// A backup that lost what it held gets it whole again at the owner's
// next round, not only the changes that follow: one that restarted says
// so by its boot (every partition it backs goes whole), one that
// promoted a partition, by naming it when its changes come (that one).
func TestABackupWithoutAWholeCopyGetsItAtTheNextRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, "n1", "n2", "n3")
		owner := c.members["n1"]
		a := logReq(c.key(t, "n1", "a"), 10)
		b := logReq(c.keyWith(t, "n1", c.heirOf(a.Key), "b"), 10)
		admit(t, owner, a, 2)
		admit(t, owner, b, 3)
		require.Zero(t, owner.sender.Round(context.Background()))
		id := c.heirOf(a.Key)

		c.members[id] = c.start(t, id) // restarted, empty
		admit(t, owner, a, 1)
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.Zero(t, replicated(t, c, b), "b did not change, and the backup has nothing of it")
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.EqualValues(t, 3, replicated(t, c, a), "sent whole, the round after the backup's new boot")
		assert.EqualValues(t, 3, replicated(t, c, b), "every partition it backs")

		p := partition.Of(a.Key, partition.DefaultCount)
		a2 := logReq(sameOwnerAndPartition(t, c, a.Key), 10)
		admit(t, owner, a2, 2)
		require.Zero(t, owner.sender.Round(context.Background()))
		c.members[id].replicas.Take(p) // promoted: gone from the replicas
		admit(t, owner, a, 1)
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.EqualValues(t, 4, replicated(t, c, a), "a key's state goes whole when it changes")
		assert.Zero(t, replicated(t, c, a2), "its partition's other keys do not")
		require.Zero(t, owner.sender.Round(context.Background()))
		assert.EqualValues(t, 2, replicated(t, c, a2), "until the partition goes whole, the round after the backup named it")
	})
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, replica.DefaultConfig().Validate())
	c := replica.DefaultConfig()
	c.Factor, c.Interval, c.MaxKeys = 2, 0, 0
	err := c.Validate()
	require.Error(t, err)
	for _, flag := range []string{"Factor", "Interval", "MaxKeys"} {
		assert.Contains(t, err.Error(), flag)
	}
}

// keyWith returns the first key "<prefix>:<i>" owned by owner whose heir
// is heir.
func (c *cluster) keyWith(t *testing.T, owner, heir, prefix string) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("%s:%d", prefix, i); c.Ring().Owner(k).ID == owner && c.heirOf(k) == heir {
			return k
		}
	}
	t.Fatalf("no key of %s's with heir %s", owner, heir)
	return ""
}

// A bridge: n1 and n2 cannot reach each other, n3 reaches both, and
// nobody is declared dead. n1's checks of n2's keys are relayed, by their
// heir or by n3 when the heir is n1 itself, and decided by n2: exact, not
// degraded, one decider.
func TestBridgeIsRelayedToTheOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, "n1", "n2", "n3")
		c.net.Partition([]string{"n1"}, []string{"n2"})
		for _, heir := range []string{"n1", "n3"} {
			req := logReq(c.keyWith(t, "n2", heir, "k"+heir), 4)
			assert.Equal(t, 2, admit(t, c.members["n2"], req, 2))
			for i, want := range []bool{true, true, false} {
				res := c.members["n1"].svc.Check(context.Background(), req)
				require.NoError(t, res.Err)
				assert.Equal(t, want, res.Decision.Allowed, "heir %s, check %d", heir, i)
				assert.Equal(t, "n2", res.Owner, "heir %s: the owner decided", heir)
				assert.False(t, res.Degraded, "heir %s: exact", heir)
			}
			assert.EqualValues(t, 4, held(t, c, c.members["n2"], req))
			assert.Zero(t, held(t, c, c.members["n1"], req)+held(t, c, c.members["n3"], req), "nobody else decided")
		}
	})
}
