package limiter

import "math"

// logState is the sliding window log of one key: the timestamps of allowed
// hits, oldest first, in a ring buffer. A timestamp is stored as a 32-bit
// millisecond offset from base, so an entry costs 4 bytes (Redis's sorted set
// costs ~58). Entries are non-decreasing because time never moves backwards
// for a key (see decideLog).
type logState struct {
	base int64    // ms; entry i is base + ring[i]
	ring []uint32 // len(ring) is the capacity
	head int32    // index of the oldest entry
	n    int32    // number of entries
	// mark and slot place the log's record in its shard's journal, as a
	// counter's.
	mark, slot uint32
	// tags are a concurrency limit's slots' tags (concurrency.go), nil for
	// a window log: a pointer, so that a log pays 8 bytes for them.
	tags *slotTags
}

const minLogCap = 4

// logResult is what a log decision reports, in milliseconds.
type logResult struct {
	allowed    bool
	count      int64 // hits in the window before the request
	retryAfter int64
	resetAfter int64 // a negative retryAfter of a denied request means noRoom
}

// noRoom reports that the request would be allowed but its entries need a
// ring larger than maxCap allowed: nothing was consumed, and the caller
// makes room or refuses. (Kept in retryAfter, which is positive for any
// real denial, so the result stays four words: it is on the hot path.)
func (r logResult) noRoom() bool { return !r.allowed && r.retryAfter < 0 }

// decideLog decides a request of hits at time now (ms) for window w (ms) and
// updates s. It requires 0 ≤ hits ≤ limit and 0 < w ≤ math.MaxUint32.
// maxCap is the largest ring the store's log budget allows s.
//
// If now is older than the newest entry (the clock stepped back), the request
// is decided at the newest entry's time, so entries stay ordered and a key
// cannot regain allowance by time travel.
func decideLog(s *logState, now, w, limit, hits int64, maxCap int) logResult {
	if s.n > 0 {
		now = max(now, s.newest())
	}
	s.prune(now - w)
	r := logResult{count: int64(s.n)}
	r.allowed = r.count <= limit-hits
	if r.allowed {
		if int(s.n)+int(hits) > len(s.ring) && !s.grow(hits, limit, maxCap) {
			r.allowed, r.retryAfter = false, -1
			return r
		}
		s.push(now, hits)
	} else {
		// The (count+hits−limit)-th oldest entry has to leave the window;
		// it does so at its time + w, as (T−W, T] excludes T−W.
		k := r.count + hits - limit // 1 ≤ k ≤ count because hits ≤ limit
		r.retryAfter = s.at(int32(k-1)) + w - now
	}
	if s.n > 0 {
		r.resetAfter = s.newest() + w - now
	}
	return r
}

// refillAfter is the time (ms) from now until s's oldest entry leaves
// window w, giving one hit's room back; 0 when s is empty. now is clamped to
// the newest entry as decideLog clamps a clock that stepped back. It is
// derived from s, not carried in logResult, which the hot path keeps at
// four words.
func (s *logState) refillAfter(now, w int64) int64 {
	if s.n == 0 {
		return 0
	}
	return s.at(0) + w - max(now, s.newest())
}

// at returns the i-th oldest timestamp (0 ≤ i < n).
func (s *logState) at(i int32) int64 {
	// No division: at runs several times per decision (prune, reset and
	// refill times), where a modulo cost measurably more. head < len and
	// i < n ≤ len ≤ 2^30, so one subtraction wraps j.
	j, c := s.head+i, int32(len(s.ring))
	if j >= c {
		j -= c
	}
	return s.base + int64(s.ring[j])
}

func (s *logState) newest() int64 { return s.at(s.n - 1) }

// prune drops every entry at or before cutoff, and gives memory back once a
// burst has drained.
func (s *logState) prune(cutoff int64) {
	for s.n > 0 && s.at(0) <= cutoff {
		s.head = (s.head + 1) % int32(len(s.ring))
		s.n--
	}
	if s.n == 0 {
		s.head = 0
	}
	// Shrinking to twice the live size leaves room to grow by doubling
	// before the next resize, so a steady key does not oscillate.
	if len(s.ring) > 4*minLogCap && int(s.n) < len(s.ring)/4 {
		s.resize(max(2*int(s.n), minLogCap))
	}
}

// grow makes room in the ring for hits more entries: by doubling, but
// never beyond what the limit can fill (so a key never holds more than
// max(limit, entries) slots), or, when maxCap does not allow the doubling,
// by exactly what is needed. It reports false, changing nothing, when even
// that exceeds maxCap. Kept out of line: it runs once per doubling, and
// inlined it slowed every decision.
//
//go:noinline
func (s *logState) grow(hits, limit int64, maxCap int) bool {
	need := int(s.n) + int(hits)
	c := max(need, min(max(2*len(s.ring), minLogCap), int(limit)))
	if c > maxCap {
		c = need
	}
	if c > maxCap {
		return false
	}
	s.resize(c)
	return true
}

// push appends hits entries at time t (t ≥ newest); the ring must have
// room for them (grow).
func (s *logState) push(t, hits int64) {
	if hits == 0 {
		return
	}
	if s.n == 0 {
		s.base = t
	} else if t-s.base > math.MaxUint32 {
		s.rebase()
	}
	off := uint32(t - s.base)
	c := int32(len(s.ring))
	for i := int64(0); i < hits; i++ {
		j := (s.head + s.n) % c
		s.ring[j] = off
		if s.tags != nil {
			s.tags.ring[j] = 0 // untagged until setNewestTag
		}
		s.n++
	}
}

// rebase moves base up to the oldest entry. Entries span less than the
// window (≤ MaxUint32 ms) after prune, so every offset fits again; this runs
// at most once per ~49 days of a key's life.
func (s *logState) rebase() {
	oldest := s.at(0)
	d := uint32(oldest - s.base)
	c := int32(len(s.ring))
	for i := int32(0); i < s.n; i++ {
		s.ring[(s.head+i)%c] -= d
	}
	s.base = oldest
}

// resize copies the entries, oldest first, into a ring of capacity c ≥ n.
func (s *logState) resize(c int) {
	ring := make([]uint32, c)
	old := int32(len(s.ring))
	for i := int32(0); i < s.n; i++ {
		ring[i] = s.ring[(s.head+i)%old]
	}
	if s.tags != nil {
		tags := make([]uint32, c)
		for i := int32(0); i < s.n; i++ {
			tags[i] = s.tags.ring[(s.head+i)%old]
		}
		s.tags.ring = tags
	}
	s.ring, s.head = ring, 0
}

// fill replaces s's entries with ts (sorted ascending, spanning less than
// 2^32 ms) in a ring of exactly len(ts) slots. A concurrency limit's log
// is filled with fillSlots.
func (s *logState) fill(ts []int64) {
	*s = logState{}
	if len(ts) == 0 {
		return
	}
	s.ring = make([]uint32, len(ts))
	s.base = ts[0]
	for i, t := range ts {
		s.ring[i] = uint32(t - s.base)
	}
	s.n = int32(len(ts))
}

// live returns the timestamps after cutoff, oldest first, without
// changing s.
func (s *logState) live(cutoff int64) []int64 {
	var out []int64
	for i := int32(0); i < s.n; i++ {
		if t := s.at(i); t > cutoff {
			out = append(out, t)
		}
	}
	return out
}

// expiry is the time (ms) from which s holds nothing in window w.
func (s *logState) expiry(w int64) int64 {
	if s.n == 0 {
		return math.MinInt64
	}
	return s.newest() + w
}
