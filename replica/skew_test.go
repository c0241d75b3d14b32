package replica_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/internal/testkit/windowed"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/replica"
)

// An owner whose clock is 5 s behind its heir's (W = 10 s, L = 10)
// admits the limit of a key, its hits spread over 7 s, replicates it,
// and fails; its heir promotes the replica and decides the key for 25 s.
// Counted on the real clock (the heir's), the cluster admits no more
// than L in any window: any sliding one for the log, any fixed one for
// the counter (whose sliding windows may hold up to 2× by design).
//
// Before replication carried its sender's clock, the replica landed 5 s
// early and the heir admitted the owner's last hits again.
func TestPromotionOfAReplicaFromAnOwnerBehindAdmitsNoMoreThanTheLimit(t *testing.T) {
	const (
		w     = 10 * time.Second
		limit = 10
	)
	for _, alg := range []limiter.Algorithm{limiter.SlidingWindowLog, limiter.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, "n1", "n2", "n3")
				without := testring.New(t, "n2", "n3")
				key := ""
				for i := 0; key == ""; i++ {
					if k := c.keyWith(t, "n1", "n2", fmt.Sprint("k", i)); without.Owner(k).ID == "n2" {
						key = k // the heir owns it once n1 is gone: no handoff to wait for
					}
				}
				owner, heir := c.members["n1"], c.members["n2"]
				owner.offset = -5 * time.Second
				c.clk.Advance(5 * time.Second)
				start := c.clk.Now()
				require.Zero(t, owner.now().UnixMilli()%w.Milliseconds(), "the owner's window starts at start")
				r := limiter.Request{Key: key, Limit: limit, Window: w, Algorithm: alg, Hits: 1}

				var admitted []time.Time // on the real clock
				for i := range limit {
					c.clk.Set(start.Add(time.Duration(i) * 700 * time.Millisecond))
					require.Equal(t, 1, admit(t, owner, r, 1))
					admitted = append(admitted, c.clk.Now())
				}
				c.clk.Set(start.Add(7 * time.Second))
				require.Zero(t, owner.sender.Round(context.Background()))

				old := c.Ring()
				c.ring.Store(without)
				c.net.Remove("n1")
				heir.failover.Reconcile(old, without, map[string]replica.Member{"n1": {Failed: true}})
				require.Len(t, heir.logs.Find("took over a partition's replica"), 1)

				for end := c.clk.Now().Add(25 * time.Second); c.clk.Now().Before(end); c.clk.Advance(100 * time.Millisecond) {
					res := heir.svc.Check(context.Background(), r)
					require.NoError(t, res.Err)
					require.Equal(t, "n2", res.Owner)
					if res.Decision.Allowed {
						admitted = append(admitted, c.clk.Now())
					}
				}
				most, from := windowed.MostInAWindow(admitted, w, alg == limiter.SlidingWindowLog)
				assert.LessOrEqual(t, most, limit, "%d admitted in the window from %s (real clock), over the limit", most, from.Sub(start))
				assert.Greater(t, len(admitted), 2*limit, "the heir admits again once the window has passed")
			})
		})
	}
}

// A backup keeps what it receives on its own clock: an owner 5 s behind
// replicates a log, and the backup's replica store, and so its journal
// (what persistence writes, and a restart applies as it is), holds the
// entries 5 s later than the owner stamped them, with no stamp left to
// rebase by a second time.
func TestABackupKeepsAndJournalsReplicasOnItsOwnClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, "n1", "n2", "n3")
		owner := c.members["n1"]
		owner.offset = -5 * time.Second
		r := logReq(c.keyWith(t, "n1", "n2", "k"), 10)
		require.Equal(t, 2, admit(t, owner, r, 2))
		require.Zero(t, owner.sender.Round(context.Background()))

		applied := c.members["n2"].journal.replications()
		require.Len(t, applied, 1)
		assert.True(t, applied[0].Sent.IsZero(), "no stamp left: %v", applied[0].Sent)
		require.Len(t, applied[0].States, 1)
		at := c.clk.Now().UnixMilli()
		assert.Equal(t, []int64{at, at}, applied[0].States[0].Log, "on the backup's clock, not the owner's %d", at-5_000)
		owners := owner.store.Transfer().SnapshotPartition(owner.store.Transfer().PartitionOf(r.Key), owner.now())
		require.Len(t, owners, 1)
		assert.Equal(t, []int64{at - 5_000, at - 5_000}, owners[0].Log, "the owner's own copy is left on its clock")
	})
}
