package limiter

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

// States carry window ids and log times on their sender's clock; these
// tests merge and forget them, not rebased (a sender that sends no clock
// reading: an older version), on a receiver whose clock differs by a skew
// S (sender minus receiver). rebase_test.go has the rebased case.

// estimate returns how many hits s counts for ks's key at now.
func estimate(t *testing.T, s *Store, now time.Time, ks KeyState) int64 {
	t.Helper()
	d, err := s.Check(now, Request{Key: ks.Key, Limit: 10_000, Window: ks.Window, Algorithm: ks.Algorithm})
	require.NoError(t, err)
	return d.CurrentCount
}

// mergedEstimate merges ks into a fresh store at now and returns its
// estimate there.
func mergedEstimate(t *testing.T, now time.Time, ks KeyState) int64 {
	t.Helper()
	s := newStore(t, partition.DefaultCount, nil)
	_, errs := s.Transfer().Merge(now, []KeyState{ks})
	require.Empty(t, errs)
	return estimate(t, s, now, ks)
}

// The audit's case: a sender 1 s ahead crossed into window k+1 200 ms ago,
// with the 100 hits of its window k as prev; it would admit 1 more. The
// receiver, still in k, must not admit 99.
func TestMergeFromASenderAheadKeepsItsPreviousCount(t *testing.T) {
	const w = 60_000
	k := int64(28_333_334)
	senderNow := time.UnixMilli((k+1)*w + 200)
	receiverNow := senderNow.Add(-time.Second)
	req := Request{Key: "k", Limit: 100, Window: w * time.Millisecond, Hits: 1}
	sent := KeyState{Key: "k", Window: req.Window, WindowID: k + 1, Prev: 100}

	require.EqualValues(t, 99, mergedEstimate(t, senderNow, sent), "the sender's own estimate")
	s := newStore(t, partition.DefaultCount, nil)
	_, errs := s.Transfer().Merge(receiverNow, []KeyState{sent})
	require.Empty(t, errs)
	allowed := 0
	for range 200 {
		d, err := s.Check(receiverNow, req)
		require.NoError(t, err)
		if d.Allowed {
			allowed++
		}
	}
	assert.LessOrEqual(t, allowed, 1, "no more than the sender would have admitted")
}

// A counter merged across a skew S, against the sender's own estimate at
// the same instant: a sender ahead (S ≥ 0) loses nothing, and over-counts
// at most max(prev, curr)·S/W while S < W; a sender behind loses at most
// max(prev, curr)·|S|/W while |S| < W (F5, documented, not fixed).
func TestMergeCounterAcrossSkewKeepsTheDocumentedBounds(t *testing.T) {
	seed := seedFromEnv(t, 20260424)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const w = 10_000
	for i := range 3000 {
		skew := rng.Int64N(4*w+1) - 2*w
		senderMS := 1_700_000_000_000 + rng.Int64N(3*w)
		ks := KeyState{Key: "k", Window: w * time.Millisecond, WindowID: floorDiv(senderMS, w) - rng.Int64N(3),
			Prev: rng.Int64N(101), Curr: rng.Int64N(101)}
		sender := mergedEstimate(t, time.UnixMilli(senderMS), ks)
		receiver := mergedEstimate(t, time.UnixMilli(senderMS-skew), ks)
		worst := max(ks.Prev, ks.Curr) * min(abs(skew), w)
		bound := (worst+w-1)/w + 1 // ceil, plus one for the two floors
		what := fmt.Sprintf("seed %d, case %d: S=%d ms, sender at %d, %+v", seed, i, skew, senderMS, ks)
		switch {
		case skew >= 0:
			require.GreaterOrEqual(t, receiver, sender, "a sender ahead loses nothing: %s", what)
			if skew < w {
				require.LessOrEqual(t, receiver, sender+bound, "over-denial bound: %s", what)
			}
		case -skew < w:
			require.GreaterOrEqual(t, receiver, sender-bound, "a sender behind loses at most max·|S|/W: %s", what)
		}
	}
}

func abs(x int64) int64 { return max(x, -x) }

// A log merged across a skew S: a sender ahead loses nothing now (its
// entries stay up to S longer); a sender behind loses exactly the entries
// it holds in the first |S| of its window (F4, documented, not fixed).
func TestMergeLogAcrossSkewKeepsTheDocumentedBounds(t *testing.T) {
	seed := seedFromEnv(t, 20260424)
	rng := rand.New(rand.NewPCG(seed, seed^0x51ed27))
	const w = 10_000
	for i := range 500 {
		skew := rng.Int64N(4*w+1) - 2*w
		senderMS := 1_700_000_000_000 + rng.Int64N(w)
		log := make([]int64, rng.IntN(20))
		early := int64(0) // entries in the first |S| of the sender's window
		for j := range log {
			log[j] = senderMS - rng.Int64N(w)
			if log[j] <= senderMS-w-skew {
				early++
			}
		}
		ks := KeyState{Key: "k", Window: w * time.Millisecond, Algorithm: SlidingWindowLog, Log: log}
		sender := mergedEstimate(t, time.UnixMilli(senderMS), ks)
		receiver := mergedEstimate(t, time.UnixMilli(senderMS-skew), ks)
		what := fmt.Sprintf("seed %d, case %d: S=%d ms, sender at %d, %v", seed, i, skew, senderMS, log)
		if skew >= 0 {
			require.Equal(t, sender, receiver, "a sender ahead loses nothing: %s", what)
		} else {
			require.Equal(t, sender-early, receiver, "a sender behind loses its first |S|: %s", what)
		}
	}
}

// A receiver that holds 40 hits of its own merges a state one or two
// windows ahead of its clock, then forgets that same state (a promoted
// replica taken back): its own 40 stay counted, exactly if it forgets in
// the window it merged in, at worst with the state's counts on top a
// window later, never fewer.
func TestForgetOfAStateAheadKeepsTheReceiversOwnHits(t *testing.T) {
	const w = time.Minute
	now := sec(1_700_000_000) // 20 s into its window
	k := floorDiv(now.UnixMilli(), w.Milliseconds())
	for _, ahead := range []int64{1, 2} {
		for _, later := range []time.Duration{0, w} {
			t.Run(fmt.Sprintf("%d ahead, forgotten %v later", ahead, later), func(t *testing.T) {
				s, own := newStore(t, partition.DefaultCount, nil), newStore(t, partition.DefaultCount, nil)
				req := Request{Key: "k", Limit: 1000, Window: w, Hits: 40}
				for _, st := range []*Store{s, own} {
					_, err := st.Check(now, req)
					require.NoError(t, err)
				}
				sent := KeyState{Key: "k", Window: w, WindowID: k + ahead, Prev: 50, Curr: 5}
				_, errs := s.Transfer().Merge(now, []KeyState{sent})
				require.Empty(t, errs)

				s.Transfer().Forget(now.Add(later), []KeyState{sent})
				got, want := estimate(t, s, now.Add(later), sent), estimate(t, own, now.Add(later), sent)
				assert.GreaterOrEqual(t, got, want, "the receiver's own hits stay")
				if later == 0 {
					assert.Equal(t, want, got, "what was merged is taken back, no more")
				}
				assert.LessOrEqual(t, got, want+sent.Prev+sent.Curr)
			})
		}
	}
}

// Whatever the skew of the state merged and however much later it is
// forgotten, Forget of what MergeAdded returned leaves the receiver
// counting exactly its own hits: what the failover's books rely on.
func TestForgetOfWhatMergeAddedTakesBackExactly(t *testing.T) {
	seed := seedFromEnv(t, 20260424)
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f491))
	const w = 10_000
	randomLog := func(at int64) []int64 {
		log := make([]int64, rng.IntN(8))
		for j := range log {
			log[j] = at - rng.Int64N(w)/500*500 // repeats on purpose
		}
		return log
	}
	for i := range 1000 {
		nowMS := 1_700_000_000_000 + rng.Int64N(w)
		skew := rng.Int64N(4*w+1) - 2*w
		own := KeyState{Key: "k", Window: w * time.Millisecond, WindowID: floorDiv(nowMS, w) - rng.Int64N(2),
			Prev: rng.Int64N(50), Curr: rng.Int64N(50)}
		sent := own
		sent.WindowID, sent.Prev, sent.Curr = floorDiv(nowMS+skew, w)-rng.Int64N(2), rng.Int64N(50), rng.Int64N(50)
		if i%2 == 1 {
			own = KeyState{Key: "k", Window: own.Window, Algorithm: SlidingWindowLog, Log: randomLog(nowMS)}
			sent = KeyState{Key: "k", Window: own.Window, Algorithm: SlidingWindowLog, Log: randomLog(nowMS + skew)}
		}
		s, ref := newStore(t, partition.DefaultCount, nil), newStore(t, partition.DefaultCount, nil)
		for _, st := range []*Store{s, ref} {
			_, errs := st.Transfer().Merge(time.UnixMilli(nowMS), []KeyState{own})
			require.Empty(t, errs)
		}
		added, errs := s.Transfer().MergeAdded(time.UnixMilli(nowMS), []KeyState{sent})
		require.Empty(t, errs)
		later := time.UnixMilli(nowMS + rng.Int64N(2*w))
		s.Transfer().Forget(later, added)
		require.Equal(t, estimate(t, ref, later, own), estimate(t, s, later, own),
			"seed %d, case %d: S=%d ms at %d, own %+v, sent %+v, added %+v", seed, i, skew, nowMS, own, sent, added)
	}
}
