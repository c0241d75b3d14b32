package limiter

import (
	"fmt"
	"slices"
	"time"

	"github.com/peerlimit/peerlimit/partition"
)

// KeyState is the portable state of one key, moved between nodes when a
// partition changes owner. It carries absolute times (window ids, log
// timestamps), so clock skew between the old and new owner shifts windows by
// at most that skew.
type KeyState struct {
	Key       string
	Window    time.Duration
	Algorithm Algorithm

	// Counter state: the current window's id and the two counts.
	WindowID, Prev, Curr int64
	// Log state: timestamps (Unix ms) of the held hits, oldest first.
	Log []int64
}

// Partitions returns the store's partition count.
func (s *Store) Partitions() int { return len(s.shards) }

// PartitionOf returns key's partition: partition.Of(key, Partitions()).
func (s *Store) PartitionOf(key string) int { return partition.Of(key, len(s.shards)) }

// PartitionLen returns the number of keys partition i holds.
func (s *Store) PartitionLen(i int) int {
	sh := &s.shards[i]
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
func (s *Store) SnapshotPartition(i int, now time.Time) []KeyState {
	ms := max(now.UnixMilli(), 0)
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := make([]KeyState, 0, sh.len())
	for k, st := range sh.counters {
		if counterExpiry(&st, k.window) > ms {
			out = append(out, KeyState{Key: k.key, Window: time.Duration(k.window) * time.Millisecond,
				Algorithm: SlidingWindowCounter, WindowID: st.window, Prev: st.prev, Curr: st.curr})
		}
	}
	for k, st := range sh.logs {
		log := st.live(ms - k.window)
		if len(log) > 0 {
			out = append(out, KeyState{Key: k.key, Window: time.Duration(k.window) * time.Millisecond,
				Algorithm: SlidingWindowLog, Log: log})
		}
	}
	return out
}

// Forget removes from the store what states describe, after they were
// handed to another node: counter counts are subtracted per window, log
// entries removed one for one. What was admitted since the snapshot stays;
// a key left with nothing is deleted.
func (s *Store) Forget(now time.Time, states []KeyState) {
	ms := max(now.UnixMilli(), 0)
	for _, ks := range states {
		k := stateKey{ks.Key, ks.Window.Milliseconds()}
		if k.window <= 0 {
			continue
		}
		sh := s.shardOf(ks.Key)
		sh.mu.Lock()
		sh.touch(k)
		if ks.Algorithm == SlidingWindowLog {
			if st, ok := sh.logs[k]; ok {
				rest := subtractSorted(st.live(ms-k.window), ks.Log)
				if len(rest) == 0 {
					sh.deleteLog(k, st)
				} else {
					n0, c0 := st.n, len(st.ring)
					st.fill(rest) // no bigger than before: rest is a subset
					sh.account(st, n0, c0)
				}
			}
		} else if st, ok := sh.counters[k]; ok {
			sent := counterState{window: ks.WindowID, prev: ks.Prev, curr: ks.Curr}
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
		sh.mu.Unlock()
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
// (after rolling both to the later window), log entries are united. Both
// sides may have served the key (a partition, a handoff in flight), and
// every hit either side admitted still counts.
//
// Invalid states are skipped with an error each; a state that does not fit
// (OverflowReject at capacity) is skipped too. Merge returns how many it
// merged and the errors of the others, so the caller can report them.
func (s *Store) Merge(now time.Time, states []KeyState) (merged int, errs []error) {
	ms := max(now.UnixMilli(), 0)
	for _, ks := range states {
		if err := s.mergeOne(ms, ks); err != nil {
			errs = append(errs, fmt.Errorf("merge %q: %w", ks.Key, err))
			continue
		}
		merged++
	}
	return merged, errs
}

// mergeOne checks ks against the bounds a request meets (key, window,
// algorithm; a log longer than MaxLogLimit is trimmed by mergeLog, not
// refused), then merges it under its partition's lock.
func (s *Store) mergeOne(now int64, ks KeyState) error {
	probe := Request{Key: ks.Key, Limit: 1, Window: ks.Window, Algorithm: ks.Algorithm}
	if ks.Algorithm == SlidingWindowLog {
		probe.Limit = min(int64(len(ks.Log)), s.cfg.MaxLogLimit)
	}
	probe.Limit = max(probe.Limit, 1)
	if err := s.cfg.validate(&probe); err != nil {
		return err
	}
	if ks.Prev < 0 || ks.Curr < 0 {
		return &ArgumentError{"state", "negative count"}
	}
	k := stateKey{ks.Key, ks.Window.Milliseconds()}
	sh := s.shardOf(ks.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.touch(k)
	switch ks.Algorithm {
	case SlidingWindowCounter:
		return s.mergeCounter(sh, k, now, ks)
	default:
		return s.mergeLog(sh, k, now, ks.Log)
	}
}

// mergeCounter adds the counts of ks to the counter of k at now (ms).
// Requires sh.mu held.
func (s *Store) mergeCounter(sh *shard, k stateKey, now int64, ks KeyState) error {
	w := k.window
	in := counterState{window: ks.WindowID, prev: ks.Prev, curr: ks.Curr}
	// A sender whose clock runs ahead would drag the key into a future
	// window and, since time never runs backwards for a key, freeze it
	// there: count its hits in our current window instead.
	in.window = min(in.window, floorDiv(now, w))
	if counterExpiry(&in, w) <= now {
		return nil // nothing left to count
	}
	cur, ok := sh.counters[k]
	if !ok {
		if err := s.makeRoom(sh, now); err != nil {
			return err
		}
		sh.putCounter(k, in)
		return nil
	}
	id := max(cur.window, in.window)
	cur.roll(id)
	in.roll(id)
	cur.prev, cur.curr = satAdd(cur.prev, in.prev), satAdd(cur.curr, in.curr)
	sh.counters[k] = cur
	return nil
}

// mergeLog unites log (Unix ms, any order) with the log of k at now (ms):
// it drops what has left the window, unites, and keeps the newest
// MaxLogLimit (no log ever needs more to decide). Requires sh.mu held.
func (s *Store) mergeLog(sh *shard, k stateKey, now int64, log []int64) error {
	w := k.window
	entries := slices.Clone(log)
	for j, t := range entries {
		entries[j] = min(t, now) // a sender ahead of us must not freeze the key
	}
	slices.Sort(entries)
	entries = slices.DeleteFunc(entries, func(t int64) bool { return t <= now-w })
	cur, ok := sh.logs[k]
	c0 := 0 // the slots the shard counts for this key's log
	if ok {
		n0, p0 := cur.n, len(cur.ring)
		cur.prune(now - w)
		sh.account(cur, n0, p0)
		c0 = len(cur.ring)
		for j := int32(0); j < cur.n; j++ {
			entries = append(entries, cur.at(j))
		}
		slices.Sort(entries)
	}
	if len(entries) == 0 {
		return nil
	}
	if over := len(entries) - int(s.cfg.MaxLogLimit); over > 0 {
		entries = entries[over:]
	}
	if !ok {
		if err := s.makeRoom(sh, now); err != nil {
			return err
		}
	}
	// The united log takes exactly len(entries) slots, within the budget
	// like any log's growth.
	if err := s.makeLogRoom(sh, now, k, c0, len(entries)); err != nil {
		return err
	}
	if !ok {
		cur = new(logState)
		sh.putLog(k, cur)
	}
	n0 := cur.n
	cur.fill(entries)
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
// any later than now are taken as now; to may not be longer than from
// (the rest of it is ignored), so a move never grows a log past its
// budget. A log that is gone (reset, handed off) is left alone.
func (s *Store) MoveLog(now time.Time, key string, window time.Duration, from, to []int64) {
	ms := max(now.UnixMilli(), 0)
	k := stateKey{key, window.Milliseconds()}
	if k.window <= 0 {
		return
	}
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st, ok := sh.logs[k]
	if !ok {
		return
	}
	sh.touch(k)
	entries := subtractSorted(st.live(ms-k.window), from)
	for _, t := range to[:min(len(to), len(from))] {
		if t = min(t, ms); t > ms-k.window {
			entries = append(entries, t)
		}
	}
	slices.Sort(entries)
	if over := len(entries) - int(s.cfg.MaxLogLimit); over > 0 {
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
