package limiter

import (
	"encoding/base64"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	clusterSecret  = []byte("the cluster's secret, 16+ bytes")
	attackerSecret = []byte("not the cluster's secret at all")
)

func secretStore(t testing.TB, secrets ...[]byte) *Store {
	t.Helper()
	return newStore(t, 4, func(c *Config) { c.TokenKeys = NewTokenKeys(secrets, "test") })
}

// mint makes the token t for r under keys: what a caller holding the
// keys could make.
func mint(keys *TokenKeys, r Request, t token) string {
	t.version = tokenVersion
	t.binding = bindingOf(&r)
	keys.sign(&t, &r)
	return t.encode()
}

// rewritten is tok with edit applied to its fields and its MAC kept:
// what a caller without the key can make.
func rewritten(t *testing.T, tok string, edit func(*token)) string {
	t.Helper()
	x, err := decodeToken(tok)
	require.NoError(t, err)
	edit(&x)
	return x.encode()
}

// The reproduction: on a full key (7 counted, limit 10) a
// reservation of 3 whose token said 10 hits, settled at 3, refunded 7
// and let 7 more in past the limit.
func TestARewrittenTokenSpendsNothing(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			for name, s := range map[string]*Store{"secret": secretStore(t, clusterSecret), "public": newStore(t, 4, nil)} {
				t0 := time.UnixMilli(1_000_000_020)
				r := reserveReq(alg, 10, 3)
				_, err := s.Check(t0, Request{Key: r.Key, Limit: 10, Window: time.Minute, Algorithm: alg, Hits: 7})
				require.NoError(t, err)
				d, err := s.Apply(t0, r)
				require.NoError(t, err)
				require.True(t, d.Allowed)
				tok := d.Adjust.Reservation

				rewrites := map[string]func(*token){
					"hits":   func(x *token) { x.hits = 10 },
					"expiry": func(x *token) { x.expires += time.Hour.Milliseconds() },
					"at":     func(x *token) { x.at-- },
					"flags":  func(x *token) { x.hold = !x.hold },
					"id":     func(x *token) { x.id ^= 1 },
					"mac":    func(x *token) { x.mac[0] ^= 1 },
				} // version 1, the MAC stripped: TestVersion1TokensSettleOnlyByTheirRecord
				for what, edit := range rewrites {
					for _, op := range []Op{OpSettle, OpRelease} {
						bad := settleReq(r, rewritten(t, tok, edit), 3)
						if op == OpRelease {
							bad.Op, bad.Hits = OpRelease, 0
						}
						_, err := s.Apply(t0.Add(time.Millisecond), bad)
						var ae *ArgumentError
						require.ErrorAs(t, err, &ae, "%s: a token with its %s rewritten, %s", name, what, op)
						assert.Equal(t, "reservation", ae.Field)
						assert.EqualValues(t, 10, peekCount(t, s, t0.Add(time.Millisecond), r), "%s: %s rewritten refunded", name, what)
					}
				}
				// Re-signed: with the public key anyone can; the owner's
				// record still says 3 hits, and the record wins.
				for what, edit := range rewrites {
					if what == "id" || what == "mac" {
						continue // a fresh id has no record: see TestAMadeUpTokenFreesNothing
					}
					x, err := decodeToken(tok)
					require.NoError(t, err)
					edit(&x)
					_, err = s.Apply(t0.Add(time.Millisecond), settleReq(r, mint(s.reservations.keys, r, x), 3))
					var ae *ArgumentError
					require.ErrorAs(t, err, &ae, "%s: re-signed with its %s rewritten", name, what)
					assert.Equal(t, "reservation", ae.Field)
					assert.Contains(t, ae.Reason, "record")
				}
				// The authentic token settles, once.
				d, err = s.Apply(t0.Add(2*time.Millisecond), settleReq(r, tok, 3))
				require.NoError(t, err)
				assert.Equal(t, Adjustment{Settled: SettledNow}, *d.Adjust)
				assert.EqualValues(t, 10, peekCount(t, s, t0.Add(2*time.Millisecond), r))
				d, err = s.Apply(t0.Add(2*time.Millisecond), r)
				require.NoError(t, err)
				assert.False(t, d.Allowed, "%s: the key is full", name)
			}
		})
	}
}

// The second reproduction: a token with a fresh id, RELEASEd,
// refunded every hit of the window. Without the cluster's secret no
// caller can make one.
func TestAMadeUpTokenFreesNothing(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := secretStore(t, clusterSecret)
			t0 := time.UnixMilli(1_000_000_020)
			r := reserveReq(alg, 10, 3)
			_, err := s.Check(t0, Request{Key: r.Key, Limit: 10, Window: time.Minute, Algorithm: alg, Hits: 10})
			require.NoError(t, err)
			made := token{id: 42, at: t0.UnixMilli(), hits: 10, expires: t0.Add(time.Minute).UnixMilli()}
			for name, keys := range map[string]*TokenKeys{"another secret": NewTokenKeys([][]byte{attackerSecret}, "test"),
				"the public key": NewTokenKeys(nil, "test"), "no key": publicKeys} {
				rel := settleReq(r, mint(keys, r, made), 0)
				rel.Op = OpRelease
				_, err = s.Apply(t0.Add(time.Millisecond), rel)
				var ae *ArgumentError
				require.ErrorAs(t, err, &ae, name)
				assert.Equal(t, "reservation", ae.Field)
				assert.Contains(t, ae.Reason, "authentic")
				assert.EqualValues(t, 10, peekCount(t, s, t0.Add(time.Millisecond), r), name)
			}
			assert.Zero(t, s.Reservations().Stats().RefundedHits)
		})
	}
}

// Without a cluster secret the token key is public: anyone who knows the
// cluster's name, a caller with only the reserve scope included, can
// make a token that verifies. A settle or release of a token this store
// has no record of then refunds nothing and frees no slot, made up or
// the heir's, answered SETTLED_UNKNOWN; before, a fresh-id RELEASE
// refunded the window's count, which the refund scope is there to
// refuse. A cost above the token's hits is still charged, as a CHECK of
// it would be. With a secret the heir refunds an authentic token
// (TestSettleFromATokenOnAnotherStore, TestTheHeirVerifiesTheToken).
func TestWithoutASecretATokenWithNoRecordRefundsNothing(t *testing.T) {
	t0 := time.UnixMilli(1_000_000_020)
	for _, alg := range []Algorithm{SlidingWindowCounter, SlidingWindowLog, GCRA} {
		t.Run(alg.String()+", made up", func(t *testing.T) {
			s := newStore(t, 4, nil) // no secret: the public key
			r := reserveReq(alg, 10, 3)
			_, err := s.Check(t0, Request{Key: r.Key, Limit: 10, Window: time.Minute, Algorithm: alg, Hits: 10})
			require.NoError(t, err)
			made := mint(s.reservations.keys, r, token{id: 42, at: t0.UnixMilli(), hits: 10, expires: t0.Add(time.Minute).UnixMilli()})
			rel := settleReq(r, made, 0)
			rel.Op = OpRelease
			d, err := s.Apply(t0.Add(time.Millisecond), rel)
			require.NoError(t, err, "it verifies: the key is public")
			assert.Equal(t, Adjustment{Settled: SettledUnknown}, *d.Adjust)
			assert.EqualValues(t, 10, peekCount(t, s, t0.Add(time.Millisecond), r), "nothing refunded")

			over := mint(s.reservations.keys, r, token{id: 43, at: t0.UnixMilli(), hits: 1, expires: t0.Add(time.Minute).UnixMilli()})
			d, err = s.Apply(t0.Add(time.Millisecond), settleReq(r, over, 3))
			require.NoError(t, err)
			assert.EqualValues(t, 2, d.Adjust.Over, "a cost above its hits is charged")
			assert.Zero(t, d.Adjust.Refunded)
			assert.Zero(t, s.Reservations().Stats().RefundedHits)
		})
		t.Run(alg.String()+", on the heir", func(t *testing.T) {
			owner, heir := newStore(t, 4, nil), newStore(t, 4, nil)
			r := reserveReq(alg, 100, 40)
			d, err := owner.Apply(t0, r)
			require.NoError(t, err)
			heir.Transfer().Merge(t0, owner.Transfer().SnapshotPartition(owner.Transfer().PartitionOf(r.Key), t0))
			d, err = heir.Apply(t0.Add(time.Millisecond), settleReq(r, d.Adjust.Reservation, 10))
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Settled: SettledUnknown}, *d.Adjust, "authentic, but nobody could tell")
			assert.EqualValues(t, 40, peekCount(t, heir, t0.Add(time.Millisecond), r), "the reservation counts as used")
		})
	}
	t.Run("a concurrency slot on the heir", func(t *testing.T) {
		owner, heir := newStore(t, 1, nil), newStore(t, 1, nil)
		r := slots(2)
		tok := acquire(t, owner, t0, r).Adjust.Reservation
		_, errs := heir.Transfer().Merge(t0, owner.Transfer().SnapshotPartition(owner.Transfer().PartitionOf(r.Key), t0))
		require.Empty(t, errs)
		assert.Equal(t, Adjustment{Settled: SettledUnknown}, release(t, heir, t0.Add(time.Millisecond), r, tok))
		assert.EqualValues(t, 1, inFlight(t, heir, t0.Add(time.Millisecond), r), "the slot stays held until its window ends")
	})
}

// The heir of a failed owner has no record: it settles an authentic
// token by its MAC, refuses one of another cluster's secret, and accepts
// both of a rotation's secrets.
func TestTheHeirVerifiesTheToken(t *testing.T) {
	newSecret := []byte("the next secret of the cluster")
	t0 := time.UnixMilli(1_000_000_020)
	r := reserveReq(SlidingWindowCounter, 100, 40)
	reserveOn := func(owner *Store) string {
		d, err := owner.Apply(t0, r)
		require.NoError(t, err)
		return d.Adjust.Reservation
	}
	cases := []struct {
		name  string
		owner [][]byte
		heir  [][]byte
		ok    bool
	}{
		{"same secret", [][]byte{clusterSecret}, [][]byte{clusterSecret}, true},
		{"rotation: the heir signs with the new one already", [][]byte{clusterSecret, newSecret}, [][]byte{newSecret, clusterSecret}, true},
		{"another cluster's secret", [][]byte{attackerSecret}, [][]byte{clusterSecret}, false},
		{"the heir has no secret", [][]byte{clusterSecret}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			owner, heir := secretStore(t, c.owner...), secretStore(t, c.heir...)
			tok := reserveOn(owner)
			heir.Transfer().Merge(t0, owner.Transfer().SnapshotPartition(owner.Transfer().PartitionOf(r.Key), t0))
			d, err := heir.Apply(t0.Add(time.Second), settleReq(r, tok, 10))
			if !c.ok {
				var ae *ArgumentError
				require.ErrorAs(t, err, &ae)
				assert.Equal(t, "reservation", ae.Field)
				assert.EqualValues(t, 40, peekCount(t, heir, t0.Add(time.Second), r))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Refunded: 30, Settled: SettledUnknown}, *d.Adjust)
			// A retry counts once, and its record is the heir's now.
			d, err = heir.Apply(t0.Add(2*time.Second), settleReq(r, tok, 10))
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Refunded: 30, Settled: SettledBefore}, *d.Adjust)
			_, err = heir.Apply(t0.Add(2*time.Second), settleReq(r, tok, 11))
			var ce *ConflictError
			require.ErrorAs(t, err, &ce)
			assert.EqualValues(t, 10, peekCount(t, heir, t0.Add(2*time.Second), r))
		})
	}
}

// The third reproduction, with tokens anyone can make (no
// secret): 1,100 settles of unknown tokens on a node that remembers
// 1,000 reservations made every RESERVE answer RESOURCE_EXHAUSTED for an
// hour. They are remembered apart now, and bounded.
func TestUnknownSettlesLeaveRoomForReservations(t *testing.T) {
	const partitions, maxUnknown = 4, 40
	s := newStore(t, partitions, func(c *Config) { c.MaxReservations = 1000; c.MaxUnknownSettles = maxUnknown })
	t0 := time.UnixMilli(1_000_000_000)
	r := reserveReq(SlidingWindowCounter, 10, 1)
	var last string
	for i := range 1100 {
		k := r
		k.Key = fmt.Sprint("k", i)
		last = mint(s.reservations.keys, k, token{id: uint64(i + 1), at: t0.UnixMilli(), hits: 1, expires: t0.Add(time.Hour).UnixMilli()})
		d, err := s.Apply(t0, settleReq(k, last, 0))
		require.NoError(t, err)
		require.Equal(t, SettledUnknown, d.Adjust.Settled)
	}
	st := s.Reservations().Stats()
	assert.Zero(t, st.Remembered)
	assert.LessOrEqual(t, st.RememberedUnknown, int64(maxUnknown))
	assert.Positive(t, st.RememberedUnknown)
	for i := range 1000 {
		k := r
		k.Key = fmt.Sprint("r", i)
		d, err := s.Apply(t0, k)
		require.NoError(t, err, "reservation %d", i)
		require.True(t, d.Allowed)
	}
	// The newest is remembered: its retry counts once.
	k := r
	k.Key = "k1099"
	d, err := s.Apply(t0, settleReq(k, last, 0))
	require.NoError(t, err)
	assert.Equal(t, SettledBefore, d.Adjust.Settled)
	// They are forgotten at the longest TTL.
	s.Reservations().Expire(t0.Add(time.Hour))
	assert.Zero(t, s.Reservations().Stats().RememberedUnknown)
}

// A settle is idempotent: its retry repeats the first answer. One at
// another cost is no retry, and is refused with the first one's numbers;
// a release after a settle, as a deferred release does, changes nothing.
func TestASettleRetriedAtAnotherCost(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, 4, nil)
			t0 := time.UnixMilli(1_000_000_020)
			r := reserveReq(alg, 5000, 2000)
			d, err := s.Apply(t0, r)
			require.NoError(t, err)
			tok := d.Adjust.Reservation
			d, err = s.Apply(t0, settleReq(r, tok, 700))
			require.NoError(t, err)
			require.Equal(t, Adjustment{Refunded: 1300, Settled: SettledNow}, *d.Adjust)

			_, err = s.Apply(t0, settleReq(r, tok, 2500))
			var ce *ConflictError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "hits", ce.Field)
			assert.Contains(t, ce.Reason, "cost of 700 (refunded 1300, over 0)")
			assert.EqualValues(t, 700, peekCount(t, s, t0, r))

			rel := settleReq(r, tok, 0)
			rel.Op = OpRelease
			d, err = s.Apply(t0, rel)
			require.NoError(t, err)
			assert.Equal(t, Adjustment{Refunded: 1300, Settled: SettledBefore}, *d.Adjust)
			assert.EqualValues(t, 700, peekCount(t, s, t0, r))

			// Released first: a settle at a cost is refused, at 0 a retry.
			d, err = s.Apply(t0, r)
			require.NoError(t, err)
			tok = d.Adjust.Reservation
			_, err = s.Apply(t0, func() Request { x := settleReq(r, tok, 0); x.Op = OpRelease; return x }())
			require.NoError(t, err)
			_, err = s.Apply(t0, settleReq(r, tok, 1))
			require.ErrorAs(t, err, &ce)
			d, err = s.Apply(t0, settleReq(r, tok, 0))
			require.NoError(t, err)
			assert.Equal(t, SettledBefore, d.Adjust.Settled)
		})
	}
}

// Tokens of version 1, from a node before MACs, carry none: they settle
// where their record is, and nowhere else.
func TestVersion1TokensSettleOnlyByTheirRecord(t *testing.T) {
	t0 := time.UnixMilli(1_000_000_020)
	r := reserveReq(SlidingWindowCounter, 100, 40)
	owner, heir := newStore(t, 4, nil), newStore(t, 4, nil)
	d, err := owner.Apply(t0, r)
	require.NoError(t, err)
	v1 := rewritten(t, d.Adjust.Reservation, func(x *token) { x.version = tokenV1 })
	require.Len(t, v1, 51, "the old tokens' length")
	heir.Transfer().Merge(t0, owner.Transfer().SnapshotPartition(owner.Transfer().PartitionOf(r.Key), t0))
	_, err = heir.Apply(t0, settleReq(r, v1, 10))
	var ae *ArgumentError
	require.ErrorAs(t, err, &ae)
	assert.Contains(t, ae.Reason, "version 1")
	d, err = owner.Apply(t0, settleReq(r, v1, 10))
	require.NoError(t, err)
	assert.Equal(t, Adjustment{Refunded: 30, Settled: SettledNow}, *d.Adjust)
}

// fuzzReservation is the reservation FuzzReservationToken's store holds:
// 3 hits at 5,000 ms on a key where 7 others were counted, under the
// store's secret.
var fuzzReservation = token{version: tokenVersion, id: 1, at: 5000, hits: 3, expires: 65_000}

func fuzzRequest() Request {
	return Request{Key: "k", Limit: 10, Window: time.Minute, Op: OpRelease, Algorithm: SlidingWindowLog}
}

// FuzzReservationToken: whatever a token says, settling with it fails
// only with an answer naming a field, and nothing but the authentic
// token frees a hit: not one rewritten (hits, expiry, time, flags, id,
// version), nor one signed without the cluster's secret.
func FuzzReservationToken(f *testing.F) {
	r := fuzzRequest()
	authentic := mint(NewTokenKeys([][]byte{clusterSecret}, ""), r, fuzzReservation)
	f.Add(authentic)
	raw, _ := base64.RawURLEncoding.DecodeString(authentic)
	flip := func(i int, bit byte) string {
		b := append([]byte(nil), raw...)
		b[i] ^= bit
		return base64.RawURLEncoding.EncodeToString(b)
	}
	f.Add(flip(1+7, 1))   // id
	f.Add(flip(9+7, 1))   // at
	f.Add(flip(17+7, 8))  // hits: 3 → 11
	f.Add(flip(25+6, 1))  // expires
	f.Add(flip(33, 1))    // flags: a hold
	f.Add(flip(33, 2))    // unknown flags
	f.Add(flip(37, 1))    // binding
	f.Add(flip(40, 0x80)) // MAC
	f.Add(flip(0, 3))     // version 1, with a MAC that no version 1 has
	for _, edit := range []func(*token){
		func(x *token) { x.hits = 10 }, func(x *token) { x.id = 2 }, func(x *token) { x.expires = 1 << 62 },
		func(x *token) { x.hold = true }, func(x *token) { x.at = 4000 },
	} {
		x := fuzzReservation
		edit(&x)
		f.Add(mint(NewTokenKeys(nil, ""), r, x))                      // signed with the public key
		f.Add(mint(NewTokenKeys([][]byte{attackerSecret}, ""), r, x)) // with another secret
		x.version = tokenV1
		f.Add(x.encode())
	}
	f.Add("")
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := decodeToken(s)
		if err != nil {
			var ae *ArgumentError
			if !errors.As(err, &ae) || ae.Field != "reservation" {
				t.Fatalf("decodeToken(%q): %v, want an ArgumentError naming reservation", s, err)
			}
		} else {
			if tok.hits < 1 || tok.at < 0 || tok.expires < tok.at {
				t.Fatalf("decodeToken(%q) accepted %+v", s, tok)
			}
			if again := tok.encode(); again != s {
				t.Fatalf("decodeToken(%q) re-encodes as %q", s, again)
			}
		}
		st := newStore(t, 2, func(c *Config) { c.TokenKeys = NewTokenKeys([][]byte{clusterSecret}, "") })
		at := time.UnixMilli(fuzzReservation.at)
		others := r
		others.Op, others.Hits = OpCheck, 7
		_, err = st.Check(at, others)
		require.NoError(t, err)
		sh := st.shards.of(r.Key)
		sh.mu.Lock()
		_, _, err = st.reservations.checkStamped(sh, stateKey{r.Key, r.stateWindow()}, fuzzReservation.at, fuzzReservation.at*int64(time.Millisecond), Request{Key: r.Key, Limit: 10,
			Window: time.Minute, Algorithm: r.Algorithm, Hits: 3})
		sh.remember(fuzzReservation.id, reservation{key: stateKey{r.Key, r.stateWindow()}, alg: r.Algorithm, hits: 3,
			at: fuzzReservation.at, expires: fuzzReservation.expires, tokenExpires: fuzzReservation.expires})
		sh.mu.Unlock()
		require.NoError(t, err)

		rel := r
		rel.Reservation = s
		_, err = st.Apply(at.Add(time.Second), rel)
		if err != nil && !errors.As(err, new(*ArgumentError)) {
			t.Fatal("release: ", err)
		}
		n := peekCount(t, st, at.Add(time.Second), r)
		switch {
		case s == authentic && (err != nil || n != 7):
			t.Fatalf("the authentic token: %v, count %d, want 7", err, n)
		case s != authentic && err == nil:
			t.Fatalf("release(%q) accepted; count %d", s, n)
		case s != authentic && n != 10:
			t.Fatalf("release(%q) left %d, want 10", s, n)
		}
	})
}

// A settle's answer gives the count after it, whether it refunded or
// charged (a charge's own answer gives the count before it, a check's).
func TestASettleAnswersWithTheCountAfterIt(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			s := newStore(t, 4, nil)
			t0 := time.UnixMilli(1_000_000_020)
			r := reserveReq(alg, 100, 40)
			for _, c := range []struct{ cost, after int64 }{{10, 10}, {40, 50}, {90, 140}} {
				d, err := s.Apply(t0, r)
				require.NoError(t, err)
				d, err = s.Apply(t0, settleReq(r, d.Adjust.Reservation, c.cost))
				require.NoError(t, err)
				assert.Equal(t, c.after, d.CurrentCount, "settled at %d", c.cost)
				assert.Equal(t, c.after, peekCount(t, s, t0, r))
				if c.after > 100 {
					continue
				}
				assert.Equal(t, 100-c.after, d.Remaining)
			}
		})
	}
}
