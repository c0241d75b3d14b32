package replica_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/ring"
)

// The failover of replica.Failover, on memnet: the heir promotes an
// unreachable owner's replica and decides from it; when that owner hands
// the same keys off later, whichever comes first, each hit counts once.

// leaverSender is a handoff Sender for m whose ring is ring: a member
// that leaves hands off by a ring without itself before the others' rings
// drop it.
func leaverSender(t *testing.T, c *cluster, m *member, r *ring.Ring) *handoff.Sender {
	t.Helper()
	s, err := handoff.New(handoff.Deps{Self: m.id, Store: m.store.Transfer(), Peers: m.peers, Ring: func() *ring.Ring { return r },
		Now: c.clk.Now, Logger: slog.New(testlog.NewCapture()), Replicas: m.failover})
	require.NoError(t, err)
	return s
}

// replicatedKey starts n1, n2 and n3, and has n1 admit 3 hits of a key
// whose heir is n2 and replicate them there.
func replicatedKey(t *testing.T) (c *cluster, owner, heir *member, req limiter.Request) {
	t.Helper()
	c = newCluster(t, "n1", "n2", "n3")
	req = logReq(c.keyWith(t, "n1", "n2", "k"), 10)
	owner, heir = c.members["n1"], c.members["n2"]
	require.Equal(t, 3, admit(t, owner, req, 3))
	require.Zero(t, owner.sender.Round(context.Background()))
	return c, owner, heir, req
}

// handoff is m's handoff Sender, by the cluster's ring.
func (m *member) handoff(t *testing.T, c *cluster) *handoff.Sender {
	t.Helper()
	s, err := handoff.New(handoff.Deps{Self: m.id, Store: m.store.Transfer(), Peers: m.peers, Ring: c.Ring, Now: c.clk.Now,
		Logger: slog.New(testlog.NewCapture()), Replicas: m.failover})
	require.NoError(t, err)
	return s
}

// An owner cut off from everyone: its heir promotes its replica at the
// first check it cannot forward, and decides from the owner's count.
// When the link heals and the owner, leaving, hands the key off to its
// heir, the promoted hits are subtracted first: counted once.
func TestPromotionThenHandoffCountOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, owner, heir, req := replicatedKey(t)
		c.net.Partition([]string{"n1"}, []string{"n2", "n3"})

		res := heir.svc.Check(context.Background(), req)
		require.NoError(t, res.Err)
		assert.True(t, res.Degraded, "decided by the heir")
		assert.EqualValues(t, 4, held(t, c, heir, req), "the owner's 3, promoted, and this one")
		assert.Len(t, heir.logs.Find("took over a partition's replica"), 1)

		c.net.Heal()
		sender := leaverSender(t, c, owner, testring.New(t, "n2", "n3"))
		require.Zero(t, sender.Run(context.Background()), "handed off")
		assert.EqualValues(t, 4, held(t, c, heir, req), "the owner's 3 once, not twice")
		assert.Zero(t, held(t, c, owner, req), "nothing left behind")
	})
}

// The same in the other order: the leaving owner hands its key to the
// heir, whose ring still names the owner; a check there that cannot reach
// the owner must not promote the replica on top of the handoff, which
// superseded it.
func TestHandoffThenPromotionCountOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, owner, heir, req := replicatedKey(t)
		require.Positive(t, heir.replicas.Len())

		sender := leaverSender(t, c, owner, testring.New(t, "n2", "n3"))
		require.Zero(t, sender.Run(context.Background()))
		assert.Zero(t, heir.replicas.Len(), "the handoff superseded the replica")
		c.net.Remove("n1") // gone; the others' ring still names it

		res := heir.svc.Check(context.Background(), req)
		require.NoError(t, res.Err)
		assert.EqualValues(t, 4, held(t, c, heir, req), "the 3 handed off, and this one")
		assert.Empty(t, heir.logs.Find("took over a partition's replica"), "nothing left to promote")
	})
}

// A ring change that drops a failed owner has its heir promote the
// owner's replica; one that drops a member that left has it dropped (the
// member handed its state off itself).
func TestReconcilePromotesOnlyAFailedOwnersReplica(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failed   bool
		wantHeld int64
	}{{"failed", true, 3}, {"left", false, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, owner, heir, req := replicatedKey(t)

				old, without := c.Ring(), testring.New(t, "n2", "n3")
				c.ring.Store(without)
				heir.failover.Reconcile(old, without, map[string]replica.Member{"n1": {Failed: tc.failed}})
				assert.Equal(t, tc.wantHeld, held(t, c, heir, req))
				if tc.failed {
					assert.Zero(t, heir.replicas.Len(), "promoted")
					return
				}
				// A leaver hands its state to the heir itself: the replica
				// is kept until that handoff comes, and dropped by it (it
				// is the leaver's counts, should the handoff never come).
				assert.Equal(t, 1, heir.replicas.Len(), "kept for the handoff")
				require.Zero(t, leaverSender(t, c, owner, without).Run(context.Background()))
				assert.Zero(t, heir.replicas.Len(), "dropped by the handoff")
				assert.EqualValues(t, 3, held(t, c, heir, req), "the handoff's, once")
			})
		})
	}
}

// When every member leaves at once (a stop of the whole cluster) the
// owner cannot hand its keys off (its heir is leaving too) and keeps
// them on its disk; the heir keeps its replica on its own, the leaver's
// counts, which it promotes should it be back before the owner
// (TakeOverAbsent), and gives back to an owner back from its disk.
func TestAStopOfEveryMemberKeepsTheReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, owner, heir, req := replicatedKey(t)
		all, withoutOwner, alone3 := c.Ring(), testring.New(t, "n2", "n3"), testring.New(t, "n3")
		members := map[string]replica.Member{"n1": {Boot: owner.boot}, "n2": {}, "n3": {}}

		c.ring.Store(withoutOwner)
		heir.failover.Reconcile(all, withoutOwner, members)    // n1 left
		heir.failover.Reconcile(withoutOwner, alone3, members) // n2 leaves too: its ring without itself
		assert.Equal(t, 1, heir.replicas.Len(), "kept through both leaves")

		heir.failover.TakeOverAbsent(testring.New(t, "n2")) // back first, alone
		assert.EqualValues(t, 3, held(t, c, heir, req), "decided from the owner's counts, not from nothing")
	})
}

// A member that gets a leave before the leaver's "leaving" metadata takes
// it for a failure, and promotes the leaver's replicas; the leaver then
// hands off the same keys. Counted once: the handoff supersedes what was
// promoted. (TestGracefulLeaveHandsCountsToHeirs counted such keys twice,
// about one run in ten.)
func TestALeaveTakenForAFailureCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, owner, heir, req := replicatedKey(t)

		old, without := c.Ring(), testring.New(t, "n2", "n3")
		c.ring.Store(without)
		heir.failover.Reconcile(old, without, map[string]replica.Member{"n1": {Failed: true}}) // a leave, misread
		require.EqualValues(t, 3, held(t, c, heir, req), "promoted")

		require.Zero(t, leaverSender(t, c, owner, without).Run(context.Background()))
		assert.EqualValues(t, 3, held(t, c, heir, req), "the handoff superseded the promotion: once, not twice")
	})
}

// A member presumed dead that comes back (restarted, empty) is in the
// ring again: what it hands off from then on, it decided since, and
// nothing is subtracted from it; and what was promoted from its replica
// goes back to it whole.
func TestAReturningMemberIsNotPresumedDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, owner, heir, req := replicatedKey(t)

		all, without := c.Ring(), testring.New(t, "n2", "n3")
		c.ring.Store(without)
		heir.failover.Reconcile(all, without, map[string]replica.Member{"n1": {Failed: true}}) // it did die
		require.EqualValues(t, 3, held(t, c, heir, req))
		owner.store.Admin().Delete(c.clk.Now(), req.Key, req.Window, req.Algorithm) // and restarts empty

		c.ring.Store(all)
		heir.failover.Reconcile(without, all, nil)
		require.Zero(t, heir.handoff(t, c).Run(context.Background()), "the heir hands the key back")
		assert.EqualValues(t, 3, held(t, c, owner, req), "with its count")
	})
}

// An owner whose clock runs one or two windows ahead of its heir's
// replicates a counter the heir, holding 40 hits of its own, promotes.
// When the owner turns out alive (its handoff supersedes the promotion, or
// the heir hands the key back), the heir takes back what it merged, in the
// window it merged in or a window later, and no more: its own 40 count as
// in a store that never held the owner's.
func TestTakingBackAPromotionFromAnOwnerAheadKeepsTheHeirsHits(t *testing.T) {
	const w = time.Minute
	for _, ahead := range []int64{1, 2} {
		for _, back := range []string{"Supersede", "ReturnPromoted"} {
			for _, later := range []time.Duration{0, w} {
				t.Run(fmt.Sprintf("%d ahead, %s %v later", ahead, back, later), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						c := newCluster(t, "n1", "n2", "n3")
						heir := c.members["n2"]
						req := limiter.Request{Key: c.keyWith(t, "n1", "n2", "k"), Limit: 1000, Window: w, Hits: 40}
						own, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
						require.NoError(t, err)
						for _, s := range []*limiter.Store{heir.store, own} {
							_, err := s.Check(c.clk.Now(), req)
							require.NoError(t, err)
						}
						owners := limiter.KeyState{Key: req.Key, Window: w, Algorithm: req.Algorithm,
							WindowID: c.clk.Now().UnixMilli()/w.Milliseconds() + ahead, Prev: 50, Curr: 5}
						heir.replicas.Apply("n1", peer.Replication{States: []limiter.KeyState{owners}})
						heir.failover.Promote(req.Key)
						require.Zero(t, heir.replicas.Len(), "promoted")

						c.clk.Advance(later)
						if back == "Supersede" {
							heir.failover.Supersede("n1", []limiter.KeyState{owners})
						} else {
							heir.failover.ReturnPromoted("n1")
						}
						req.Hits = 0
						d, err := own.Check(c.clk.Now(), req)
						require.NoError(t, err)
						assert.Equal(t, d.CurrentCount, held(t, c, heir, req), "the heir's own hits, no more, no fewer")
					})
				})
			}
		}
	}
}

// The heir of an owner it cannot reach, whose ring still names the owner
// (agreement keeps a member in the ring while the others are asked), runs
// a handoff round: it would hand the owner what it holds of its
// partitions, and first drops what it promoted from the owner's replica.
// The owner cannot be reached, so nothing is handed over, and what was
// promoted must stay: else the heir decides from zero (kill and hot-kill,
// 1.80× in a full make chaos run).
func TestAHandoffThatCannotReachTheOwnerKeepsThePromotion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _, heir, req := replicatedKey(t)
		c.net.Partition([]string{"n1"}, []string{"n2", "n3"})
		res := heir.svc.Check(context.Background(), req)
		require.NoError(t, res.Err)
		require.EqualValues(t, 4, held(t, c, heir, req), "the owner's 3, promoted, and this one")

		assert.Positive(t, heir.handoff(t, c).Run(context.Background()), "the owner is out of reach")
		assert.EqualValues(t, 4, held(t, c, heir, req), "still the owner's 3 and this one")
	})
}

// What becomes of what an heir promoted when the member it promoted from
// is back in the ring, by what the member holds then: its boot says
// whether it restarted, Restored whether it came back from its disk.
// Holding the promoted hits, it must not be handed them again; holding
// nothing, it must be, or they are lost.
func TestAReturningMemberGetsBackWhatItDoesNotHold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		back      replica.Member // its boot: empty, the one it replicated under
		ownerKeep bool           // the owner still holds its 3 hits when it is back
		wantOwner int64          // what the owner holds after the heir's handoff
	}{
		{"healed, same boot", replica.Member{}, true, 3},
		{"restarted from its disk", replica.Member{Boot: "b2", Restored: true}, true, 3},
		{"restarted with nothing", replica.Member{Boot: "b2"}, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, owner, heir, req := replicatedKey(t)
				if tc.back.Boot == "" {
					tc.back.Boot = owner.boot
				}
				all, without := c.Ring(), testring.New(t, "n2", "n3")
				heir.failover.Reconcile(all, all, map[string]replica.Member{"n1": {Boot: owner.boot}})
				c.ring.Store(without)
				heir.failover.Reconcile(all, without, map[string]replica.Member{"n1": {Failed: true, Boot: owner.boot}})
				require.EqualValues(t, 3, held(t, c, heir, req), "promoted")
				if !tc.ownerKeep {
					owner.store.Admin().Delete(c.clk.Now(), req.Key, req.Window, req.Algorithm)
				}

				c.ring.Store(all)
				heir.failover.Reconcile(without, all, map[string]replica.Member{"n1": tc.back})
				require.Zero(t, heir.handoff(t, c).Run(context.Background()), "the heir hands the key back")
				assert.Equal(t, tc.wantOwner, held(t, c, owner, req), "once: never twice, never none")
				assert.Zero(t, held(t, c, heir, req))
			})
		})
	}
}

// A promotion's book lasts as long as what it holds counts: a member back
// from its disk a while later (hours, for a day's quota) still finds its
// hits taken back rather than handed to it twice; once they count nothing
// any more, the book is gone.
func TestAPromotionsBookLastsAsLongAsItsHits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, "n1", "n2", "n3")
		owner, heir := c.members["n1"], c.members["n2"]
		req := limiter.Request{Key: c.keyWith(t, "n1", "n2", "k"), Limit: 100, Window: 24 * time.Hour, Algorithm: limiter.SlidingWindowLog, Hits: 1}
		require.Equal(t, 3, admit(t, owner, req, 3))
		require.Zero(t, owner.sender.Round(context.Background()))
		all, without := c.Ring(), testring.New(t, "n2", "n3")
		heir.failover.Reconcile(all, all, map[string]replica.Member{"n1": {Boot: "b1"}})
		c.ring.Store(without)
		heir.failover.Reconcile(all, without, map[string]replica.Member{"n1": {Failed: true, Boot: "b1"}})
		require.EqualValues(t, 3, held(t, c, heir, req))

		c.clk.Advance(2 * time.Hour)
		heir.failover.Sweep(c.clk.Now())
		c.ring.Store(all)
		heir.failover.Reconcile(without, all, map[string]replica.Member{"n1": {Boot: "b2", Restored: true}})
		require.Zero(t, heir.handoff(t, c).Run(context.Background()))
		assert.EqualValues(t, 3, held(t, c, owner, req), "two hours later, still once")
	})
}

// A node back from its disk before a member whose replicas it restored
// (a restart of the whole cluster, one node at a time) promotes them
// (TakeOverAbsent): it decides the member's keys from their counts, not
// from nothing. When the member is back, what was promoted goes to it
// only if it does not hold it already: once, never twice, never none.
func TestReplicasOfAMemberNotBackArePromoted(t *testing.T) {
	for _, tc := range []struct {
		name      string
		back      replica.Member // its boot: empty, the one it replicated under
		ownerKeep bool
	}{
		{"it never stopped", replica.Member{}, true},
		{"restarted from its disk", replica.Member{Boot: "b2", Restored: true}, true},
		{"restarted with nothing", replica.Member{Boot: "b2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, owner, heir, req := replicatedKey(t)
				if tc.back.Boot == "" {
					tc.back.Boot = owner.boot
				}
				all, without := c.Ring(), testring.New(t, "n2", "n3")
				c.ring.Store(without)
				heir.failover.TakeOverAbsent(without)
				require.EqualValues(t, 3, held(t, c, heir, req), "promoted")
				heir.failover.Reconcile(without, without, map[string]replica.Member{"n2": {}, "n3": {}})
				require.EqualValues(t, 3, held(t, c, heir, req), "n1 not seen: kept")
				if !tc.ownerKeep {
					owner.store.Admin().Delete(c.clk.Now(), req.Key, req.Window, req.Algorithm)
				}

				c.ring.Store(all)
				heir.failover.Reconcile(without, all, map[string]replica.Member{"n1": tc.back, "n2": {}, "n3": {}})
				require.Zero(t, heir.handoff(t, c).Run(context.Background()), "the heir hands the key back")
				assert.EqualValues(t, 3, held(t, c, owner, req), "once: never twice, never none")
				assert.Zero(t, held(t, c, heir, req))
			})
		})
	}
}
