package jepsenlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// newKeysHistory is a synthetic history of one GCRA key (20 per second,
// burst 10: key 0) and one concurrency key (2 slots, freed after 2 s:
// key 1), on three nodes.
func newKeysHistory(ops []Op, events ...Event) History {
	h := history(ops, events...)
	h.Keys = []KeySpec{
		{Name: "bucket", Algorithm: pb.Algorithm_GCRA, Limit: 20, Window: time.Second, Burst: 10},
		{Name: "slots", Algorithm: pb.Algorithm_CONCURRENCY, Limit: 2, Window: 2 * time.Second},
	}
	return h
}

// paced is a bucket's exact admissions: its burst at 100 ms, one a
// millisecond apart, then one every 50 ms (its rate) until 2 s; each
// answered a millisecond after it was sent.
func paced() []Op {
	var ops []Op
	for i := range 10 {
		at := 100*ms + time.Duration(i)*ms
		ops = append(ops, allowed(0, at, at+ms, "n1"))
	}
	for at := 150 * ms; at < 2*time.Second; at += 50 * ms {
		ops = append(ops, allowed(0, at, at+ms, "n1"))
	}
	return ops
}

// A bucket that admits exactly its burst and its rate passes; one more
// admission, inside the first interval, is a certain violation, named by
// its key, its interval and its numbers.
func TestGCRABoundIsBurstPlusRateTimesTheInterval(t *testing.T) {
	r := Analyze(newKeysHistory(paced()))
	assert.Empty(t, r.Violations())
	assert.Positive(t, r.GCRA.Windows)
	assert.InDelta(t, 1.0, r.GCRA.Worst, 1e-9, "at the bound, and never over it")
	assert.Zero(t, r.GCRA.Excess)
	assert.Zero(t, r.Log.Windows+r.CounterFixed.Windows+r.Concurrency.Windows, "a GCRA key is no window")

	r = Analyze(newKeysHistory(append(paced(), allowed(0, 125*ms, 126*ms, "n1"))))
	require.Len(t, r.GCRA.Violations, 1, "only the intervals from 100 ms hold one too many")
	v := r.GCRA.Violations[0]
	assert.Equal(t, Violation{Key: "bucket", From: 100 * ms, To: 126 * ms, Allowed: 11, Bound: 10, Deciders: 1,
		Kind: KindInterval, PerDecider: "burst 10 + ⌊20 per 1s × 27ms⌋ = 10"}, v)
	assert.Equal(t, "bucket: 11 allowed from 100ms to 126ms, bound 10 (1 deciders × (burst 10 + ⌊20 per 1s × 27ms⌋ = 10))", v.String())
	assert.InDelta(t, 1.1, r.GCRA.Worst, 1e-9)
	assert.Equal(t, 1, r.GCRA.Excess, "an exact bucket refuses the eleventh")
	assert.Equal(t, 1, r.GCRA.ExcessCalm)
}

// An admission that may have been decided late, when the bucket had
// refilled, is never charged early: no violation.
func TestGCRAGivesTheBenefitOfTheDoubt(t *testing.T) {
	ops := paced()[:10] // the burst, from 100 ms
	// Decided at 110 ms it was one too many; at 155 ms, one refilled.
	r := Analyze(newKeysHistory(append(ops, allowed(0, 110*ms, 160*ms, "n1"))))
	assert.Empty(t, r.Violations())
	assert.Zero(t, r.GCRA.Excess)

	r = Analyze(newKeysHistory(append(ops, allowed(0, 110*ms, 140*ms, "n1"))))
	require.Len(t, r.GCRA.Violations, 1, "decided by 140 ms: before any refilled (at 150 ms)")
	assert.Equal(t, 1, r.GCRA.Excess)
}

// A decider 10 % over the rate never holds more than its burst over a
// short interval, but does over a long one: the intervals have any
// length.
func TestGCRAFindsARateOverTheLimitOverALongInterval(t *testing.T) {
	var ops []Op
	for at := 100 * ms; at < 9*time.Second; at += 45 * ms { // 22.2 per second
		ops = append(ops, allowed(0, at, at+ms, "n1"))
	}
	r := Analyze(newKeysHistory(ops))
	require.NotEmpty(t, r.GCRA.Violations)
	first := r.GCRA.Violations[0]
	assert.Equal(t, 100*ms, first.From)
	assert.Greater(t, first.To-first.From, 4*time.Second, "over the burst only after %s", first.To-first.From)
	assert.Greater(t, r.GCRA.Excess, 0)
}

// The bound follows the phases as a window's does: two sides may each
// spend the bucket, out loud; a third burst is one too many, and an
// over-admission nobody marked degraded is one whatever the phase.
func TestGCRABoundFollowsThePhasesAndTheSilentRule(t *testing.T) {
	partition := Event{Name: "partition", Begin: 2 * time.Second, End: 2*time.Second + ms, Steady: 2, Fault: true,
		Expect: map[string][]string{"n1": {"n1"}}, Sides: map[string]int{"n1": 0}}
	views := []View{{Node: "n1", Asked: 2400 * ms, Got: 2500 * ms, Alive: []string{"n1"}}}
	// n1, cut off from the owner, answers by fallback: degraded.
	burst := func(from time.Duration, n int, owners ...string) []Op {
		var ops []Op
		for i := range n {
			at := from + time.Duration(i)*ms
			ops = append(ops, allowed(0, at, at+ms, owners[i%len(owners)]))
			ops[i].Degraded = ops[i].Owner == "n1"
		}
		return ops
	}
	h := newKeysHistory(burst(3*time.Second, 20, "n1", "n2"), partition)
	h.Views = views
	r := Analyze(h)
	assert.Empty(t, r.Violations(), "two sides, a burst each")
	assert.InDelta(t, 2.0, r.GCRA.Worst, 1e-9)

	// None degraded (a degraded answer counts its node as one more
	// decider): 21 is one too many for two.
	h.Ops = burst(3*time.Second, 21, "n2", "n3")
	r = Analyze(h)
	require.NotEmpty(t, r.GCRA.Violations)
	v := r.GCRA.Violations[0]
	assert.Equal(t, 21, v.Allowed)
	assert.Equal(t, 20, v.Bound)
	assert.Equal(t, 2, v.Deciders)
	assert.False(t, v.Silent, "over the two sides' bound (the shorter intervals are silent too)")
	assert.Equal(t, "bucket: 21 allowed from 3s to 3.021s, bound 20 (2 deciders × (burst 10 + ⌊20 per 1s × 22ms⌋ = 10))", v.String())

	// While the partition is being detected every node may decide, but
	// not silently.
	h = newKeysHistory(burst(2100*ms, 12, "n2", "n3"), partition)
	h.Views = views
	r = Analyze(h)
	require.NotEmpty(t, r.GCRA.Violations)
	v = r.GCRA.Violations[0]
	assert.True(t, v.Silent)
	assert.Equal(t, 10, v.Bound)
	assert.Contains(t, v.String(), "12 allowed from 2.1s to 2.112s, over one decider's burst 10 + ⌊20 per 1s × 13ms⌋ = 10 with no degraded answer (silent over-admission)")
	h.Ops[3].Degraded = true // n3 said so
	assert.Empty(t, Analyze(h).Violations())
}

// A node whose clock runs fast refills its bucket that much faster in
// real time (Scenario.ClockRate).
func TestGCRABoundFollowsAFastClock(t *testing.T) {
	var ops []Op
	for at := 100 * ms; at < 9*time.Second; at += 45 * ms { // 11 % over the rate
		ops = append(ops, allowed(0, at, at+ms, "n1"))
	}
	h := newKeysHistory(ops)
	require.NotEmpty(t, Analyze(h).GCRA.Violations)
	h.ClockRate = 0.12 // a clock 12 % fast: 22.4 per real second
	r := Analyze(h)
	assert.Empty(t, r.Violations())
	r.MaxWorst = 1.0
	assert.Empty(t, r.OverPromise(), "gcra worst %.3f", r.GCRA.Worst)
}

func TestGCRAWorstIsHeldToThePromise(t *testing.T) {
	r := Analyze(newKeysHistory(append(paced(), allowed(0, 125*ms, 126*ms, "n1"))))
	r.MaxWorst = 1.05
	assert.Equal(t, "gcra worst 1.10× > the promised 1.05×", r.OverPromise())
}

// A kind of key's own promise, where given, holds it instead of the run's:
// a slack of admissions for small limits is looser on 2 slots or a burst
// of 3 than on the windows' keys.
func TestAKindOfKeysOwnPromise(t *testing.T) {
	r := &Result{MaxWorst: 1.5}
	r.Concurrency.Worst, r.GCRA.Worst = 2.0, 1.0
	assert.Contains(t, r.OverPromise(), "concurrency worst 2.00× > the promised 1.50×")
	r.MaxWorstConcurrency = 3.5
	assert.Empty(t, r.OverPromise(), "2 slots held of 1 is within 1 + 5 admissions over it")
	r.GCRA.Worst, r.MaxWorstGCRA = 2.1, 2.0
	assert.Contains(t, r.OverPromise(), "gcra worst 2.10× > the promised 2.00×")
	r.Log.Worst = 1.6
	assert.Contains(t, r.OverPromise(), "log worst 1.60× > the promised 1.50×", "the windows keep the run's")
}
