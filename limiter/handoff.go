package limiter

import (
	"fmt"
	"slices"
	"time"

	"github.com/peerlimit/peerlimit/partition"
)

// KeyState is the portable state of one key, moved between nodes when a
// partition changes owner and replicated to its backup. It carries absolute
// times (window ids, log timestamps) on its sender's clock. The call that
// carries it carries that clock's reading too, and the receiver rebases it
// onto its own clock as it arrives (Rebase: the skew cancels, a transit is
// left, towards later) before Merge places it. From a sender that sends
// no reading (an older version), Merge places it as it is, and says what
// a skew then costs: never a hit lost from a sender ahead, at most the
// hits of the skew's span from one behind.
type KeyState struct {
	Key       string
	Window    time.Duration // 0 for a calendar limit
	Algorithm Algorithm
	// Calendar is a calendar limit's unit and zone; its WindowID is its
	// period's start (Unix ms), Curr its count, Prev 0.
	Calendar Calendar

	// Counter state: the current window's id and the two counts.
	WindowID, Prev, Curr int64
	// Log state: timestamps (Unix ms) of the held hits, oldest first; of
	// a Concurrency limit, the times its slots were taken.
	Log []int64
	// GCRA state: the bucket's theoretical arrival time (Unix ns), when it
	// is full again.
	TAT int64
	// Tags are a Concurrency limit's slots' tags, in Log's order
	// (concurrency.go): nil from an older member.
	Tags []uint32
}

// Transfer is a Store's face to the members it moves state to and from,
// a partition at a time (a handoff, a replica's copy, the disk) or a
// key's log (a lease's settlement): it snapshots, merges and forgets key
// states (KeyState) in the store's own partitions. Get it with
// Store.Transfer. It is safe for concurrent use, with itself and with
// every other call on the Store: each call locks one partition at a time.
type Transfer struct {
	cfg    *Config
	shards shards
	room   *room
}

// Partitions returns the store's partition count.
func (t *Transfer) Partitions() int { return len(t.shards) }

// PartitionOf returns key's partition: partition.Of(key, Partitions()).
func (t *Transfer) PartitionOf(key string) int { return partition.Of(key, len(t.shards)) }

// PartitionLen returns the number of keys partition i holds.
func (t *Transfer) PartitionLen(i int) int {
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.len()
}

// SnapshotPartition returns copies of the states of partition i that are
// not yet expired at now, and leaves them in place: the partition keeps
// deciding while its copy travels to the new owner. Once delivered, Forget removes exactly
// what was sent, so hits admitted meanwhile stay and travel in the next
// round. (Taking the state out for the journey would let a slow or dead
// receiver hold it hostage while this node, deciding from an empty state,
// admitted a second limit.)
func (t *Transfer) SnapshotPartition(i int, now time.Time) []KeyState {
	ms := max(now.UnixMilli(), 0)
	sh := &t.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := make([]KeyState, 0, sh.len())
	for k, st := range sh.counters {
		if counterExpiryOf(k, &st) > ms {
			ks := keyStateOf(k, SlidingWindowCounter)
			ks.WindowID, ks.Prev, ks.Curr = st.window, st.prev, st.curr
			out = append(out, ks)
		}
	}
	for k, st := range sh.logs {
		ks := keyStateOf(k, k.logAlgorithm())
		ks.Log, ks.Tags = liveOf(k, st, ms)
		if len(ks.Log) > 0 {
			out = append(out, ks)
		}
	}
	return t.snapshotGCRAs(sh, out, nanos(now))
}

// Forget removes from the store what states describe, after they were
// handed to another node: counter counts are subtracted per window, log
// entries removed one for one, a GCRA bucket's level as of now taken out
// of the key's (mergeGCRA). What was admitted since the snapshot stays;
// a key left with nothing is deleted. A state that came from another
// node's clock is best forgotten in the form MergeAdded returned for it,
// which Forget takes back exactly.
func (t *Transfer) Forget(now time.Time, states []KeyState) {
	ms := max(now.UnixMilli(), 0)
	for _, ks := range states {
		k := stateKey{ks.Key, ks.stateWindow()}
		if k.window == 0 || (k.window < 0 && ks.Algorithm != SlidingWindowCounter && ks.Algorithm != Concurrency) {
			continue
		}
		sh := t.shards.of(ks.Key)
		sh.mu.Lock()
		if ks.Algorithm == GCRA { // journals its own change
			t.forgetGCRA(sh, k, nanos(now), ks)
			sh.mu.Unlock()
			continue
		}
		sh.touch(k)
		switch {
		case ks.Algorithm == Concurrency:
			t.forgetSlots(sh, k, ms, ks)
		case ks.Algorithm.Logged():
			t.forgetLog(sh, k, ms, ks.Log)
		case k.window < 0:
			t.forgetCalendar(sh, k, ks)
		default:
			t.forgetCounter(sh, k, ms, ks)
		}
		sh.mu.Unlock()
	}
}

// forgetLog removes the entries of sent from the log of k at now (ms).
// Requires sh.mu held.
func (t *Transfer) forgetLog(sh *shard, k stateKey, now int64, sent []int64) {
	st, ok := sh.logs[k]
	if !ok {
		return
	}
	rest := subtractSorted(st.live(now-k.span()), sent)
	if len(rest) == 0 {
		sh.deleteLog(k, st)
		return
	}
	n0, c0 := st.n, len(st.ring)
	st.fill(rest) // no bigger than before: rest is a subset
	sh.account(st, n0, c0)
}

// forgetCounter subtracts the counts of sent from the counter of k at now
// (ms), per window. Requires sh.mu held.
//
// sent is placed as mergeCounter places a state: folded into the key's
// current window if later (its window id came from a clock ahead of
// ours), so the key is never rolled past that window. Rolling it onto
// such an id would shift or zero its own counts and subtract sent's from
// the wrong window: its own admissions would be lost.
func (t *Transfer) forgetCounter(sh *shard, k stateKey, now int64, ks KeyState) {
	st, ok := sh.counters[k]
	if !ok {
		return
	}
	current := max(st.window, floorDiv(now, k.window))
	sent := counterState{window: ks.WindowID, prev: ks.Prev, curr: ks.Curr}.within(current)
	id := max(st.window, sent.window)
	st.roll(id)
	sent.roll(id)
	st.prev, st.curr = max(st.prev-sent.prev, 0), max(st.curr-sent.curr, 0)
	if st.prev == 0 && st.curr == 0 {
		sh.deleteCounter(k, st)
	} else {
		sh.counters[k] = st
	}
}

// subtractSorted returns a minus b as multisets; both sorted ascending.
func subtractSorted(a, b []int64) []int64 {
	out := a[:0:0]
	j := 0
	for _, t := range a {
		for j < len(b) && b[j] < t {
			j++
		}
		if j < len(b) && b[j] == t {
			j++
			continue
		}
		out = append(out, t)
	}
	return out
}

// Merge adds states into the store, combining each with what the store
// already holds for the same key: counter counts are summed per window
// (after rolling both to the later window), log entries are united, GCRA
// levels are summed (mergeGCRA). Both
// sides may have served the key (a partition, a handoff in flight), and
// every hit either side admitted still counts.
//
// A state's times should be on this node's clock (Rebase, on arrival);
// what is left off it (a transit; the skew of a sender that sends no clock
// reading; a sender's clock stepped back) Merge places on this node's:
// nothing is ever put in a window, or at a time, this node's clock has
// not reached (mergeCounter and mergeLog state the rules, and what a skew
// costs).
//
// Invalid states are skipped with an error each; a state that does not fit
// (OverflowReject at capacity) is skipped too, except a calendar
// counter's, which a full partition keeps past its cap
// (Stats.CalendarOverCap): a spent quota is never dropped for room. Merge returns how many it
// merged and the errors of the others, so the caller can report them.
func (t *Transfer) Merge(now time.Time, states []KeyState) (merged int, errs []error) {
	return t.merge(now, states, nil)
}

// MergeAdded is Merge, returning what it added instead of how many: each
// state as this node's clock placed it, without what had expired. Forget
// of those takes back exactly what was added, however the sender's clock
// differed from this node's: Merge's placement is not undone by a Forget
// of the states as sent.
func (t *Transfer) MergeAdded(now time.Time, states []KeyState) (added []KeyState, errs []error) {
	_, errs = t.merge(now, states, &added)
	return added, errs
}

// merge implements Merge, appending to added (if not nil) what it added.
func (t *Transfer) merge(now time.Time, states []KeyState, added *[]KeyState) (merged int, errs []error) {
	ms, ns := max(now.UnixMilli(), 0), nanos(now)
	for _, ks := range states {
		in, err := t.mergeOne(ms, ns, ks)
		if err != nil {
			errs = append(errs, fmt.Errorf("merge %q: %w", ks.Key, err))
			continue
		}
		merged++
		if added != nil && in.Key != "" {
			*added = append(*added, in)
		}
	}
	return merged, errs
}

// mergeOne checks ks against the bounds a request meets (key, window,
// algorithm; a log longer than MaxLogLimit is trimmed by mergeLog, not
// refused), then merges it under its partition's lock, at now (ms; ns for
// a GCRA bucket). It returns what it added, the zero KeyState if nothing.
func (t *Transfer) mergeOne(now, ns int64, ks KeyState) (KeyState, error) {
	probe := Request{Key: ks.Key, Limit: 1, Window: ks.Window, Algorithm: ks.Algorithm, Calendar: ks.Calendar}
	if ks.Algorithm.Logged() {
		probe.Limit = min(int64(len(ks.Log)), t.cfg.MaxLogLimit)
	}
	probe.Limit = max(probe.Limit, 1)
	if err := t.cfg.validate(&probe); err != nil {
		return KeyState{}, err
	}
	switch {
	case ks.Prev < 0 || ks.Curr < 0:
		return KeyState{}, &ArgumentError{"state", "negative count"}
	case ks.Calendar != 0 && ks.Prev != 0:
		return KeyState{}, &ArgumentError{"state", "a calendar limit has no previous window's count"}
	case ks.TAT < 0:
		return KeyState{}, &ArgumentError{"state", "negative theoretical arrival time"}
	}
	k := stateKey{ks.Key, ks.stateWindow()}
	sh := t.shards.of(ks.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if ks.Algorithm == GCRA { // journals its own change
		return t.mergeGCRA(sh, k, ns, ks)
	}
	sh.touch(k)
	switch {
	case ks.Calendar != 0:
		c, _ := ks.Calendar.cal() // validated
		return t.mergeCalendar(sh, k, c, now, ks), nil
	case ks.Algorithm == SlidingWindowCounter:
		return t.mergeCounter(sh, k, now, ks)
	default:
		return t.mergeLog(sh, k, now, ks)
	}
}

// stateWindow is the window ks's key is stored under (Request.stateWindow).
func (ks *KeyState) stateWindow() int64 {
	switch {
	case ks.Calendar != 0:
		return ks.Calendar.stateWindow()
	case ks.Algorithm == Concurrency:
		return concurrencyWindow(ks.Window.Milliseconds())
	}
	return ks.Window.Milliseconds()
}

// Expiry is the time (Unix ms) from which ks counts nothing, as the store
// computes it: a sliding counter's current count weighs in until the end
// of the next window, a log entry for one window, a calendar count until
// its period ends. A state whose calendar this process does not know
// counts nothing (the store would refuse it). A GCRA bucket counts until
// its TAT, rounded up to the millisecond.
func (ks KeyState) Expiry() int64 {
	w := ks.Window.Milliseconds()
	switch {
	case ks.Algorithm == GCRA:
		return gcraExpiry(ks.TAT)
	case ks.Calendar != 0:
		c, ok := ks.Calendar.cal()
		if !ok || ks.Curr <= 0 {
			return 0
		}
		return c.endOf(ks.WindowID)
	case ks.Algorithm.Logged() && len(ks.Log) > 0:
		return ks.Log[len(ks.Log)-1] + w
	case ks.Curr > 0:
		return (ks.WindowID + 2) * w
	case ks.Prev > 0:
		return (ks.WindowID + 1) * w
	}
	return 0
}

// mergeCounter adds the counts of ks to the counter of k at now (ms), and
// returns what it added (ks as placed here), the zero KeyState if
// nothing. Requires sh.mu held.
//
// ks's window id is on its sender's clock, ahead of ours by a skew S
// (S < 0: behind). Rebased on arrival (Rebase), it is on ours but for the
// call's transit, by which its hits are late, as from a sender ahead by
// that much: over-denial only. The key's current window here is the
// later of now's and its own (a key never moves back):
//   - An id up to the current window keeps its counts in their slots, and
//     the later of the two states' windows wins. From a sender ahead, our
//     window is S less advanced than its, so each hit counts up to S
//     longer: over-denial of at most max(Prev, Curr)·S/W while S < W.
//     From a sender behind, a merge within |S| after our window began
//     rolls its counts on a window early: up to max(Prev, Curr)·|S|/W is
//     lost (so up to L·|S|/W extra admissions), all of it if |S| ≥ W.
//     Merge cannot tell such a state from an older one from an exact
//     clock, which must be rolled: the rebase on arrival is what moves it
//     to the window its hits were in here.
//   - A later id (the sender, ahead, has crossed a boundary we have not)
//     is folded into the current window: Prev and Curr both count as hits
//     of this window. Nothing the sender still counts is lost, and the key
//     is not dragged into a window our clock has not reached (where it
//     would be frozen). The cost is over-denial: at most Prev·S/W over the
//     sender's estimate while S < W (its Prev, mostly hits of our current
//     window, counts whole until our next window), Prev+Curr if S ≥ W;
//     all of it is gone when our window after next begins, within 2W.
func (t *Transfer) mergeCounter(sh *shard, k stateKey, now int64, ks KeyState) (KeyState, error) {
	w := k.window
	cur, ok := sh.counters[k]
	at := floorDiv(now, w)
	if ok {
		at = max(at, cur.window)
	}
	in := counterState{window: ks.WindowID, prev: ks.Prev, curr: ks.Curr}.within(at)
	if counterExpiry(&in, w) <= now {
		return KeyState{}, nil // nothing left to count
	}
	if !ok {
		if err := t.room.makeRoom(sh, now); err != nil {
			return KeyState{}, err
		}
		sh.putCounter(k, in)
	} else {
		id := max(cur.window, in.window)
		cur.roll(id)
		in.roll(id)
		cur.prev, cur.curr = satAdd(cur.prev, in.prev), satAdd(cur.curr, in.curr)
		sh.counters[k] = cur
	}
	added := ks
	added.WindowID, added.Prev, added.Curr, added.Log = in.window, in.prev, in.curr, nil
	return added, nil
}

// mergeLog unites the log of ks (Unix ms, any order) with the log of k at
// now (ms): it drops what has left the window, unites, and keeps the newest
// MaxLogLimit (no log ever needs more to decide). It returns what it added
// (ks's entries as placed here), the zero KeyState if nothing. Requires
// sh.mu held.
//
// The entries are on the sender's clock, ahead of ours by a skew S (S < 0:
// behind; rebased on arrival, S is the call's transit). From a sender
// ahead, an entry later than now is taken as now (a later one would
// freeze the key until our clock reached it), the others stay S late:
// each hit counts up to S longer, over-denial only.
// From a sender behind, every entry lands |S| early: the hits it admitted
// in the first |S| of its window are dropped here at once, and the others
// leave |S| early, so up to the sender's hits of any |S| span (up to L,
// all of them if |S| ≥ W) may be admitted again: the rebase on arrival,
// with the sender's clock reading, is what shifts them later.
func (t *Transfer) mergeLog(sh *shard, k stateKey, now int64, ks KeyState) (KeyState, error) {
	if k.concurrency() {
		return t.mergeSlots(sh, k, now, ks)
	}
	in := placeLog(ks.Log, now, k.span())
	cur, ok := sh.logs[k]
	united, c0 := in, 0 // c0: the slots the shard counts for this key's log
	if ok {
		n0, p0 := cur.n, len(cur.ring)
		cur.prune(now - k.span())
		sh.account(cur, n0, p0)
		c0 = len(cur.ring)
		united = make([]int64, 0, len(in)+int(cur.n))
		united = append(united, in...)
		for j := int32(0); j < cur.n; j++ {
			united = append(united, cur.at(j))
		}
		slices.Sort(united)
	}
	if len(united) == 0 {
		return KeyState{}, nil
	}
	if over := len(united) - int(t.cfg.MaxLogLimit); over > 0 {
		in = subtractSorted(in, united[:over])
		united = united[over:]
	}
	if err := t.storeLog(sh, k, now, cur, c0, united, nil); err != nil {
		return KeyState{}, err
	}
	if len(in) == 0 {
		return KeyState{}, nil
	}
	added := ks
	added.WindowID, added.Prev, added.Curr, added.Log = 0, 0, 0, in
	return added, nil
}

// placeLog returns log (Unix ms, any order, on a sender's clock) as this
// node keeps it at now (ms) for window w: sorted, any entry later than now
// taken as now, and those that have left the window dropped.
func placeLog(log []int64, now, w int64) []int64 {
	entries := slices.Clone(log)
	for j, t := range entries {
		entries[j] = min(t, now) // a sender ahead of us must not freeze the key
	}
	slices.Sort(entries)
	return slices.DeleteFunc(entries, func(t int64) bool { return t <= now-w })
}

// storeLog makes entries (sorted, at most MaxLogLimit) the log of k, cur
// (nil if k has none), whose slots the shard counts as c0; tags are a
// concurrency limit's slots' (nil for a window log). Requires sh.mu held.
func (t *Transfer) storeLog(sh *shard, k stateKey, now int64, cur *logState, c0 int, entries []int64, tags []uint32) error {
	if cur == nil {
		if err := t.room.makeRoom(sh, now); err != nil {
			return err
		}
	}
	// The united log takes exactly len(entries) slots, within the budget
	// like any log's growth.
	if err := t.room.makeLogRoom(sh, now, k, c0, len(entries)); err != nil {
		return err
	}
	if cur == nil {
		cur = new(logState)
		sh.putLog(k, cur)
	}
	n0 := cur.n
	if k.concurrency() {
		cur.fillSlots(entries, tags)
	} else {
		cur.fill(entries)
	}
	sh.account(cur, n0, c0)
	return nil
}

// ChunkBytes bounds one call that carries key states between members
// (a handoff, a replication), well under a receiver's gRPC message limit
// (4 MiB by default): a node may hold millions of keys.
const ChunkBytes = 1 << 20

// ChunkLen returns how many of states fit in one call under ChunkBytes
// (at least one: a single log key of 10,000 entries is ~40 KB).
func ChunkLen(states []KeyState) int {
	size := 0
	for i, s := range states {
		size += 48 + len(s.Key) + 5*len(s.Log) // wire size, roughly
		if s.Calendar != 0 {
			size += 4 + len(s.Calendar.Zone())
		}
		if size > ChunkBytes && i > 0 {
			return i
		}
	}
	return len(states)
}

// MoveLog replaces, in the log of key under window, the entries from (one
// for one, as Forget removes them) with the entries to, under one lock, so
// that no decision sees the log between the two: an owner settling a
// lease moves the hits it took at the grant to the times the holder
// admitted them. Entries of to that have left the window are dropped, and
// any later than now are taken as now; only as many entries of to are
// added as of from were found (the rest is ignored), so a move never
// grows a log, nor counts twice what a handoff took elsewhere. A log that
// is gone (reset, handed off) is left alone.
func (t *Transfer) MoveLog(now time.Time, key string, window time.Duration, from, to []int64) {
	ms := max(now.UnixMilli(), 0)
	k := stateKey{key, window.Milliseconds()}
	if k.window <= 0 {
		return
	}
	sh := t.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, ok := sh.logs[k]
	if !ok {
		return
	}
	sh.touch(k)
	live := st.live(ms - k.window)
	entries := subtractSorted(live, from)
	found := len(live) - len(entries) // a placeholder not here (merged away, reset) has nothing to move
	for _, t := range to[:min(len(to), found)] {
		if t = min(t, ms); t > ms-k.window {
			entries = append(entries, t)
		}
	}
	slices.Sort(entries)
	if over := len(entries) - int(t.cfg.MaxLogLimit); over > 0 {
		entries = entries[over:]
	}
	if len(entries) == 0 {
		sh.deleteLog(k, st)
		return
	}
	n0, c0 := st.n, len(st.ring)
	st.fill(entries) // no more entries than before: to is no longer than from
	sh.account(st, n0, c0)
}

// StateID names the state a KeyState is of: the states of one StateID
// are one key's one limit, whichever node holds them.
type StateID struct {
	Key       string
	Window    time.Duration
	Algorithm Algorithm
	Calendar  Calendar
}

// ID returns the StateID s is a state of.
func (s KeyState) ID() StateID {
	return StateID{Key: s.Key, Window: s.Window, Algorithm: s.Algorithm, Calendar: s.Calendar}
}

// Empty reports whether s counts nothing: a key's tombstone, among what
// Changes.Take returns.
func (s KeyState) Empty() bool { return s.Prev <= 0 && s.Curr <= 0 && len(s.Log) == 0 && s.TAT <= 0 }
