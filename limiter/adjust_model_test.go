package limiter

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// forget drops what can no longer count at t, as check does; the logic
// stays the naive one.
func (m *refModel) forget(t int64) {
	for len(m.stamps) > 0 && m.stamps[0] <= t-m.w {
		m.stamps = m.stamps[1:]
	}
	for id := range m.windows {
		if id < t/m.w-1 {
			delete(m.windows, id)
		}
	}
}

// resetAt is the brute-force reset time after t, as check computes it.
func (m *refModel) resetAt(t int64) int64 {
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
	return max(last-t, 0)
}

// charge is the model's Charge: every hit counted, the log keeping its
// newest bound stamps; retry is the first later millisecond at which a
// 1-hit request passes, when the charge went over.
func (m *refModel) charge(t, limit, hits, bound int64) (count, over, retry, reset int64) {
	count = m.count(t)
	m.forget(t)
	if m.algo == SlidingWindowLog {
		for range hits {
			m.stamps = append(m.stamps, t)
		}
		if n := int64(len(m.stamps)); n > bound {
			m.stamps = m.stamps[n-bound:]
		}
	} else {
		m.windows[t/m.w] += hits
	}
	over = max(count+hits-limit, 0)
	if over > 0 {
		for d := int64(1); ; d++ {
			if m.allows(t+d, limit, 1) {
				retry = d
				break
			}
		}
	}
	return count, over, retry, m.resetAt(t)
}

// refund is the model's Refund: the newest stamps, or the current
// window's count then the previous one's.
func (m *refModel) refund(t, hits int64) int64 {
	m.forget(t)
	if m.algo == SlidingWindowLog {
		n := min(hits, int64(len(m.stamps)))
		m.stamps = m.stamps[:int64(len(m.stamps))-n]
		return n
	}
	id := t / m.w
	c := min(hits, m.windows[id])
	p := min(hits-c, m.windows[id-1])
	m.windows[id] -= c
	m.windows[id-1] -= p
	return c + p
}

// modelStep applies one operation to the store and the model and
// requires the same answers. counted and refunded total what the key was
// charged or admitted and what it got back.
type modelRun struct {
	t                 *testing.T
	s                 *Store
	refs              map[string]*refModel
	counted, refunded map[string]int64
}

func (mr *modelRun) step(ctx string, op int, now int64, r Request) {
	t := mr.t
	t.Helper()
	ref := mr.refs[r.Key]
	limit, hits := r.Limit, r.Hits
	at := time.UnixMilli(now)
	switch op {
	case 0: // check
		d, err := mr.s.Check(at, r)
		require.NoError(t, err, ctx)
		allowed, count, retry, reset := ref.check(now, limit, hits)
		used := count
		if allowed {
			used += hits
			mr.counted[r.Key] += hits
		}
		want := Decision{Allowed: allowed, Limit: limit, Remaining: max(limit-used, 0), CurrentCount: count,
			RetryAfter: ms(retry), ResetAfter: ms(reset), RefillAfter: ms(ref.refill(now))}
		require.Equal(t, want, d, ctx)
	case 1: // charge
		d, over, err := mr.s.Charge(at, r)
		require.NoError(t, err, ctx)
		checkDecisionContract(t, r, d)
		count, wantOver, retry, reset := ref.charge(now, limit, hits, min(2*limit, mr.s.cfg.MaxLogLimit))
		mr.counted[r.Key] += hits
		want := Decision{Allowed: wantOver == 0, Limit: limit, Remaining: max(limit-count-hits, 0), CurrentCount: count,
			RetryAfter: ms(retry), ResetAfter: ms(reset), RefillAfter: ms(ref.refill(now))}
		require.Equal(t, wantOver, over, ctx)
		require.Equal(t, want, d, ctx)
	default: // refund: then the decision of a peek
		d, n, err := mr.s.Refund(at, r)
		require.NoError(t, err, ctx)
		require.Equal(t, ref.refund(now, hits), n, ctx)
		require.GreaterOrEqual(t, n, int64(0), ctx)
		require.LessOrEqual(t, n, hits, ctx)
		mr.refunded[r.Key] += n
		require.LessOrEqual(t, mr.refunded[r.Key], mr.counted[r.Key], "%s: refunded more than was counted", ctx)
		peek := r
		peek.Hits = 0
		checkDecisionContract(t, peek, d)
		allowed, count, retry, reset := ref.check(now, limit, 0)
		want := Decision{Allowed: allowed, Limit: limit, Remaining: max(limit-count, 0), CurrentCount: count,
			RetryAfter: ms(retry), ResetAfter: ms(reset), RefillAfter: ms(ref.refill(now))}
		require.Equal(t, want, d, ctx)
		// Never below zero, and what a later inspection sees agrees.
		views, err := mr.s.Admin().Inspect(at, r.Key, 0, 0)
		require.NoError(t, err, ctx)
		for _, v := range views {
			require.True(t, v.Previous >= 0 && v.Current >= 0 && v.Count >= 0, "%s: negative state %+v", ctx, v)
		}
	}
}

// TestStoreMatchesReferenceModelWithRefundsAndCharges is
// TestStoreMatchesReferenceModel with charges (up to three limits, so
// often over) and refunds (up to two limits) among the checks, on a store
// that tracks changes and hot keys; every field must agree, the running
// totals must stay exact, and no key may get back more than it was
// counted.
func TestStoreMatchesReferenceModelWithRefundsAndCharges(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (set PEERLIMIT_SEED to replay)", seed)
	seed = seedFromEnv(t, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	for round := range 200 {
		algo := Algorithm(rng.IntN(2))
		w := int64(1 + rng.IntN(50))
		limit := int64(1 + rng.IntN(12))
		maxLog := int64(10_000)
		if rng.IntN(4) == 0 { // a bound capped by MaxLogLimit
			maxLog = limit + rng.Int64N(limit)
		}
		s := newStore(t, 3, func(c *Config) { c.TrackChanges, c.MaxLogLimit = true, maxLog })
		keys := []string{"a", "b", "c"}
		mr := &modelRun{t: t, s: s, refs: map[string]*refModel{}, counted: map[string]int64{}, refunded: map[string]int64{}}
		for _, k := range keys {
			mr.refs[k] = newRef(algo, w)
		}
		now := int64(rng.IntN(1000))
		for i := range 300 {
			switch rng.IntN(10) {
			case 0:
				now += rng.Int64N(3 * w)
			case 1, 2, 3:
			default:
				now += rng.Int64N(w/4 + 1)
			}
			k := keys[rng.IntN(len(keys))]
			op := rng.IntN(5) // 0-2 check, 3 charge, 4 refund
			var hits int64
			switch {
			case op < 3:
				op, hits = 0, rng.Int64N(limit+1)
			case op == 3:
				op, hits = 1, 1+rng.Int64N(3*limit)
			default:
				op, hits = 2, 1+rng.Int64N(2*limit)
			}
			r := Request{Key: k, Limit: limit, Window: time.Duration(w) * time.Millisecond, Algorithm: algo, Hits: hits}
			ctx := fmt.Sprintf("seed %d round %d step %d op %d algo %s w %d limit %d maxLog %d hits %d t %d", seed, round, i, op, algo, w, limit, maxLog, hits, now)
			mr.step(ctx, op, now, r)
			if i%50 == 0 {
				requireAccounting(t, s)
				for p := range s.Transfer().Partitions() {
					s.Changes().Take(nil, p, time.UnixMilli(now))
				}
			}
		}
		requireAccounting(t, s)
	}
}

// After a charge of D past the limit, a 1-hit check is denied, with the
// model's retry time, at every millisecond until the model says the
// window absorbed the debt; then it is allowed, exactly when the charge's
// RetryAfter said.
func TestChargeDebtLastsUntilTheModelAbsorbsIt(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (set PEERLIMIT_SEED to replay)", seed)
	seed = seedFromEnv(t, seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	for round := range 300 {
		algo := Algorithm(rng.IntN(2))
		w := int64(1 + rng.IntN(40))
		limit := int64(1 + rng.IntN(10))
		s := newStore(t, 1, nil)
		ref := newRef(algo, w)
		now := int64(1000 + rng.IntN(1000))
		win := time.Duration(w) * time.Millisecond
		// Some traffic first, so the debt lands on a partly used window.
		for range rng.IntN(6) {
			now += rng.Int64N(w/2 + 1)
			h := rng.Int64N(limit + 1)
			_, err := s.Check(time.UnixMilli(now), Request{Key: "k", Limit: limit, Window: win, Algorithm: algo, Hits: h})
			require.NoError(t, err)
			ref.check(now, limit, h)
		}
		now += rng.Int64N(w)
		hits := limit + 1 + rng.Int64N(4*limit) // always over
		ctx := fmt.Sprintf("seed %d round %d algo %s w %d limit %d charge %d at %d", seed, round, algo, w, limit, hits, now)
		d, over, err := s.Charge(time.UnixMilli(now), Request{Key: "k", Limit: limit, Window: win, Algorithm: algo, Hits: hits})
		require.NoError(t, err, ctx)
		_, wantOver, retry, _ := ref.charge(now, limit, hits, min(2*limit, s.cfg.MaxLogLimit))
		require.Equal(t, wantOver, over, ctx)
		require.Positive(t, over, ctx)
		require.Equal(t, ms(retry), d.RetryAfter, ctx)
		for at := now; ; at++ {
			c, err := s.Check(time.UnixMilli(at), Request{Key: "k", Limit: limit, Window: win, Algorithm: algo, Hits: 1})
			require.NoError(t, err, ctx)
			allowed, _, r, _ := ref.check(at, limit, 1)
			require.Equal(t, allowed, c.Allowed, "%s: at +%d", ctx, at-now)
			require.Equal(t, ms(r), c.RetryAfter, "%s: at +%d", ctx, at-now)
			if allowed {
				require.Equal(t, d.RetryAfter, ms(at-now), "%s: first allowed", ctx)
				break
			}
		}
	}
}

// adjustMatchesModel applies a charge (or a refund) to s and ref and fails
// t on any difference: FuzzTrafficMatchesModel's two extra operations.
func adjustMatchesModel(t *testing.T, s *Store, ref *refModel, charge bool, now int64, r Request) {
	t.Helper()
	if charge {
		d, over, err := s.Charge(time.UnixMilli(now), r)
		if err != nil {
			t.Fatal(err)
		}
		checkDecisionContract(t, r, d)
		count, wantOver, retry, reset := ref.charge(now, r.Limit, r.Hits, min(2*r.Limit, s.cfg.MaxLogLimit))
		want := Decision{Allowed: wantOver == 0, Limit: r.Limit, Remaining: max(r.Limit-count-r.Hits, 0), CurrentCount: count,
			RetryAfter: ms(retry), ResetAfter: ms(reset), RefillAfter: ms(ref.refill(now))}
		if d != want || over != wantOver {
			t.Fatalf("charge %+v at %d: store %+v over %d, model %+v over %d", r, now, d, over, want, wantOver)
		}
		return
	}
	d, n, err := s.Refund(time.UnixMilli(now), r)
	if err != nil {
		t.Fatal(err)
	}
	peek := r
	peek.Hits = 0
	checkDecisionContract(t, peek, d)
	wantN := ref.refund(now, r.Hits)
	allowed, count, retry, reset := ref.check(now, r.Limit, 0)
	want := Decision{Allowed: allowed, Limit: r.Limit, Remaining: max(r.Limit-count, 0), CurrentCount: count,
		RetryAfter: ms(retry), ResetAfter: ms(reset), RefillAfter: ms(ref.refill(now))}
	if d != want || n != wantN {
		t.Fatalf("refund %+v at %d: store %+v refunded %d, model %+v refunded %d", r, now, d, n, want, wantN)
	}
}
