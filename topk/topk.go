// Package topk finds the heaviest keys of a stream in bounded memory with
// the Space-Saving algorithm (Metwally, Agrawal and El Abbadi, "Efficient
// computation of frequent and top-k elements in data streams", ICDT 2005).
//
// A Summary of capacity k monitors at most k keys. A monitored key's count
// is incremented; an unmonitored key takes the place of the monitored key
// with the smallest count m, starting at m + its weight, with an error of
// m. So, for every key:
//
//   - a reported count overestimates the key's true count by at most its
//     reported error: Count − Err ≤ true ≤ Count;
//   - a key that is not reported has a true count ≤ Min(), and Min() ≤
//     total ÷ k: any key heavier than total ÷ k is always monitored.
//
// The summary is not safe for concurrent use: its owner (a limiter
// partition, under the lock it already holds) serialises it. Keys are
// copied into buffers the summary reuses, so steady use allocates nothing.
package topk

import (
	"cmp"
	"slices"
)

// Entry is a monitored key: its count, an overestimate of the true count
// by at most Err.
type Entry struct {
	Key   string
	Count uint64
	Err   uint64
}

type slot struct {
	hash  uint64
	key   []byte // reused when the slot changes hands
	count uint64
	err   uint64
}

// Summary is a Space-Saving summary of fixed capacity. The zero value has
// capacity 0 and monitors nothing; use New.
type Summary struct {
	slots []slot
	total uint64
}

// New returns an empty summary that monitors up to capacity keys. The
// lookup is a linear scan of hashes, the right trade for the small
// capacities a partition uses (≤ 64); it is not meant for thousands.
func New(capacity int) *Summary {
	return &Summary{slots: make([]slot, 0, max(capacity, 0))}
}

// Add counts n more for key, whose hash (any well-mixed 64-bit hash of
// key, the same for every call) the caller has already computed.
func (s *Summary) Add(hash uint64, key string, n uint64) {
	s.total += n
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.hash == hash && string(sl.key) == key { // the conversion does not allocate
			sl.count += n
			return
		}
	}
	if len(s.slots) < cap(s.slots) {
		s.slots = append(s.slots, slot{hash: hash, key: append([]byte(nil), key...), count: n})
		return
	}
	if len(s.slots) == 0 {
		return
	}
	sl := &s.slots[s.minIndex()]
	sl.hash, sl.key = hash, append(sl.key[:0], key...)
	sl.err = sl.count
	sl.count += n
}

// minIndex returns the index of a slot with the smallest count.
func (s *Summary) minIndex() int {
	m := 0
	for i := 1; i < len(s.slots); i++ {
		if s.slots[i].count < s.slots[m].count {
			m = i
		}
	}
	return m
}

// Min bounds the true count of every key the summary does not report: 0
// until it is full, then its smallest count.
func (s *Summary) Min() uint64 {
	if len(s.slots) < cap(s.slots) || len(s.slots) == 0 {
		return 0
	}
	return s.slots[s.minIndex()].count
}

// Total is the sum of every weight added since the last Reset.
func (s *Summary) Total() uint64 { return s.total }

// Len is the number of monitored keys.
func (s *Summary) Len() int { return len(s.slots) }

// Reset forgets every key, keeping the buffers for reuse.
func (s *Summary) Reset() {
	for i := range s.slots {
		s.slots[i].count, s.slots[i].err, s.slots[i].hash = 0, 0, 0
	}
	s.slots = s.slots[:0:cap(s.slots)]
	s.total = 0
}

// AppendEntries appends the monitored keys to dst, in no order, copying
// their keys.
func (s *Summary) AppendEntries(dst []Entry) []Entry {
	for _, sl := range s.slots {
		dst = append(dst, Entry{Key: string(sl.key), Count: sl.count, Err: sl.err})
	}
	return dst
}

// Merge combines summaries of the same kind of stream into one list: the
// mergeable-summaries rule (Agarwal et al., PODS 2012). A key's count is
// the sum of its counts where it is monitored plus, where it is not, that
// part's bound (mins[i]), which is added to its error too; so Count stays
// an overestimate and Count − Err an underestimate. parts[i] is one part's
// entries, each key at most once; mins[i] is that part's Min (0 for a
// part that monitors every key it saw). The result is unsorted.
func Merge(parts [][]Entry, mins []uint64) []Entry {
	var boundSum uint64
	for _, m := range mins {
		boundSum += m
	}
	idx := map[string]int{}
	var out []Entry
	var seenBound []uint64 // per out entry: the bounds of the parts that monitor it
	for i, part := range parts {
		for _, e := range part {
			j, ok := idx[e.Key]
			if !ok {
				j = len(out)
				idx[e.Key] = j
				out = append(out, Entry{Key: e.Key})
				seenBound = append(seenBound, 0)
			}
			out[j].Count += e.Count
			out[j].Err += e.Err
			seenBound[j] += mins[i]
		}
	}
	for j := range out {
		missing := boundSum - seenBound[j] // the bounds of the parts that do not monitor this key
		out[j].Count += missing
		out[j].Err += missing
	}
	return out
}

// Top sorts entries by count, heaviest first (ties by key, for a stable
// answer), and returns at most n of them.
func Top(entries []Entry, n int) []Entry {
	slices.SortFunc(entries, func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return entries[:min(n, len(entries))]
}
