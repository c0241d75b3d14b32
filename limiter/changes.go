package limiter

import "time"

// TakeChanged returns the state, at now, of every key of partition i that
// changed since the last call, and forgets that they changed: what an
// owner sends its backup (see Config.TrackChanges). A key whose state is
// gone or expired comes as its tombstone, an empty state of each
// algorithm (no counts, no log), on which a backup drops its copy.
func (s *Store) TakeChanged(i int, now time.Time) []KeyState {
	ms := max(now.UnixMilli(), 0)
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.changed) == 0 {
		return nil
	}
	out := make([]KeyState, 0, len(sh.changed))
	for k := range sh.changed {
		n := len(out)
		out = sh.appendState(out, k, ms)
		if len(out) == n {
			w := time.Duration(k.window) * time.Millisecond
			out = append(out, KeyState{Key: k.key, Window: w, Algorithm: SlidingWindowCounter},
				KeyState{Key: k.key, Window: w, Algorithm: SlidingWindowLog})
		}
	}
	clear(sh.changed)
	return out
}

// ClearChanged forgets which keys of partition i changed: the caller has
// just taken a whole copy of it (SnapshotPartition).
func (s *Store) ClearChanged(i int) {
	sh := &s.shards[i]
	sh.mu.Lock()
	clear(sh.changed)
	sh.mu.Unlock()
}

// appendState appends the unexpired states of k at now (ms), of either
// algorithm, to out. Requires sh.mu held.
func (sh *shard) appendState(out []KeyState, k stateKey, now int64) []KeyState {
	w := time.Duration(k.window) * time.Millisecond
	if st, ok := sh.counters[k]; ok && counterExpiry(&st, k.window) > now {
		out = append(out, KeyState{Key: k.key, Window: w, Algorithm: SlidingWindowCounter,
			WindowID: st.window, Prev: st.prev, Curr: st.curr})
	}
	if st, ok := sh.logs[k]; ok {
		if log := st.live(now - k.window); len(log) > 0 {
			out = append(out, KeyState{Key: k.key, Window: w, Algorithm: SlidingWindowLog, Log: log})
		}
	}
	return out
}
