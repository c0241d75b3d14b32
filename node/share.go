package node

import (
	"time"

	"github.com/peerlimit/peerlimit/cluster"
)

// The share --fallback share holds this node to: live members over
// known ones (live, and failed within Config.ShareFor). Kept packed in
// one atomic (live << 32 | known), refreshed on every membership change
// and every sweep (failures age out), so that a check reads it with one
// load.

// share is route.Deps.Share.
func (n *Node) share() (live, known int) {
	v := n.shareView.Load()
	return int(v >> 32), int(v & 0xffffffff)
}

// refreshShare recounts the members for share.
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
	n.shareView.Store(uint64(live)<<32 | uint64(live+failed))
}
