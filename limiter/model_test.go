package limiter

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refModel is the seeds' algorithms written the naive way, sharing no code
// with the store: the counter keeps a count for every window id ever seen,
// the log keeps every allowed timestamp forever. Times are ms.
type refModel struct {
	algo    Algorithm
	w       int64
	windows map[int64]int64
	stamps  []int64
}

func newRef(algo Algorithm, w int64) *refModel {
	return &refModel{algo: algo, w: w, windows: map[int64]int64{}}
}

// count is the floored estimate (counter) or exact count (log) at t.
func (m *refModel) count(t int64) int64 {
	if m.algo == SlidingWindowLog {
		n := int64(0)
		for _, s := range m.stamps {
			if s > t-m.w && s <= t {
				n++
			}
		}
		return n
	}
	id := t / m.w
	elapsed := t - id*m.w
	return m.windows[id-1]*(m.w-elapsed)/m.w + m.windows[id]
}

func (m *refModel) allows(t, limit, hits int64) bool { return m.count(t)+hits <= limit }

func (m *refModel) check(t, limit, hits int64) (allowed bool, count, retry, reset int64) {
	count = m.count(t)
	allowed = count+hits <= limit
	// Forget what can no longer count (time only moves forward here), so the
	// brute-force searches below stay cheap; the logic stays the naive one.
	for len(m.stamps) > 0 && m.stamps[0] <= t-m.w {
		m.stamps = m.stamps[1:]
	}
	for id := range m.windows {
		if id < t/m.w-1 {
			delete(m.windows, id)
		}
	}
	if allowed {
		if m.algo == SlidingWindowLog {
			for range hits {
				m.stamps = append(m.stamps, t)
			}
		} else {
			m.windows[t/m.w] += hits
		}
	} else {
		// Brute force: the first later millisecond at which it would pass.
		for d := int64(1); ; d++ {
			if m.allows(t+d, limit, hits) {
				retry = d
				break
			}
		}
	}
	// Brute force: the first time from which the state is empty for good.
	last := int64(-1)
	if m.algo == SlidingWindowLog {
		if n := len(m.stamps); n > 0 {
			last = m.stamps[n-1] + m.w
		}
	} else {
		for id, c := range m.windows {
			if c > 0 {
				last = max(last, (id+2)*m.w)
			}
		}
	}
	if last > t {
		reset = last - t
	}
	return allowed, count, retry, reset
}

// refill is, after check at t, the time until the hits counted at t start
// to leave the window: brute force for the log (the first later millisecond
// at which the count drops, 0 if there is nothing to drop), the rest of t's
// fixed window for the counter.
func (m *refModel) refill(t int64) int64 {
	if m.algo != SlidingWindowLog {
		return (t/m.w+1)*m.w - t
	}
	n := m.count(t)
	for d := int64(1); n > 0; d++ {
		if m.count(t+d) < n {
			return d
		}
	}
	return 0
}

// TestStoreMatchesReferenceModel drives the store and the model with the
// same random traffic (several keys, both algorithms, random limits, hits,
// peeks, gaps from 0 to several windows) and requires identical answers.
func TestStoreMatchesReferenceModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (set PEERLIMIT_SEED to replay)", seed)
	seed = seedFromEnv(t, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	for round := range 200 {
		algo := Algorithm(rng.IntN(2))
		w := int64(1 + rng.IntN(50))
		limit := int64(1 + rng.IntN(12))
		s := newStore(t, 3, nil)
		keys := []string{"a", "b", "c"}
		refs := map[string]*refModel{}
		for _, k := range keys {
			refs[k] = newRef(algo, w)
		}
		now := int64(rng.IntN(1000))
		for i := range 300 {
			switch rng.IntN(10) {
			case 0:
				now += rng.Int64N(3 * w) // idle gaps that span windows
			case 1, 2, 3:
				// same millisecond: bursts
			default:
				now += rng.Int64N(w/4 + 1)
			}
			k := keys[rng.IntN(len(keys))]
			hits := rng.Int64N(limit + 1) // includes 0 (peek) and the full limit
			if rng.IntN(3) > 0 {
				hits = min(1, limit)
			}
			req := Request{Key: k, Limit: limit, Window: time.Duration(w) * time.Millisecond, Algorithm: algo, Hits: hits}
			d, err := s.Check(time.UnixMilli(now), req)
			require.NoError(t, err)
			allowed, count, retry, reset := refs[k].check(now, limit, hits)
			ctx := []any{"seed %d round %d step %d algo %s w %d limit %d hits %d t %d", seed, round, i, algo, w, limit, hits, now}
			require.Equal(t, allowed, d.Allowed, ctx...)
			require.Equal(t, count, d.CurrentCount, ctx...)
			require.Equal(t, retry, d.RetryAfter.Milliseconds(), ctx...)
			require.Equal(t, reset, d.ResetAfter.Milliseconds(), ctx...)
			require.Equal(t, refs[k].refill(now), d.RefillAfter.Milliseconds(), ctx...)
			used := count
			if allowed {
				used += hits
			}
			require.Equal(t, max(limit-used, 0), d.Remaining, ctx...)
		}
	}
}
