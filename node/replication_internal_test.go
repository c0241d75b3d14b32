package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// A handoff from a member and the promotion of the replica that member
// sent count its hits once, in either order: the promotion first is
// subtracted from the handoff (supersede); the handoff first drops the
// replica, which a check that could not reach the leaving member would
// otherwise promote on top of it. (Seen once under load:
// TestGracefulLeaveHandsCountsToHeirs counted a key twice.)
func TestHandoffAndReplicaPromotionCountOnce(t *testing.T) {
	n, clk := testNode(t, nil)
	now := clk.Now()
	for _, order := range []string{"handoff first", "promotion first"} {
		t.Run(order, func(t *testing.T) {
			key := "leaver-key:" + order
			p := n.store.PartitionOf(key)
			ks := limiter.KeyState{Key: key, Window: time.Hour, Algorithm: limiter.SlidingWindowCounter,
				WindowID: now.UnixMilli() / time.Hour.Milliseconds(), Curr: 3}
			n.repl.store.Apply("node-x", peer.Replication{Whole: []int{p}, States: []limiter.KeyState{ks}})
			handoff := func() {
				n.supersede("node-x", []limiter.KeyState{ks}) // what route.HandleHandoff does first
				_, errs := n.store.Merge(now, []limiter.KeyState{ks})
				require.Empty(t, errs)
			}
			if order == "handoff first" {
				handoff()
				n.promotePartition(p, "owner unreachable")
			} else {
				n.promotePartition(p, "owner unreachable")
				handoff()
			}
			d, err := n.store.Check(now, limiter.Request{Key: key, Limit: 10, Window: time.Hour, Hits: 0})
			require.NoError(t, err)
			assert.EqualValues(t, 3, d.CurrentCount, "counted once")
		})
	}
}
