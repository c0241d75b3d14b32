package limiter

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Concurrency limits. A concurrency limit of N slots, each held at most
// W, is a log of the times its slots were taken: a slot is an entry, in
// flight while it is in the log's window, so a slot never released frees
// itself W after it was taken, as a log entry leaves its window. OpAcquire
// is OpHold of one hit under a TTL of W, so OpRelease closes that hold,
// freeing the slot with the token's tag (below), and a retried release
// counts once.
// Being a log, the state is replicated, handed off, rebased and persisted
// as a log is: the replicas carry every slot's time, so a failover frees
// no slot early. The log's entries are what the limit counts, so it is
// exact on its owner under any concurrency.
//
// Its state is stored in the shard's logs under a window of its own,
// concurrencyWindow: negative as a calendar counter's, but past every
// calendar code (a uint32), so that neither a window log of the same key
// and window nor a calendar's change record can be taken for it.

// concurrencyBase offsets a concurrency limit's state window past every
// Calendar.stateWindow.
const concurrencyBase = 1 << 40

// concurrencyWindow is the state window of a concurrency limit whose
// slots last w ms.
func concurrencyWindow(w int64) int64 { return -(concurrencyBase + w) }

// concurrency reports whether k is a concurrency limit's.
func (k stateKey) concurrency() bool { return k.window <= -concurrencyBase }

// span is the window, in ms, of the log k names: a window log's, or how
// long a concurrency limit's slot lasts.
func (k stateKey) span() int64 {
	if k.concurrency() {
		return -k.window - concurrencyBase
	}
	return k.window
}

// logAlgorithm is the algorithm of the log k names.
func (k stateKey) logAlgorithm() Algorithm {
	if k.concurrency() {
		return Concurrency
	}
	return SlidingWindowLog
}

// Slot tags. A release must free exactly its own slot, wherever the slot
// travelled: a slot's time is rebased onto each new owner's clock (as a
// log entry's is, so that it frees itself at the right moment whatever
// the skew), and no longer equals its token's, and a release that took
// another slot near that time would free a slot still held when the
// token's own was never there (acquired on the other side of a
// partition, or before a reset): one more in flight, silently. So each
// slot carries a tag, 32 bits of its reservation's id, which its token
// holds too, and a release frees the slot with that tag, or none.

// slotTags are a concurrency limit's slots' tags, in its log's ring: tag
// j belongs to ring[j], and a slot not yet tagged (or from an older
// member, which sent none) has 0.
type slotTags struct{ ring []uint32 }

// slotTag is the tag of the slot a reservation of id holds.
func slotTag(id uint64) uint32 { return uint32(id^id>>32) | 1 } // never 0: 0 is untagged

// newLogFor returns an empty log for k: with tags for a concurrency limit.
func newLogFor(k stateKey) *logState {
	if k.concurrency() {
		return &logState{tags: &slotTags{}}
	}
	return new(logState)
}

// setNewestTag tags the newest slot, which the acquire that holds tag
// just pushed. Requires a log with tags and a slot in it.
func (s *logState) setNewestTag(tag uint32) {
	s.tags.ring[(s.head+s.n-1)%int32(len(s.ring))] = tag
}

// slots returns the slots after cutoff, oldest first: their times and
// their tags, without changing s.
func (s *logState) slots(cutoff int64) (times []int64, tags []uint32) {
	c := int32(len(s.ring))
	for i := int32(0); i < s.n; i++ {
		if t := s.at(i); t > cutoff {
			times = append(times, t)
			tags = append(tags, s.tags.ring[(s.head+i)%c])
		}
	}
	return times, tags
}

// fillSlots replaces s's slots with times (sorted) and their tags.
func (s *logState) fillSlots(times []int64, tags []uint32) {
	s.fill(times)
	s.tags = &slotTags{ring: slices.Clone(tags)}
}

// removeTag removes the slot tagged tag, if it is still in window w at
// now, and reports whether it did.
func (s *logState) removeTag(now, w int64, tag uint32) bool {
	if s.n == 0 {
		return false
	}
	now = max(now, s.newest())
	s.prune(now - w)
	c := int32(len(s.ring))
	for i := int32(0); i < s.n; i++ {
		if s.tags.ring[(s.head+i)%c] != tag {
			continue
		}
		for j := i + 1; j < s.n; j++ { // the newer slots move back over it
			s.ring[(s.head+j-1)%c] = s.ring[(s.head+j)%c]
			s.tags.ring[(s.head+j-1)%c] = s.tags.ring[(s.head+j)%c]
		}
		s.n--
		s.prune(now - w) // resets an empty ring, gives memory back
		return true
	}
	return false
}

// slot is one slot as a merge handles it.
type slot struct {
	at  int64
	tag uint32
}

// placeSlots returns ks's slots as this node keeps them at now (ms) for
// window w, as placeLog places a log's entries: sorted, none later than
// now, none left the window. A state from an older member has no tags:
// its slots are untagged (0).
func placeSlots(ks KeyState, now, w int64) []slot {
	out := make([]slot, 0, len(ks.Log))
	for i, t := range ks.Log {
		var tag uint32
		if i < len(ks.Tags) {
			tag = ks.Tags[i]
		}
		if t = min(t, now); t > now-w {
			out = append(out, slot{t, tag})
		}
	}
	slices.SortStableFunc(out, func(a, b slot) int { return cmp.Compare(a.at, b.at) })
	return out
}

// mergeSlots unites the slots of ks with those of k's log at now (ms), as
// mergeLog unites a log's entries, keeping each slot's tag. As there, a
// slot that arrives from two sources (a replica's copy and a handoff) is
// counted twice until one source's copy is forgotten (Forget of what was
// sent, or of what MergeAdded returned): each source's contribution must
// be taken back whole, so the union may not drop a duplicate (a slot
// counted twice is over-denial; one dropped, then forgotten with the
// other source's copy, would be a slot lost). It returns what it added.
// Requires sh.mu held.
func (t *Transfer) mergeSlots(sh *shard, k stateKey, now int64, ks KeyState) (KeyState, error) {
	if len(ks.Tags) != 0 && len(ks.Tags) != len(ks.Log) {
		return KeyState{}, &ArgumentError{"state", fmt.Sprintf("%d slot tags for %d slots", len(ks.Tags), len(ks.Log))}
	}
	in := placeSlots(ks, now, k.span())
	cur, ok := sh.logs[k]
	c0 := 0
	var united []slot
	if ok {
		n0, p0 := cur.n, len(cur.ring)
		cur.prune(now - k.span())
		sh.account(cur, n0, p0)
		c0 = len(cur.ring)
		times, tags := cur.slots(math.MinInt64)
		for i, tg := range tags {
			united = append(united, slot{times[i], tg})
		}
		united = append(united, in...)
		slices.SortStableFunc(united, func(a, b slot) int { return cmp.Compare(a.at, b.at) })
	} else {
		united = in
	}
	if len(united) == 0 {
		return KeyState{}, nil
	}
	if over := len(united) - int(t.cfg.MaxLogLimit); over > 0 {
		dropped := united[:over]
		in = slices.DeleteFunc(in, func(s slot) bool { return slices.Contains(dropped, s) })
		united = united[over:]
	}
	times, tags := make([]int64, len(united)), make([]uint32, len(united))
	for i, s := range united {
		times[i], tags[i] = s.at, s.tag
	}
	if err := t.storeLog(sh, k, now, cur, c0, times, tags); err != nil {
		return KeyState{}, err
	}
	if len(in) == 0 {
		return KeyState{}, nil
	}
	added := ks
	added.Log, added.Tags = make([]int64, len(in)), make([]uint32, len(in))
	for i, s := range in {
		added.Log[i], added.Tags[i] = s.at, s.tag
	}
	return added, nil
}

// forgetSlots removes the slots of sent (by tag; untagged ones by time)
// from the log of k in sh at now (ms). Requires sh.mu held.
func (t *Transfer) forgetSlots(sh *shard, k stateKey, now int64, sent KeyState) {
	st, ok := sh.logs[k]
	if !ok {
		return
	}
	times, tags := st.slots(now - k.span())
	gone := make(map[slot]int, len(sent.Log))
	for i, at := range sent.Log {
		var tag uint32
		if i < len(sent.Tags) {
			tag = sent.Tags[i]
		}
		if tag != 0 {
			at = 0 // a tagged slot is known by its tag, wherever its time moved
		}
		gone[slot{at, tag}]++
	}
	keepT, keepTags := times[:0:0], tags[:0:0]
	for i, at := range times {
		id := slot{at, tags[i]}
		if tags[i] != 0 {
			id.at = 0
		}
		if gone[id] > 0 {
			gone[id]--
			continue
		}
		keepT, keepTags = append(keepT, at), append(keepTags, tags[i])
	}
	if len(keepT) == 0 {
		sh.deleteLog(k, st)
		return
	}
	n0, c0 := st.n, len(st.ring)
	st.fillSlots(keepT, keepTags)
	sh.account(st, n0, c0)
}

// liveOf returns the entries of k's log st after now − window (ms), and
// for a concurrency limit their tags.
func liveOf(k stateKey, st *logState, now int64) ([]int64, []uint32) {
	if k.concurrency() {
		return st.slots(now - k.span())
	}
	return st.live(now - k.span()), nil
}
