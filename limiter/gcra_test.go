package limiter

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refGCRA is the reference GCRA, written from the definitions in
// docs/limiter.md in big integers, without the store's shortcuts: its
// remaining is found by adding hits one at a time, its refill by a search
// over the time to come.
type refGCRA struct{ tat *big.Int } // Unix ns; nil: no state

func bi(v int64) *big.Int { return big.NewInt(v) }

// bmax returns the larger of a and b.
func bmax(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// ceilQuo is ceil(a / b) for a ≥ 0, b > 0.
func ceilQuo(a, b *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(a, b, new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, bi(1))
	}
	return q
}

func (m *refGCRA) tatOr0() *big.Int {
	if m.tat == nil {
		return bi(0)
	}
	return m.tat
}

// level is max(0, TAT − now).
func (m *refGCRA) level(now *big.Int) *big.Int {
	return bmax(new(big.Int).Sub(m.tatOr0(), now), bi(0))
}

// report is the decision's numbers from the level after a request.
func refReport(after, t, b *big.Int) (remaining, refill int64) {
	capacity := new(big.Int).Mul(b, t)
	fits := func(lvl *big.Int, n int64) bool { // n more hits fit on lvl
		return new(big.Int).Add(lvl, new(big.Int).Mul(bi(n), t)).Cmp(capacity) <= 0
	}
	for fits(after, remaining+1) {
		remaining++
	}
	if after.Sign() == 0 {
		return remaining, 0
	}
	// The first d > 0 at which one more hit fits on the level drained by d.
	lo, hi := int64(1), new(big.Int).Add(after, t).Int64()
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fits(bmax(new(big.Int).Sub(after, bi(mid)), bi(0)), remaining+1) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return remaining, lo
}

// check decides hits at now (ns) under emission interval t and burst b.
func (m *refGCRA) check(now, t, b, hits int64) Decision {
	n, T, B := bi(now), bi(t), bi(b)
	level := m.level(n)
	newTAT := new(big.Int).Add(bmax(m.tatOr0(), n), new(big.Int).Mul(bi(hits), T))
	excess := new(big.Int).Sub(new(big.Int).Sub(newTAT, n), new(big.Int).Mul(B, T))
	d := Decision{Allowed: excess.Sign() <= 0, CurrentCount: ceilQuo(level, T).Int64()}
	after := level
	if d.Allowed && hits > 0 {
		m.tat = newTAT
		after = new(big.Int).Sub(newTAT, n)
	}
	if !d.Allowed {
		d.RetryAfter = time.Duration(excess.Int64())
	}
	d.ResetAfter = time.Duration(after.Int64())
	rem, refill := refReport(after, T, B)
	d.Remaining, d.RefillAfter = rem, time.Duration(refill)
	return d
}

// refund gives back up to hits: TAT = max(now, TAT − hits·T), no state
// created; it returns how many.
func (m *refGCRA) refund(now, t, hits int64) int64 {
	n, T := bi(now), bi(t)
	level := m.level(n)
	if m.tat == nil || level.Sign() == 0 {
		return 0
	}
	m.tat = bmax(n, new(big.Int).Sub(m.tat, new(big.Int).Mul(bi(hits), T)))
	got := ceilQuo(level, T)
	if got.Cmp(bi(hits)) > 0 {
		return hits
	}
	return got.Int64()
}

// charge counts hits past the burst: TAT = max(TAT, now) + hits·T; over is
// ceil(level/T) + hits − B when positive.
func (m *refGCRA) charge(now, t, b, hits int64) (allowed bool, count, over int64) {
	n, T := bi(now), bi(t)
	level := m.level(n)
	count = ceilQuo(level, T).Int64()
	m.tat = new(big.Int).Add(bmax(m.tatOr0(), n), new(big.Int).Mul(bi(hits), T))
	over = max(count+hits-b, 0)
	return over == 0, count, over
}

// gcraReq returns a GCRA request.
func gcraReq(key string, limit int64, window time.Duration, burst, hits int64) Request {
	return Request{Key: key, Limit: limit, Window: window, Algorithm: GCRA, Burst: burst, Hits: hits}
}

// Random traffic (checks, peeks, refunds and charges, a limit and a burst
// that change, nanosecond times) decides exactly as the reference model,
// every field of every answer.
func TestGCRAMatchesReferenceModel(t *testing.T) {
	seed := seedFromEnv(t, uint64(time.Now().UnixNano()))
	t.Logf("seed %d (PEERLIMIT_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	for round := range 40 {
		s := newStore(t, 3, nil)
		window := time.Duration(1+rng.IntN(2000)) * time.Millisecond
		refs := map[string]*refGCRA{}
		now := int64(1_750_000_000_000_000_000) + rng.Int64N(int64(time.Second))
		for i := range 400 {
			key := fmt.Sprintf("k%d", rng.IntN(3))
			if refs[key] == nil {
				refs[key] = &refGCRA{}
			}
			limit := 1 + rng.Int64N(min(window.Microseconds(), 50))
			burst := int64(0)
			if rng.IntN(2) == 0 {
				burst = 1 + rng.Int64N(3*limit)
			}
			r := gcraReq(key, limit, window, burst, 0)
			T, B := int64(emissionInterval(window, limit)), r.BurstOrLimit()
			now += rng.Int64N(3 * T * (1 + rng.Int64N(B)) / 2)
			at := time.Unix(0, now)
			what := fmt.Sprintf("round %d op %d: %s limit %d burst %d (T=%d B=%d) at %d", round, i, key, limit, burst, T, B, now)
			switch op := rng.IntN(10); {
			case op < 7:
				r.Hits = rng.Int64N(B + 1)
				d, err := s.Check(at, r)
				require.NoError(t, err, what)
				want := refs[key].check(now, T, B, r.Hits)
				want.Limit = limit
				require.Equal(t, want, d, "%s: check %d", what, r.Hits)
			case op < 8:
				r.Hits = 1 + rng.Int64N(2*B)
				d, got, err := s.Refund(at, r)
				require.NoError(t, err, what)
				require.Equal(t, refs[key].refund(now, T, r.Hits), got, "%s: refund %d", what, r.Hits)
				peek := refs[key].check(now, T, B, 0)
				peek.Limit = limit
				require.Equal(t, peek, d, "%s: the peek after refund %d", what, r.Hits)
			default:
				r.Hits = 1 + rng.Int64N(2*B)
				d, over, err := s.Charge(at, r)
				require.NoError(t, err, what)
				allowed, count, wantOver := refs[key].charge(now, T, B, r.Hits)
				require.Equal(t, wantOver, over, "%s: charge %d", what, r.Hits)
				require.Equal(t, allowed, d.Allowed, what)
				require.Equal(t, count, d.CurrentCount, what)
				after := refs[key].level(bi(now))
				require.Equal(t, time.Duration(after.Int64()), d.ResetAfter, what)
				rem, refill := refReport(after, bi(T), bi(B))
				require.Equal(t, rem, d.Remaining, what)
				require.Equal(t, time.Duration(refill), d.RefillAfter, what)
				if !allowed { // until a 1-hit request fits
					require.Equal(t, time.Duration(after.Int64()+T-B*T), d.RetryAfter, what)
				}
			}
		}
	}
}

// A bucket of B admits B hits at once after a quiet spell, then one per
// emission interval: never sooner, never later.
func TestGCRAExactBurst(t *testing.T) {
	s := newStore(t, 1, nil)
	r := gcraReq("k", 10, time.Second, 4, 1) // T = 100 ms, B = 4
	t0 := time.Unix(1_750_000_000, 0)
	for i := range 4 {
		d, err := s.Check(t0, r)
		require.NoError(t, err)
		require.True(t, d.Allowed, "hit %d of the burst", i)
		assert.Equal(t, int64(3-i), d.Remaining)
		assert.Equal(t, int64(i), d.CurrentCount)
		assert.Equal(t, time.Duration(i+1)*100*time.Millisecond, d.ResetAfter)
		assert.Equal(t, 100*time.Millisecond, d.RefillAfter)
	}
	d, err := s.Check(t0, r)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, 100*time.Millisecond, d.RetryAfter)
	for i := 1; i <= 20; i++ {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		d, err := s.Check(at.Add(-time.Nanosecond), r)
		require.NoError(t, err)
		require.False(t, d.Allowed, "1 ns before the %d-th interval", i)
		require.Equal(t, time.Nanosecond, d.RetryAfter)
		d, err = s.Check(at, r)
		require.NoError(t, err)
		require.True(t, d.Allowed, "at the %d-th interval", i)
		require.Equal(t, int64(0), d.Remaining)
	}
}

// retry_after is exact: the same request is denied 1 ns before now +
// retry_after and allowed at it, whatever the bucket, the hits and the
// emission interval's rounding.
func TestGCRARetryAfterIsExact(t *testing.T) {
	seed := seedFromEnv(t, uint64(time.Now().UnixNano()))
	t.Logf("seed %d (PEERLIMIT_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 12))
	for i := range 300 {
		s := newStore(t, 1, nil)
		window := time.Duration(1+rng.IntN(5000)) * time.Millisecond
		limit := 1 + rng.Int64N(min(window.Microseconds(), 1000))
		r := gcraReq("k", limit, window, rng.Int64N(2*limit), 0)
		B := r.BurstOrLimit()
		now := time.Unix(0, 1_750_000_000_000_000_000+rng.Int64N(1e9))
		for range rng.IntN(5) { // some level
			r.Hits = 1 + rng.Int64N(B)
			_, err := s.Check(now, r)
			require.NoError(t, err)
			now = now.Add(time.Duration(rng.Int64N(int64(window) / 3)))
		}
		r.Hits = 1 + rng.Int64N(B)
		d, err := s.Check(now, r)
		require.NoError(t, err)
		if d.Allowed {
			continue
		}
		what := fmt.Sprintf("case %d: %d per %s burst %d hits %d: retry %s", i, limit, window, B, r.Hits, d.RetryAfter)
		early, err := s.Check(now.Add(d.RetryAfter-time.Nanosecond), r)
		require.NoError(t, err)
		require.False(t, early.Allowed, what)
		require.Equal(t, time.Nanosecond, early.RetryAfter, what)
		on, err := s.Check(now.Add(d.RetryAfter), r)
		require.NoError(t, err)
		require.True(t, on.Allowed, what)
	}
}

// A peek neither creates a bucket nor changes one; it is denied only on a
// bucket past its burst (a debt), as the windows' peeks are.
func TestGCRAPeek(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.Unix(1_750_000_000, 0)
	d, err := s.Check(t0, gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true, Limit: 10, Remaining: 10}, d)
	assert.Zero(t, s.Stats().GCRAKeys, "a peek creates nothing")

	_, _, err = s.Charge(t0, gcraReq("k", 10, time.Second, 0, 12)) // 2 past the burst
	require.NoError(t, err)
	d, err = s.Check(t0, gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 200*time.Millisecond, d.RetryAfter, "until the debt has drained")
	assert.Equal(t, int64(12), d.CurrentCount)
	d2, err := s.Check(t0, gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, d, d2, "a peek changes nothing")
}

// Refunds never make credit and say what they gave back; charges go past
// the burst as debt and say by how much.
func TestGCRARefundAndCharge(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.Unix(1_750_000_000, 0)
	r := gcraReq("k", 10, time.Second, 0, 0) // T = 100 ms, B = 10

	_, n, err := s.Refund(t0, gcraReq("k", 10, time.Second, 0, 3))
	require.NoError(t, err)
	assert.Zero(t, n, "nothing to refund on an absent key")
	assert.Zero(t, s.Stats().GCRAKeys, "and no key made")

	r.Hits = 6
	_, err = s.Check(t0, r)
	require.NoError(t, err)
	// 150 ms later the level is 450 ms: 4.5 hits, refunded as 5.
	d, n, err := s.Refund(t0.Add(150*time.Millisecond), gcraReq("k", 10, time.Second, 0, 8))
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)
	assert.Equal(t, int64(10), d.Remaining, "empty, not in credit")
	assert.Zero(t, d.ResetAfter)
	r.Hits = 10
	d, err = s.Check(t0.Add(150*time.Millisecond), r)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the whole burst again, no more")
	r.Hits = 1
	d, err = s.Check(t0.Add(150*time.Millisecond), r)
	require.NoError(t, err)
	assert.False(t, d.Allowed)

	// A charge of 25 on a full bucket: 25 past the burst, 35 hits of level.
	d, over, err := s.Charge(t0.Add(150*time.Millisecond), gcraReq("k", 10, time.Second, 0, 25))
	require.NoError(t, err)
	assert.Equal(t, int64(25), over)
	assert.False(t, d.Allowed)
	assert.Equal(t, int64(10), d.CurrentCount)
	assert.Equal(t, 3500*time.Millisecond, d.ResetAfter)
	assert.Equal(t, 2600*time.Millisecond, d.RetryAfter, "until one hit fits: 35 − 10 + 1 intervals")
	// A huge charge saturates instead of wrapping.
	_, over, err = s.Charge(t0, gcraReq("k", 10, time.Second, 0, 1<<62))
	require.NoError(t, err)
	assert.Positive(t, over)
	d, err = s.Check(t0, gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Positive(t, d.RetryAfter)
}

// Reservations on a bucket: a settle below the reservation refunds the
// difference, above it charges it, a release refunds all, a hold's expiry
// gives its hits back, a reservation's expiry keeps them.
func TestGCRAReservations(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	r := gcraReq("k", 10, time.Second, 0, 6) // T = 100 ms, B = 10
	peek := func(s *Store, at time.Time) Decision {
		d, err := s.Check(at, gcraReq("k", 10, time.Second, 0, 0))
		require.NoError(t, err)
		return d
	}
	reserve := func(s *Store, op Op) string {
		rr := r
		rr.Op, rr.TTL = op, time.Second
		d, err := s.Apply(t0, rr)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, int64(4), d.Remaining)
		return d.Adjust.Reservation
	}
	settle := func(s *Store, token string, op Op, cost int64) Decision {
		d, err := s.Apply(t0.Add(100*time.Millisecond), Request{Key: "k", Limit: 10, Window: time.Second, Algorithm: GCRA,
			Op: op, Reservation: token, Hits: cost})
		require.NoError(t, err)
		return d
	}

	s := newStore(t, 1, nil)
	d := settle(s, reserve(s, OpReserve), OpSettle, 2)
	assert.Equal(t, int64(4), d.Adjust.Refunded)
	assert.Equal(t, 100*time.Millisecond, peek(s, t0.Add(100*time.Millisecond)).ResetAfter, "2 hits counted, 1 drained")

	s = newStore(t, 1, nil)
	d = settle(s, reserve(s, OpReserve), OpSettle, 14)
	assert.Equal(t, int64(3), d.Adjust.Over, "5 hits left at the settle, 8 more: 3 past the burst")
	assert.Equal(t, 1300*time.Millisecond, peek(s, t0.Add(100*time.Millisecond)).ResetAfter)

	s = newStore(t, 1, nil)
	d = settle(s, reserve(s, OpHold), OpRelease, 0)
	assert.Equal(t, int64(5), d.Adjust.Refunded, "what had not drained")
	assert.Zero(t, peek(s, t0.Add(100*time.Millisecond)).ResetAfter)

	s = newStore(t, 1, nil)
	reserve(s, OpHold)
	assert.Equal(t, 1, s.Reservations().Expire(t0.Add(time.Second)))
	assert.Equal(t, Decision{Allowed: true, Limit: 10, Remaining: 10}, peek(s, t0.Add(time.Second)))

	s = newStore(t, 1, nil)
	reserve(s, OpReserve)
	assert.Equal(t, 1, s.Reservations().Expire(t0.Add(time.Second)))
	d, err := s.Check(t0.Add(time.Second), gcraReq("k", 10, time.Second, 0, 10))
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a reservation's expiry counts its hits as used: drained by now")
}

// A hold's expiry is a refund of what of its hits has not drained: what
// drained stays drained, and the hits counted after it stay counted.
func TestGCRAHoldExpiryRefundsWhatIsLeft(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.Unix(1_750_000_000, 0)
	hold := gcraReq("k", 10, time.Second, 0, 6)
	hold.Op, hold.TTL = OpHold, 300*time.Millisecond
	d, err := s.Apply(t0, hold)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, err = s.Check(t0.Add(100*time.Millisecond), gcraReq("k", 10, time.Second, 0, 2)) // level 700 ms
	require.NoError(t, err)
	assert.Equal(t, 1, s.Reservations().Expire(t0.Add(300*time.Millisecond)))
	// At 300 ms the level is 500 ms: 300 ms of the hold's, then the 2
	// hits'. The hold takes its 3 back, not 6 (which would empty the
	// bucket, and admit the 2 hits again).
	d, err = s.Check(t0.Add(300*time.Millisecond), gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, 200*time.Millisecond, d.ResetAfter)
	assert.Equal(t, uint64(3), s.Reservations().Stats().RefundedHits, "what of the hold had not drained")
}

// A settle refunds no more of a reservation's hits than have not
// drained: once they have, the bucket's level is other hits', and giving
// it back would admit past the burst.
func TestGCRASettleRefundsNoDrainedHits(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.Unix(1_750_000_000, 0)
	res := gcraReq("k", 10, time.Second, 0, 10) // T = 100 ms, B = 10
	res.Op, res.TTL = OpReserve, 10*time.Second
	d, err := s.Apply(t0, res)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	token := d.Adjust.Reservation
	t1 := t0.Add(2 * time.Second) // the 10 hits drained by t0 + 1 s
	d, err = s.Check(t1, gcraReq("k", 10, time.Second, 0, 10))
	require.NoError(t, err)
	require.True(t, d.Allowed, "a full burst again")
	d, err = s.Apply(t1, Request{Key: "k", Limit: 10, Window: time.Second, Algorithm: GCRA, Op: OpSettle, Reservation: token, Hits: 0})
	require.NoError(t, err)
	assert.Zero(t, d.Adjust.Refunded, "its hits had drained")
	d, err = s.Check(t1, gcraReq("k", 10, time.Second, 0, 1))
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the burst taken at t1 stays counted")
}

// An all-or-nothing check holds each limit and releases them when one
// refuses: the bucket that admitted is as before.
func TestGCRAAllOrNothingReleases(t *testing.T) {
	s := newStore(t, 3, nil)
	t0 := time.Unix(1_750_000_000, 0)
	a := gcraReq("a", 10, time.Second, 0, 5)
	a.Op = OpHold
	b := Request{Key: "b", Limit: 3, Window: time.Second, Hits: 3, Op: OpHold}
	_, err := s.Check(t0, Request{Key: "b", Limit: 3, Window: time.Second, Hits: 3})
	require.NoError(t, err)
	da, err := s.Apply(t0, a)
	require.NoError(t, err)
	require.True(t, da.Allowed)
	db, err := s.Apply(t0, b)
	require.NoError(t, err)
	require.False(t, db.Allowed)
	rel := gcraReq("a", 10, time.Second, 0, 0)
	rel.Op, rel.Reservation = OpRelease, da.Adjust.Reservation
	d, err := s.Apply(t0, rel)
	require.NoError(t, err)
	assert.Equal(t, int64(5), d.Adjust.Refunded)
	assert.Equal(t, int64(10), d.Remaining)
}

// A handoff conserves levels: the receiver adds what was sent (to what it
// holds), the sender takes it out, and what the sender admitted after the
// snapshot stays with it. MergeAdded's states are what Forget takes back.
func TestGCRAHandoffConservesLevels(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	a, b := newStore(t, 1, nil), newStore(t, 1, nil)
	check := func(s *Store, at time.Time, hits int64) Decision {
		d, err := s.Check(at, gcraReq("k", 10, time.Second, 20, hits))
		require.NoError(t, err)
		return d
	}
	check(a, t0, 6) // level 600 ms on a
	check(b, t0, 3) // and 300 ms on b
	snap := a.Transfer().SnapshotPartition(0, t0.Add(100*time.Millisecond))
	require.Equal(t, []KeyState{{Key: "k", Window: time.Second, Algorithm: GCRA, TAT: t0.Add(600 * time.Millisecond).UnixNano()}}, snap)
	check(a, t0.Add(100*time.Millisecond), 2) // admitted after the snapshot: 700 ms now

	added, errs := b.Transfer().MergeAdded(t0.Add(200*time.Millisecond), snap)
	require.Empty(t, errs)
	// At 200 ms the sent level is 400 ms; b's own 100 ms: 500 ms.
	assert.Equal(t, 500*time.Millisecond, check(b, t0.Add(200*time.Millisecond), 0).ResetAfter)
	require.Equal(t, []KeyState{{Key: "k", Window: time.Second, Algorithm: GCRA, TAT: t0.Add(600 * time.Millisecond).UnixNano()}}, added)

	a.Transfer().Forget(t0.Add(200*time.Millisecond), snap)
	// a's 600 ms level less the sent 400 ms: the 2 hits admitted after.
	assert.Equal(t, 200*time.Millisecond, check(a, t0.Add(200*time.Millisecond), 0).ResetAfter)
	a.Transfer().Forget(t0.Add(200*time.Millisecond), snap)
	assert.Zero(t, a.Stats().GCRAKeys, "forgotten past empty: deleted, never credit")

	// b's level drains once, whatever members' levels it sums: 450 ms at
	// 250 ms, less the sent level as of then, 350 ms.
	b.Transfer().Forget(t0.Add(250*time.Millisecond), added)
	assert.Equal(t, 100*time.Millisecond, check(b, t0.Add(250*time.Millisecond), 0).ResetAfter)

	// A drained state adds nothing; a negative TAT is refused.
	added, errs = b.Transfer().MergeAdded(t0.Add(time.Hour), snap)
	assert.Empty(t, errs)
	assert.Empty(t, added)
	_, errs = b.Transfer().Merge(t0, []KeyState{{Key: "k", Window: time.Second, Algorithm: GCRA, TAT: -1}})
	require.Len(t, errs, 1)
	var ae *ArgumentError
	require.ErrorAs(t, errs[0], &ae)
	assert.Equal(t, "state", ae.Field)
}

// A bucket's TAT moves by the two clocks' difference, to the ns of the
// whole milliseconds Rebase reads, both ways; a drained one stays drained.
func TestGCRARebase(t *testing.T) {
	sent := time.UnixMilli(1_750_000_000_000)
	ks := KeyState{Key: "k", Window: time.Second, Algorithm: GCRA, TAT: sent.Add(300*time.Millisecond + 7).UnixNano()}
	ahead := ks.Rebased(sent, sent.Add(2*time.Second))
	assert.Equal(t, ks.TAT+int64(2*time.Second), ahead.TAT)
	behind := ks.Rebased(sent, sent.Add(-2*time.Second))
	assert.Equal(t, ks.TAT-int64(2*time.Second), behind.TAT)
	states := []KeyState{ks, {Key: "e", Window: time.Second, Algorithm: GCRA}}
	Rebase(states, sent, sent.Add(time.Second))
	assert.Equal(t, ks.TAT+int64(time.Second), states[0].TAT)
	assert.Zero(t, states[1].TAT, "an empty bucket stays empty")
	assert.Zero(t, KeyState{Algorithm: GCRA, TAT: 5}.Rebased(time.Unix(10, 0), time.Unix(0, 0)).TAT, "moved before the epoch: empty")

	// Merged after the rebase, the level is the sender's at its now.
	s := newStore(t, 1, nil)
	_, errs := s.Transfer().Merge(sent.Add(2*time.Second), []KeyState{ahead})
	require.Empty(t, errs)
	d, err := s.Check(sent.Add(2*time.Second), gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, 300*time.Millisecond+7, d.ResetAfter)
}

// The journal carries every change of a bucket: a check's (in place when
// repeated), a refund's, a merge's, a forget's, and a reset's tombstone; a
// denial or a peek changes nothing and journals nothing.
func TestGCRAChangesAreJournaled(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.TrackChanges = true })
	t0 := time.Unix(1_750_000_000, 0)
	bucket := func(tat time.Time) KeyState {
		ks := KeyState{Key: "k", Window: time.Second, Algorithm: GCRA}
		if !tat.IsZero() {
			ks.TAT = tat.UnixNano()
		}
		return ks
	}
	take := func(at time.Time) []KeyState { return s.Changes().Take(nil, 0, at) }

	for range 3 {
		_, err := s.Check(t0, gcraReq("k", 10, time.Second, 0, 2))
		require.NoError(t, err)
	}
	assert.Equal(t, []KeyState{bucket(t0.Add(600 * time.Millisecond))}, take(t0), "three checks, one record")
	_, err := s.Check(t0, gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	_, err = s.Check(t0, gcraReq("k", 10, time.Second, 0, 5))
	require.NoError(t, err)
	assert.Empty(t, take(t0), "a peek and a denial change nothing")

	_, _, err = s.Refund(t0, gcraReq("k", 10, time.Second, 0, 1))
	require.NoError(t, err)
	_, errs := s.Transfer().Merge(t0, []KeyState{bucket(t0.Add(100 * time.Millisecond))})
	require.Empty(t, errs)
	assert.Equal(t, []KeyState{bucket(t0.Add(600 * time.Millisecond))}, take(t0))

	s.Transfer().Forget(t0, []KeyState{bucket(t0.Add(100 * time.Millisecond))})
	assert.Equal(t, []KeyState{bucket(t0.Add(500 * time.Millisecond))}, take(t0))

	assert.True(t, s.Admin().Delete(t0, "k", time.Second, GCRA))
	assert.Equal(t, []KeyState{bucket(time.Time{})}, take(t0), "the reset's tombstone")
	assert.True(t, take(t0) == nil)

	// Checked, then reset within one round: the tombstone, then nothing more.
	_, err = s.Check(t0, gcraReq("k", 10, time.Second, 0, 1))
	require.NoError(t, err)
	assert.Equal(t, 1, s.Admin().DeleteKey(t0, "k"))
	got := take(t0)
	require.NotEmpty(t, got)
	assert.True(t, got[len(got)-1].Empty(), "the last word is the tombstone: %+v", got)

	// A record taken after the bucket drained comes as its tombstone.
	_, err = s.Check(t0, gcraReq("k", 10, time.Second, 0, 1))
	require.NoError(t, err)
	assert.Equal(t, []KeyState{bucket(time.Time{})}, take(t0.Add(time.Second)))
}

// Sweep frees a drained bucket, and only that.
func TestGCRASweep(t *testing.T) {
	s := newStore(t, 2, nil)
	t0 := time.Unix(1_750_000_000, 0)
	for i, hits := range []int64{1, 5} {
		_, err := s.Check(t0, gcraReq(fmt.Sprint("k", i), 10, time.Second, 0, hits))
		require.NoError(t, err)
	}
	assert.Equal(t, 2, s.Stats().GCRAKeys)
	assert.Zero(t, s.Sweep(t0.Add(100*time.Millisecond-time.Nanosecond)))
	assert.Equal(t, 1, s.Sweep(t0.Add(100*time.Millisecond)), "k0 drained at 100 ms")
	assert.Equal(t, 1, s.Stats().GCRAKeys)
	assert.Equal(t, 1, s.Sweep(t0.Add(500*time.Millisecond)))
	st := s.Stats()
	assert.Zero(t, st.GCRAKeys)
	assert.Zero(t, st.KeyBytes)
	assert.Equal(t, uint64(2), st.Expired)
}

// At the key cap a bucket is sampled like any key: a drained one is freed,
// else the one that empties soonest is evicted (or the new key refused).
func TestGCRAKeyCap(t *testing.T) {
	t0 := time.Unix(1_750_000_000, 0)
	s := newStore(t, 1, func(c *Config) { c.MaxKeys = 3 })
	for i, hits := range []int64{5, 1, 9} {
		_, err := s.Check(t0, gcraReq(fmt.Sprint("k", i), 10, time.Second, 0, hits))
		require.NoError(t, err)
	}
	_, err := s.Check(t0, Request{Key: "counter", Limit: 10, Window: time.Hour, Hits: 1})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.Stats().Evictions)
	d, err := s.Check(t0, gcraReq("k1", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.Zero(t, d.CurrentCount, "k1, emptying soonest, was evicted")
	d, err = s.Check(t0, gcraReq("k0", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, int64(5), d.CurrentCount)

	_, err = s.Check(t0.Add(600*time.Millisecond), gcraReq("new", 10, time.Second, 0, 1))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), s.Stats().Expired, "k0 had drained: freed, not evicted")

	r := newStore(t, 1, func(c *Config) { c.MaxKeys = 1; c.Overflow = OverflowReject })
	_, err = r.Check(t0, gcraReq("a", 10, time.Second, 0, 1))
	require.NoError(t, err)
	_, err = r.Check(t0, gcraReq("b", 10, time.Second, 0, 1))
	require.ErrorIs(t, err, ErrCapacity)
	_, _, err = r.Charge(t0, gcraReq("b", 10, time.Second, 0, 1))
	require.ErrorIs(t, err, ErrCapacity)
	d, err = r.Check(t0, gcraReq("b", 10, time.Second, 0, 0))
	require.NoError(t, err, "a peek works at capacity")
	assert.True(t, d.Allowed)
}

// The same key and window under the counter, the log and GCRA are three
// limits: none sees the others' hits, and each is reset alone.
func TestGCRAIsIndependentOfTheWindows(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.Unix(1_750_000_000, 0)
	for _, a := range []Algorithm{SlidingWindowCounter, SlidingWindowLog, GCRA} {
		d, err := s.Check(t0, Request{Key: "k", Limit: 5, Window: time.Second, Algorithm: a, Hits: 5})
		require.NoError(t, err)
		require.True(t, d.Allowed, "%s: a fresh limit", a)
	}
	st := s.Stats()
	assert.Equal(t, [3]int{1, 1, 1}, [3]int{st.CounterKeys, st.LogKeys, st.GCRAKeys})
	views, err := s.Admin().Inspect(t0, "k", 5, 1)
	require.NoError(t, err)
	require.Len(t, views, 3)
	g := views[2]
	assert.Equal(t, GCRA, g.Algorithm)
	assert.Equal(t, int64(5), g.Count)
	assert.Equal(t, time.Second, g.ResetAfter)
	assert.Equal(t, 200*time.Millisecond, g.NextAllow)
	assert.Equal(t, t0.Add(time.Second).UnixNano(), g.TAT.UnixNano())

	assert.True(t, s.Admin().Delete(t0, "k", time.Second, GCRA))
	st = s.Stats()
	assert.Equal(t, [3]int{1, 1, 0}, [3]int{st.CounterKeys, st.LogKeys, st.GCRAKeys})
	assert.False(t, s.Admin().Delete(t0, "k", time.Second, GCRA))
	d, err := s.Check(t0, Request{Key: "k", Limit: 5, Window: time.Second, Hits: 1})
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the counter still counts its own")
}

// Bad GCRA input is refused naming its field, on every path.
func TestGCRAValidation(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.Unix(1_750_000_000, 0)
	for _, c := range []struct {
		r     Request
		field string
	}{
		{gcraReq("k", 2000, time.Millisecond, 0, 1), "limit"},                  // faster than one per µs
		{gcraReq("k", 10, time.Second, -1, 1), "burst"},                        // negative
		{gcraReq("k", 10, time.Second, 0, 11), "hits"},                         // past the burst
		{gcraReq("k", 10, time.Second, 3, 4), "hits"},                          // past a burst below the limit
		{Request{Key: "k", Limit: 10, Window: time.Second, Burst: 5}, "burst"}, // not GCRA
	} {
		_, err := s.Check(t0, c.r)
		var ae *ArgumentError
		require.True(t, errors.As(err, &ae), "%+v: %v", c.r, err)
		assert.Equal(t, c.field, ae.Field, "%+v: %v", c.r, err)
	}
	// A refund or a charge may exceed the burst, as it may the limit.
	_, _, err := s.Charge(t0, gcraReq("k", 10, time.Second, 3, 8))
	require.NoError(t, err)
	_, _, err = s.Refund(t0, gcraReq("k", 10, time.Second, 3, 8))
	require.NoError(t, err)
}

// A burst whose refill B·T is past int64's nanoseconds is refused as one
// past the longest window, not let through by the product's wrap (1e10 ×
// 1 s wraps negative): such a bucket took 9e9 hits at once, its TAT
// wrapped before now, and Sweep then freed it as empty, admitting them
// again at once.
func TestGCRABurstWhoseRefillWrapsIsRefused(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.Unix(1_750_000_000, 0)
	for _, r := range []Request{
		gcraReq("k", 1, time.Second, 10_000_000_000, 9_000_000_000),
		gcraReq("k", 1, 366*24*time.Hour, 300, 1), // 300 × 366 days wraps too
	} {
		_, err := s.Check(t0, r)
		var ae *ArgumentError
		require.True(t, errors.As(err, &ae), "%+v: %v", r, err)
		assert.Equal(t, "burst", ae.Field, "%+v: %v", r, err)
	}
}

// A node whose longest window is longer than the time int64's
// nanoseconds have left keeps a bucket whose TAT would pass their end at
// the end: it does not wrap before now, where Sweep would free it as
// empty and the next check find it so.
func TestGCRATATPastInt64SaturatesInsteadOfWrapping(t *testing.T) {
	s := newStore(t, 1, func(c *Config) { c.MaxWindow = math.MaxInt64 })
	t0 := time.Unix(1_750_000_000, 0)
	r := gcraReq("k", 1, 250*365*24*time.Hour, 0, 1) // T = 250 years: now + T > 2^63 ns
	d, err := s.Check(t0, r)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	s.Sweep(t0)
	d, err = s.Check(t0, r)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the bucket holds its hit")
}

// HitsAt of a GCRA limit is a bucket that took the hits at at: Forget of
// it at at undoes them exactly.
func TestGCRAHitsAtUndoes(t *testing.T) {
	s := newStore(t, 1, nil)
	t0 := time.UnixMilli(1_750_000_000_000)
	r := gcraReq("k", 10, time.Second, 0, 3)
	_, err := s.Check(t0, r)
	require.NoError(t, err)
	_, err = s.Check(t0, r)
	require.NoError(t, err)
	s.Transfer().Forget(t0, []KeyState{r.HitsAt(t0.UnixMilli(), 3)})
	d, err := s.Check(t0, gcraReq("k", 10, time.Second, 0, 0))
	require.NoError(t, err)
	assert.Equal(t, 300*time.Millisecond, d.ResetAfter)
	assert.Equal(t, t0.Add(300*time.Millisecond).UnixMilli(), r.HitsAt(t0.UnixMilli(), 3).Expiry())
}

// FuzzGCRAMatchesModel replays a fuzzer-chosen script (each 4-byte op:
// key, time step, hits, limit and op) against the store and the reference
// GCRA.
func FuzzGCRAMatchesModel(f *testing.F) {
	f.Add(uint8(10), []byte{0, 1, 1, 0, 1, 0, 1, 0, 0, 200, 2, 1})
	f.Add(uint8(3), []byte{0, 0, 9, 0xc5, 0, 3, 1, 1, 0, 2, 4, 0xe1, 0, 20, 1, 1})
	f.Fuzz(func(t *testing.T, window uint8, script []byte) {
		w := time.Duration(window%64+1) * time.Millisecond
		s := newStore(t, 2, nil)
		refs := [2]refGCRA{}
		now := int64(1_750_000_000_000_000_000)
		for i := 0; i+4 <= len(script) && i < 4*200; i += 4 {
			k := int(script[i]) % 2
			limit := int64(script[i+3]%13) + 1
			burst := int64(script[i+3]>>4) % 3 * limit / 2
			r := gcraReq(fmt.Sprint(k), limit, w, burst, 0)
			T, B := int64(emissionInterval(w, limit)), r.BurstOrLimit()
			now += int64(script[i+1]) * T / 16
			at := time.Unix(0, now)
			switch op := script[i+3] >> 5; op {
			case 6:
				r.Hits = 1 + int64(script[i+2])%(3*B)
				_, over, err := s.Charge(at, r)
				require.NoError(t, err)
				_, _, want := refs[k].charge(now, T, B, r.Hits)
				require.Equal(t, want, over, "op %d", i/4)
			case 7:
				r.Hits = 1 + int64(script[i+2])%(2*B)
				_, got, err := s.Refund(at, r)
				require.NoError(t, err)
				require.Equal(t, refs[k].refund(now, T, r.Hits), got, "op %d", i/4)
			default:
				r.Hits = int64(script[i+2]) % (B + 1)
				d, err := s.Check(at, r)
				require.NoError(t, err)
				want := refs[k].check(now, T, B, r.Hits)
				want.Limit = limit
				require.Equal(t, want, d, "op %d", i/4)
			}
		}
	})
}
