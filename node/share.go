package node

import (
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/route"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/ring"
)

// view is this node's view of the cluster as the request path reads it
// (route.Cluster): owners, heirs and members from the ring, and the share
// --fallback share holds this node to, each swapped atomically by the
// membership notifier and read with one load.
type view struct {
	route.Cluster // over ring
	ring          ring.Holder
	// share is live members << 32 | known ones (live, and failed within
	// Config.ShareFor), refreshed on every membership change and every
	// sweep (failures age out).
	share atomic.Uint64
}

func (v *view) init(self *ring.Ring) {
	v.ring.Store(self)
	v.share.Store(1<<32 | 1)
	v.Cluster = route.RingCluster(v.ring.Load)
}

// Ring is the current ring.
func (v *view) Ring() *ring.Ring { return v.ring.Load() }

// Share implements route.Cluster.
func (v *view) Share() (live, known int) {
	s := v.share.Load()
	return int(s >> 32), int(s & 0xffffffff)
}

// refreshShare recounts the members for the share.
func (n *Node) refreshShare() {
	c := n.cluster.Load()
	if c == nil {
		return // still joining: this node alone, the initial (1, 1)
	}
	now := time.Now()
	live, failed := 0, 0
	for _, m := range c.View() {
		switch {
		case m.State == cluster.StateAlive:
			live++
		case m.State == cluster.StateFailed && now.Sub(m.Since) < n.cfg.ShareFor:
			failed++
		}
	}
	live = max(live, 1)
	n.view.share.Store(uint64(live)<<32 | uint64(live+failed))
}
