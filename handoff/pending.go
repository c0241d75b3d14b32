package handoff

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/ring"
)

// pending is the receiving side's account of partitions this node has
// just come to own and whose state other members may still hold: from a
// ring change until every other member has said it holds nothing of them
// it has not handed over (HandoffDone), or MaxWait has passed. Until then
// this node decides their keys from less than they hold, and says so
// (Receiver.Pending: answers marked degraded).
type pending struct {
	mu sync.Mutex
	// waiting: partition → the members that have not said done since
	// this node came to own it.
	waiting map[int]map[string]bool
	// done: member → the partitions it last said it holds nothing of
	// (a HandoffDone can arrive before this node's own ring change).
	done  map[string][]int
	until time.Time // with its monotonic reading: when waiting is given up
	// settled is closed when waiting empties (or is given up); a new one
	// is made when it fills again.
	settled chan struct{}
	// count is len(waiting), read without the lock: 0 is the common case.
	count atomic.Int32
}

// Expect notes a ring change: the partitions this node owns in now and
// did not before (gained) wait for every other member of now, and for the
// members that left it gracefully (leaving: they hand their partitions
// off as they go), to say it has handed them over; every partition it
// owns waits for the members added to the ring (a member back from a
// partition, or restarted, may have decided this node's keys meanwhile).
// Partitions it no longer owns, and members in neither now nor leaving,
// are not waited for any more. A partition waits at most maxWait.
func (r *Receiver) Expect(now *ring.Ring, gained []int, added, leaving []string) {
	p := &r.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	members := map[string]bool{}
	for _, m := range now.Members() {
		if m.ID != r.self {
			members[m.ID] = true
		}
	}
	for _, id := range leaving {
		members[id] = true
	}
	// What a member said before it dropped out of the ring is stale once
	// it is back (a heal, a restart): it has decided this node's keys
	// since.
	for id := range p.done {
		if !members[id] {
			delete(p.done, id)
		}
	}
	for part, from := range p.waiting {
		if now.PartitionOwner(part).ID != r.self {
			delete(p.waiting, part)
			continue
		}
		for id := range from {
			if !members[id] {
				delete(from, id)
			}
		}
	}
	wait := func(part int, id string) {
		if id == r.self || !members[id] || slices.Contains(p.done[id], part) {
			return
		}
		if p.waiting[part] == nil {
			p.waiting[part] = map[string]bool{}
		}
		p.waiting[part][id] = true
	}
	for _, part := range gained {
		for id := range members {
			wait(part, id)
		}
	}
	if len(added) > 0 {
		for part := range now.PartitionCount() {
			if now.PartitionOwner(part).ID == r.self {
				for _, id := range added {
					wait(part, id)
				}
			}
		}
	}
	p.prune()
	if len(gained) > 0 || len(added) > 0 {
		p.until = time.Now().Add(r.maxWait)
	}
}

// Done notes that origin holds nothing of partitions it has not handed
// this node over.
func (r *Receiver) Done(origin string, partitions []int) {
	p := &r.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done[origin] = slices.Clone(partitions)
	for _, part := range partitions {
		delete(p.waiting[part], origin)
	}
	p.prune()
}

// prune drops the partitions nobody is waited for any more, and closes
// settled when none is left. Requires p.mu held.
func (p *pending) prune() {
	for part, from := range p.waiting {
		if len(from) == 0 {
			delete(p.waiting, part)
		}
	}
	p.count.Store(int32(len(p.waiting)))
	switch {
	case len(p.waiting) > 0 && p.settled == nil:
		p.settled = make(chan struct{})
	case len(p.waiting) == 0 && p.settled != nil:
		close(p.settled)
		p.settled = nil
	}
}

// Settled returns a channel closed once no partition waits any more, or
// nil if none does: a check of a pending partition may wait on it for its
// state, for a moment, rather than be decided from less.
func (r *Receiver) Settled() <-chan struct{} {
	p := &r.pending
	if p.count.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settled
}

// Pending reports whether partition's state may still be on its way to
// this node: answers for its keys are then marked degraded. One atomic
// load when nothing is pending.
func (r *Receiver) Pending(partition int) bool {
	p := &r.pending
	if p.count.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !time.Now().Before(p.until) {
		if len(p.waiting) > 0 {
			r.log.Warn("gave up waiting for members to say they handed over partitions; answering them undegraded", "partitions", len(p.waiting))
			clear(p.waiting)
			p.prune()
		}
		return false
	}
	_, ok := p.waiting[partition]
	return ok
}

// Waiting returns how many partitions still wait for a handoff.
func (r *Receiver) Waiting() int { return int(r.pending.count.Load()) }
