package limiter

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var algorithms = []Algorithm{SlidingWindowCounter, SlidingWindowLog}

func reserveReq(alg Algorithm, limit, hits int64) Request {
	return Request{Key: "budget", Limit: limit, Window: time.Minute, Algorithm: alg, Op: OpReserve, Hits: hits}
}

func settleReq(r Request, tok string, cost int64) Request {
	r.Op, r.Reservation, r.Hits, r.TTL = OpSettle, tok, cost, 0
	return r
}

func peekCount(t *testing.T, s *Store, now time.Time, r Request) int64 {
	t.Helper()
	r.Op, r.Hits, r.Reservation, r.TTL = OpCheck, 0, "", 0
	d, err := s.Check(now, r)
	require.NoError(t, err)
	return d.CurrentCount
}

func TestSettleRefundsOrChargesTheDifference(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, 4, nil)
			t0 := time.UnixMilli(1_000_000_020) // mid-window for the counter
			r := reserveReq(alg, 100, 40)
			d, err := s.Apply(t0, r)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.NotNil(t, d.Adjust)
			assert.Equal(t, time.Minute, d.Adjust.ExpiresIn)
			tok := d.Adjust.Reservation
			// Another caller counts 10 after the reservation.
			_, err = s.Check(t0.Add(time.Millisecond), Request{Key: r.Key, Limit: 100, Window: time.Minute, Algorithm: alg, Hits: 10})
			require.NoError(t, err)
			assert.EqualValues(t, 50, peekCount(t, s, t0.Add(2*time.Millisecond), r))

			// The work used 15: 25 come back, from the reservation's hits.
			d, err = s.Apply(t0.Add(3*time.Millisecond), settleReq(r, tok, 15))
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Refunded: 25, Settled: SettledNow}, *d.Adjust)
			assert.EqualValues(t, 25, peekCount(t, s, t0.Add(4*time.Millisecond), r))

			// A retry counts once: the first answer again, nothing applied.
			d, err = s.Apply(t0.Add(5*time.Millisecond), settleReq(r, tok, 15))
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Refunded: 25, Settled: SettledBefore}, *d.Adjust)
			assert.EqualValues(t, 25, peekCount(t, s, t0.Add(6*time.Millisecond), r))

			// A second reservation costs more than reserved: debt past the limit.
			d, err = s.Apply(t0.Add(7*time.Millisecond), reserveReq(alg, 100, 70))
			require.NoError(t, err)
			require.True(t, d.Allowed)
			d, err = s.Apply(t0.Add(8*time.Millisecond), settleReq(r, d.Adjust.Reservation, 90))
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Over: 15, Settled: SettledNow}, *d.Adjust)
			assert.False(t, d.Allowed)
			assert.EqualValues(t, 115, peekCount(t, s, t0.Add(9*time.Millisecond), r))
			st := s.Reservations().Stats()
			assert.EqualValues(t, 2, st.Reserved)
			assert.EqualValues(t, 2, st.Settled)
			assert.EqualValues(t, 1, st.Retried)
			assert.EqualValues(t, 25, st.RefundedHits)
			assert.EqualValues(t, 20, st.ChargedHits)
		})
	}
}

func TestReleaseAndExpiry(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, 4, nil)
			t0 := time.UnixMilli(1_000_000_020)
			r := reserveReq(alg, 100, 30)
			r.TTL = time.Second
			reserved, err := s.Apply(t0, r)
			require.NoError(t, err)
			rel := settleReq(r, reserved.Adjust.Reservation, 0)
			rel.Op = OpRelease
			d, err := s.Apply(t0.Add(time.Millisecond), rel)
			require.NoError(t, err)
			assert.EqualValues(t, 30, d.Adjust.Refunded)
			assert.EqualValues(t, 0, peekCount(t, s, t0.Add(2*time.Millisecond), r))

			// Unsettled, a reservation expires as used; a hold as released.
			_, err = s.Apply(t0, r)
			require.NoError(t, err)
			h := r
			h.Op, h.Hits = OpHold, 20
			held, err := s.Apply(t0, h)
			require.NoError(t, err)
			assert.EqualValues(t, 50, peekCount(t, s, t0.Add(10*time.Millisecond), r))
			assert.Equal(t, 2, len(s.Reservations().Open(r.Key, t0.Add(10*time.Millisecond), 10)))
			assert.Equal(t, 0, s.Reservations().Expire(t0.Add(999*time.Millisecond)))
			assert.Equal(t, 2, s.Reservations().Expire(t0.Add(time.Second)))
			assert.EqualValues(t, 30, peekCount(t, s, t0.Add(time.Second), r))
			assert.Empty(t, s.Reservations().Open(r.Key, t0.Add(time.Second), 10))
			assert.Zero(t, s.Reservations().Stats().Remembered)

			// Settling an expired hold charges its whole cost: it was released.
			d, err = s.Apply(t0.Add(2*time.Second), settleReq(h, held.Adjust.Reservation, 20))
			require.NoError(t, err)
			assert.Equal(t, SettledExpired, d.Adjust.Settled)
			assert.EqualValues(t, 50, peekCount(t, s, t0.Add(2*time.Second), r))
		})
	}
}

func TestSettleFromATokenOnAnotherStore(t *testing.T) {
	// The owner failed: its heir holds the replicated state, not the
	// record. The token is authentic (cluster secret): without one a
	// token with no record refunds nothing
	// (TestWithoutASecretATokenWithNoRecordRefundsNothing).
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			owner, heir := secretStore(t, clusterSecret), secretStore(t, clusterSecret)
			t0 := time.UnixMilli(1_000_000_020)
			r := reserveReq(alg, 100, 40)
			d, err := owner.Apply(t0, r)
			require.NoError(t, err)
			heir.Transfer().Merge(t0, owner.Transfer().SnapshotPartition(owner.Transfer().PartitionOf(r.Key), t0))
			d, err = heir.Apply(t0.Add(time.Second), settleReq(r, d.Adjust.Reservation, 10))
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Refunded: 30, Settled: SettledUnknown}, *d.Adjust)
			assert.EqualValues(t, 10, peekCount(t, heir, t0.Add(time.Second), r))
		})
	}
}

func TestReservationArgumentsNameTheField(t *testing.T) {
	s := newStore(t, 4, func(c *Config) { c.MaxReservations = 1 })
	t0 := time.UnixMilli(1_000_000_000)
	r := reserveReq(SlidingWindowCounter, 10, 5)
	d, err := s.Apply(t0, r)
	require.NoError(t, err)
	tok := d.Adjust.Reservation
	other := r
	other.Key = "other"
	cases := []struct {
		r     Request
		field string
	}{
		{func() Request { x := r; x.Hits = 0; return x }(), "hits"},
		{func() Request { x := r; x.TTL = 2 * time.Hour; return x }(), "ttl_ms"},
		{func() Request { x := r; x.Reservation = tok; return x }(), "reservation"},
		{settleReq(r, "", 1), "reservation"},
		{settleReq(r, "bogus", 1), "reservation"},
		{settleReq(r, tok[:len(tok)-1]+map[bool]string{true: "B", false: "A"}[tok[len(tok)-1] == 'A'], 1), "reservation"}, // its last character changed
		{settleReq(other, tok, 1), "reservation"},
		{settleReq(r, tok, -1), "hits"},
		{func() Request { x := settleReq(r, tok, 3); x.Op = OpRelease; return x }(), "hits"},
		{func() Request { x := r; x.Op = 99; return x }(), "op"},
		{func() Request { x := r; x.Op, x.TTL = OpCheck, time.Second; return x }(), "ttl_ms"},
		{func() Request { x := r; x.Op, x.TTL = OpCharge, time.Second; return x }(), "ttl_ms"},
	}
	for i, c := range cases {
		_, err := s.Apply(t0, c.r)
		var ae *ArgumentError
		require.ErrorAs(t, err, &ae, "case %d", i)
		assert.Equal(t, c.field, ae.Field, "case %d: %v", i, err)
	}
	_, err = s.Apply(t0, r) // the one slot is taken
	assert.ErrorIs(t, err, ErrCapacity)
}

// TestConcurrentReservationsNeverPassTheBudget: 64 callers reserve
// estimates on one budget and settle what they used, at once; the count
// never exceeds the limit, and ends at exactly the costs settled.
func TestConcurrentReservationsNeverPassTheBudget(t *testing.T) {
	seed := seedFromEnv(t, uint64(time.Now().UnixNano()))
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			const limit, callers, rounds = 1000, 64, 40
			s := newStore(t, 8, nil)
			t0 := time.UnixMilli(1_000_000_000)
			var used, peakOpen atomic.Int64
			var wg sync.WaitGroup
			for c := range callers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(c)))
					for range rounds {
						est := 1 + rng.Int64N(50)
						d, err := s.Apply(t0, reserveReq(alg, limit, est))
						if !assert.NoError(t, err) || !d.Allowed {
							continue
						}
						cost := rng.Int64N(est + 1)
						_, err = s.Apply(t0, settleReq(reserveReq(alg, limit, est), d.Adjust.Reservation, cost))
						assert.NoError(t, err)
						used.Add(cost)
					}
				})
			}
			wg.Go(func() {
				for range 2000 {
					n := peekCount(t, s, t0, reserveReq(alg, limit, 1))
					peakOpen.Store(max(peakOpen.Load(), n))
				}
			})
			wg.Wait()
			if !assert.LessOrEqual(t, peakOpen.Load(), int64(limit)) ||
				!assert.Equal(t, used.Load(), peekCount(t, s, t0, reserveReq(alg, limit, 1))) {
				t.Logf("replay with PEERLIMIT_SEED=%d", seed)
			}
		})
	}
}
