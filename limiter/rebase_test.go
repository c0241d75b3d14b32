package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
)

// The rebase rules, case by case: a 10 s counter in window k with 40
// hits in the window before and 30 in its own, sent 6 s into it.
func TestRebasedCounter(t *testing.T) {
	const w = 10_000
	k := int64(170_000_000)
	sent := time.UnixMilli(k*w + 6_000)
	in := KeyState{Key: "k", Window: w * time.Millisecond, WindowID: k, Prev: 40, Curr: 30}
	counter := func(id, prev, curr int64) KeyState {
		out := in
		out.WindowID, out.Prev, out.Curr = id, prev, curr
		return out
	}
	for _, c := range []struct {
		name  string
		sent  time.Time // default: sent
		delta time.Duration
		want  KeyState
	}{
		{name: "δ 0", delta: 0, want: in},
		{name: "δ +1 ms: a transit moves no hit", delta: time.Millisecond, want: in},
		{name: "δ −1 ms", delta: -time.Millisecond, want: in},
		{name: "δ +2 ms", delta: 2 * time.Millisecond, want: in},
		{name: "δ −2 ms", delta: -2 * time.Millisecond, want: in},
		{name: "δ +W: the id alone moves", delta: w * time.Millisecond, want: counter(k+1, 40, 30)},
		{name: "δ −2W", delta: -2 * w * time.Millisecond, want: counter(k-2, 40, 30)},
		// Sender 3 s behind: prev's last 3 s (12 hits) land in our k.
		{name: "δ +3 s", delta: 3 * time.Second, want: counter(k, 28, 42)},
		// Sender 5 s behind: prev's last half (20) in our k, curr's last
		// 1 s of 6 (5) in k+1; prev's first half has left every window.
		{name: "δ +5 s, curr across a boundary", delta: 5 * time.Second, want: counter(k+1, 45, 5)},
		// Sender 3 s ahead: prev's first 3 s (12) fall two windows back
		// and go; curr's first 3 s of 6 (15) land in our k−1.
		{name: "δ −3 s", delta: -3 * time.Second, want: counter(k, 43, 15)},
		{name: "δ +13 s, more than W", delta: 13 * time.Second, want: counter(k+1, 28, 42)},
		{name: "δ −13 s", delta: -13 * time.Second, want: counter(k-1, 43, 15)},
		// A state sent after its window ended: curr spans all of it, and
		// 1 ms later it is the window before: prev's 40 are gone.
		{name: "stale, δ +1 ms", sent: time.UnixMilli((k+1)*w + 2_000), delta: time.Millisecond, want: counter(k+1, 30, 0)},
		// Sent in the first ms of its window: curr's span is that ms, and
		// 2 ms back it is in k−1 whole, with prev's.
		{name: "sent at the window's start, δ −2 ms", sent: time.UnixMilli(k * w), delta: -2 * time.Millisecond, want: counter(k-1, 0, 70)},
		// From a clock that stepped back below k's start: curr is a point
		// at k's start.
		{name: "sent before its window, δ +1 s", sent: time.UnixMilli(k*w - 500), delta: time.Second, want: counter(k, 36, 34)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sent
			if !c.sent.IsZero() {
				s = c.sent
			}
			assert.Equal(t, c.want, in.Rebased(s, s.Add(c.delta)))
		})
	}
}

// A log moves by δ, whatever δ, across window boundaries alike; the
// sender's copy is left alone.
func TestRebasedLog(t *testing.T) {
	const w = 10_000
	k := int64(170_000_000)
	log := []int64{k*w - 1, k * w, k*w + 1, k*w + 5_000}
	in := KeyState{Key: "k", Window: w * time.Millisecond, Algorithm: SlidingWindowLog, Log: log}
	sent := time.UnixMilli(k*w + 6_000)
	for _, d := range []int64{0, 1, -1, 3_000, -3_000, 13_000, -13_000} {
		t.Run(fmt.Sprintf("δ %+d ms", d), func(t *testing.T) {
			got := in.Rebased(sent, sent.Add(time.Duration(d)*time.Millisecond))
			assert.Equal(t, []int64{k*w - 1 + d, k*w + d, k*w + 1 + d, k*w + 5_000 + d}, got.Log)
		})
	}
	assert.Equal(t, []int64{k*w - 1, k * w, k*w + 1, k*w + 5_000}, log, "Rebased copies")
	states := []KeyState{in}
	states[0].Log = append([]int64(nil), log...)
	Rebase(states, sent, sent.Add(time.Millisecond))
	assert.Equal(t, k*w, states[0].Log[0], "Rebase moves in place")
}

// What a rebase leaves alone: a calendar quota (a civil period, not a
// duration), a tombstone, invalid states, and times no clock makes.
func TestRebasedLeavesAlone(t *testing.T) {
	day, err := NewCalendar(CalendarDay, "Europe/Paris")
	require.NoError(t, err)
	sent := time.UnixMilli(1_700_000_006_000)
	for _, ks := range []KeyState{
		{Key: "cal", Calendar: day, WindowID: 1_699_999_200_000, Curr: 7},
		{Key: "gone", Window: time.Second},
		{Key: "neg", Window: time.Second, WindowID: 1_700_000_006, Prev: -1, Curr: 3},
		{Key: "nowin", WindowID: 1_700_000_006, Curr: 3},
		{Key: "far", Window: time.Second, WindowID: math.MaxInt64 / 2, Curr: 3},
		{Key: "farlog", Window: time.Second, Algorithm: SlidingWindowLog, Log: []int64{1, math.MaxInt64}},
	} {
		assert.Equal(t, ks, ks.Rebased(sent, sent.Add(1500*time.Millisecond)), ks.Key)
	}
	counter := KeyState{Key: "k", Window: time.Second, WindowID: 1_700_000_006, Curr: 3}
	assert.Equal(t, counter, counter.Rebased(time.UnixMilli(math.MaxInt64), sent), "a stamp no clock makes")
}

// Against the model itself: each bucket spread evenly over its span,
// moved, and integrated over this node's windows in floating point. The
// rebased counts are within one hit of it (each window gets at most two
// buckets' rounding, under half a hit each), the total kept but for what
// fell out of the last two windows, never a hit made.
func TestRebasedCounterMatchesTheModel(t *testing.T) {
	seed := seedFromEnv(t, 20261201)
	rng := rand.New(rand.NewPCG(seed, seed^0xc0ffee))
	for i := range 20_000 {
		w := []int64{1_000, 10_000, 60_000, 3_600_000}[rng.IntN(4)]
		k := 1_700_000_000_000/w + rng.Int64N(5)
		sent := k*w - w/4 + rng.Int64N(3*w) // before, in and after window k
		d := rng.Int64N(6*w+1) - 3*w
		if rng.IntN(4) == 0 {
			d = rng.Int64N(7) - 3 // a transit
		}
		in := KeyState{Key: "k", Window: time.Duration(w) * time.Millisecond, WindowID: k,
			Prev: rng.Int64N(2_000), Curr: rng.Int64N(2_000)}
		got := in.Rebased(time.UnixMilli(sent), time.UnixMilli(sent+d))
		what := fmt.Sprintf("seed %d, case %d: W %d, sent %d into k, δ %d: %+v → %+v", seed, i, w, sent-k*w, d, in, got)

		model := map[int64]float64{} // window → hits
		spread := func(count, from, to int64) {
			for j := floorDiv(from, w); j*w < to; j++ {
				lo, hi := max(from, j*w), min(to, (j+1)*w)
				model[j] += float64(count) * float64(hi-lo) / float64(to-from)
			}
		}
		spread(in.Prev, (k-1)*w+d, k*w+d)
		end := min(max(sent, k*w+1), (k+1)*w)
		spread(in.Curr, k*w+d, end+d)
		latest := floorDiv(end+d-1, w)
		require.Equal(t, latest, got.WindowID, what)
		require.InDelta(t, model[latest], float64(got.Curr), 1, what)
		require.InDelta(t, model[latest-1], float64(got.Prev), 1, what)
		require.LessOrEqual(t, got.Prev+got.Curr, in.Prev+in.Curr, what)
		if d%w != 0 && floorDiv((k-1)*w+d, w) >= latest-1 {
			require.Equal(t, in.Prev+in.Curr, got.Prev+got.Curr, "nothing fell out: %s", what)
		}
	}
}

// A transit of 1 or 2 ms on synced clocks moves at most one hit between
// prev and curr, for limits up to 1,000 per 10 s and a state sent at
// least 3 s into its window (sooner, curr's span is so short that its
// hits may move back whole, which changes no estimate: see Rebased).
func TestRebasedByATransitMovesAtMostOneHit(t *testing.T) {
	const w = 10_000
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 20_000 {
		k := 170_000_000 + rng.Int64N(10)
		sent := k*w + 3_000 + rng.Int64N(w-3_002)
		in := KeyState{Key: "k", Window: w * time.Millisecond, WindowID: k, Prev: rng.Int64N(1_001), Curr: rng.Int64N(1_001)}
		for _, d := range []int64{-2, -1, 1, 2} {
			got := in.Rebased(time.UnixMilli(sent), time.UnixMilli(sent+d))
			what := fmt.Sprintf("case %d, δ %d: %+v → %+v", i, d, in, got)
			require.Equal(t, k, got.WindowID, what)
			require.Equal(t, in.Prev+in.Curr, got.Prev+got.Curr, what)
			require.LessOrEqual(t, abs(got.Curr-in.Curr), int64(1), what)
		}
	}
}

// The point of it: a log from a sender whose clock is S off the
// receiver's, rebased on arrival and merged, counts on the receiver
// exactly what it counts on the sender, whatever S, so the receiver
// admits no more than the sender would have. (Unrebased, a sender behind
// by S loses its hits of the last S: see
// TestMergeLogAcrossSkewKeepsTheDocumentedBounds. A counter's estimate is
// not compared so: shared out over other windows, the same hits weigh
// differently in the counter's approximation, by up to the hits moved;
// TestRebasedCounterMatchesTheModel holds it to the model instead.)
func TestRebasedLogMergedAcrossSkewCountsWhatTheSenderCounts(t *testing.T) {
	seed := seedFromEnv(t, 20261202)
	rng := rand.New(rand.NewPCG(seed, seed^0xfeed))
	const w = 10_000
	for i := range 500 {
		skew := rng.Int64N(6*w+1) - 3*w // the sender's clock minus the receiver's
		senderMS := 1_700_000_000_000 + rng.Int64N(3*w)
		sent, now := time.UnixMilli(senderMS), time.UnixMilli(senderMS-skew)
		log := KeyState{Key: "k", Window: w * time.Millisecond, Algorithm: SlidingWindowLog}
		for range rng.IntN(30) {
			log.Log = append(log.Log, senderMS-rng.Int64N(w))
		}
		slices.Sort(log.Log)
		what := fmt.Sprintf("seed %d, case %d: S %d ms, sender at %d", seed, i, skew, senderMS)
		require.Equal(t, mergedEstimate(t, sent, log), mergedEstimate(t, now, log.Rebased(sent, now)), what)
	}
}

// Rebase with states a store took: a partition handed from a sender 5 s
// behind lands on the receiver's clock whole.
func TestRebaseOfASnapshot(t *testing.T) {
	a, b := newStore(t, partition.DefaultCount, nil), newStore(t, partition.DefaultCount, nil)
	senderNow := sec(1_700_000_004) // 4 s into a 10 s window
	req := Request{Key: "k", Limit: 10, Window: 10 * time.Second, Algorithm: SlidingWindowLog, Hits: 1}
	for range 10 {
		d, err := a.Check(senderNow, req)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	states := a.Transfer().SnapshotPartition(a.Transfer().PartitionOf("k"), senderNow)
	receiverNow := senderNow.Add(5 * time.Second)
	Rebase(states, senderNow, receiverNow)
	_, errs := b.Transfer().Merge(receiverNow, states)
	require.Empty(t, errs)
	for _, at := range []time.Duration{0, 9*time.Second + 999*time.Millisecond} {
		d, err := b.Check(receiverNow.Add(at), req)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "the sender's 10 hits count a whole window on the receiver's clock (+%v)", at)
	}
	d, err := b.Check(receiverNow.Add(10*time.Second), req)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}
