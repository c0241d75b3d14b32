package ownership

import (
	"maps"
	"slices"
	"time"

	"github.com/peerlimit/peerlimit/ring"
)

// waits is the account of partitions this node has just come to own and
// whose state other members may still hold: from a ring change until every
// member that may hold some has said it holds nothing it has not handed
// over (HandoffDone), or Config.MaxWait has passed. Meanwhile this node
// would decide their keys from less than they hold: its view sends them
// to the member that decided them while it was out of the ring, or makes
// them wait, or marks their answers degraded (View).
type waits struct {
	// waiting: partition → the members that have not said done since
	// this node came to own it.
	waiting map[int]map[string]bool
	// done: member → the partitions it last said it holds nothing of (a
	// HandoffDone can arrive before this node's own ring change).
	done  map[string][]int
	until time.Time // when waiting is given up
}

func newWaits() waits {
	return waits{waiting: map[int]map[string]bool{}, done: map[string][]int{}}
}

// expect notes a ring change to now, at t. The partitions this node owns
// in now and did not before (gained) wait for every other member of now,
// and for the members that left it gracefully (leaving: they hand their
// partitions off as they go). Every partition it owns waits for the
// members added to the ring (a member back from a partition, or
// restarted, may have decided this node's keys meanwhile). Partitions it
// no longer owns, and members in neither now nor leaving, are not waited
// for any more.
func (w *waits) expect(self string, now *ring.Ring, gained []int, added, leaving []string, t time.Time, maxWait time.Duration) {
	members := map[string]bool{}
	for _, m := range now.Members() {
		if m.ID != self {
			members[m.ID] = true
		}
	}
	for _, id := range leaving {
		members[id] = true
	}
	w.forgetOutside(self, now, members)
	wait := func(part int, id string) {
		if id == self || !members[id] || slices.Contains(w.done[id], part) {
			return
		}
		if w.waiting[part] == nil {
			w.waiting[part] = map[string]bool{}
		}
		w.waiting[part][id] = true
	}
	for _, part := range gained {
		for _, id := range slices.Sorted(maps.Keys(members)) {
			wait(part, id)
		}
	}
	if len(added) > 0 {
		for part := range now.PartitionCount() {
			if now.PartitionOwner(part).ID == self {
				for _, id := range added {
					wait(part, id)
				}
			}
		}
	}
	w.prune()
	if len(gained) > 0 || len(added) > 0 {
		w.until = t.Add(maxWait)
	}
}

// forgetOutside drops what members outside members said, and waits for
// them or for partitions this node no longer owns in now. What a member
// said before it dropped out of the ring is stale once it is back (a
// heal, a restart): it has decided this node's keys since.
func (w *waits) forgetOutside(self string, now *ring.Ring, members map[string]bool) {
	for id := range w.done {
		if !members[id] {
			delete(w.done, id)
		}
	}
	for part, from := range w.waiting {
		if now.PartitionOwner(part).ID != self {
			delete(w.waiting, part)
			continue
		}
		for id := range from {
			if !members[id] {
				delete(from, id)
			}
		}
	}
}

// markDone notes that origin holds nothing of partitions it has not
// handed this node over, and reports whether partitions stopped waiting.
func (w *waits) markDone(origin string, partitions []int) bool {
	w.done[origin] = slices.Clone(partitions)
	before := w.count()
	for _, part := range partitions {
		delete(w.waiting[part], origin)
	}
	w.prune()
	return w.count() != before
}

// giveUp ends every wait once t has reached until, and returns how many
// partitions were still waiting.
func (w *waits) giveUp(t time.Time) int {
	if len(w.waiting) == 0 || t.Before(w.until) {
		return 0
	}
	n := len(w.waiting)
	clear(w.waiting)
	return n
}

// prune drops the partitions nobody is waited for any more.
func (w *waits) prune() {
	for part, from := range w.waiting {
		if len(from) == 0 {
			delete(w.waiting, part)
		}
	}
}

// count is how many partitions wait.
func (w *waits) count() int { return len(w.waiting) }

// deadline is when the waits are given up, if any partition waits.
func (w *waits) deadline() (time.Time, bool) { return w.until, len(w.waiting) > 0 }

// partitions returns the waiting partitions as a table by partition, nil
// when none waits: what a View reads.
func (w *waits) partitions(count int) []bool {
	if len(w.waiting) == 0 {
		return nil
	}
	out := make([]bool, count)
	for part := range w.waiting {
		out[part] = true
	}
	return out
}
