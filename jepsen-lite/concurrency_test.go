package jepsenlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acquired is an admitted acquire of newKeysHistory's concurrency key
// (2 slots, freed after 2 s).
func acquired(slot int, inv, comp time.Duration, owner string) Op {
	return Op{Key: 1, Node: owner, Invoke: inv, Complete: comp, Outcome: Allowed, Owner: owner, Kind: AcquireOp, Slot: slot}
}

// released is an answered release of slot.
func released(slot int, inv, comp time.Duration) Op {
	return Op{Key: 1, Node: "n1", Invoke: inv, Complete: comp, Outcome: Allowed, Owner: "n1", Kind: ReleaseOp, Slot: slot}
}

// Two slots held at once is the limit; a third acquired while both are
// is a certain violation, named by its key, its instant and its numbers.
func TestConcurrencyBoundIsTheLimitInFlight(t *testing.T) {
	ops := []Op{
		acquired(1, 100*ms, 101*ms, "n1"), released(1, 300*ms, 301*ms),
		acquired(2, 110*ms, 111*ms, "n1"), released(2, 400*ms, 401*ms),
		acquired(3, 305*ms, 306*ms, "n1"), released(3, 500*ms, 501*ms), // slot 1's, freed at 300 ms
	}
	r := Analyze(newKeysHistory(ops))
	assert.Empty(t, r.Violations())
	assert.Positive(t, r.Concurrency.Windows)
	assert.InDelta(t, 1.0, r.Concurrency.Worst, 1e-9)
	assert.Zero(t, r.Concurrency.Excess)
	assert.Zero(t, r.GCRA.Windows+r.Log.Windows+r.CounterSliding.Windows, "a concurrency key is no window")

	r = Analyze(newKeysHistory(append(ops, acquired(4, 200*ms, 201*ms, "n1"), released(4, 250*ms, 251*ms))))
	require.Len(t, r.Concurrency.Violations, 1)
	v := r.Concurrency.Violations[0]
	assert.Equal(t, Violation{Key: "slots", From: 100 * ms, To: 201 * ms, Allowed: 3, Bound: 2, Deciders: 1, Kind: KindInFlight}, v)
	assert.Equal(t, "slots: 3 slots held at 201ms (acquired from 100ms), bound 2 (1 deciders)", v.String())
	assert.InDelta(t, 1.5, r.Concurrency.Worst, 1e-9)
	assert.Equal(t, 1, r.Concurrency.Excess, "an exact count refuses the third")
	assert.Equal(t, 1, r.Concurrency.ExcessCalm)
}

// A slot is held until its release is sent, not until the release is
// answered: a release answered at 320 ms may have been decided at
// 300 ms, and its slot rightly given at 305 ms to another client. (The
// other rule, held to the answer, calls this a violation.) An acquire
// is held from its answer, not its invoke, for the same reason.
func TestConcurrencyGivesTheBenefitOfTheDoubt(t *testing.T) {
	ops := []Op{
		acquired(1, 100*ms, 101*ms, "n1"), released(1, 300*ms, 320*ms),
		acquired(2, 110*ms, 111*ms, "n1"), released(2, 400*ms, 401*ms),
		acquired(3, 305*ms, 306*ms, "n1"), released(3, 500*ms, 501*ms),
		// Sent while both were held, answered once slot 3's release was
		// sent: may have been decided after it.
		acquired(4, 200*ms, 510*ms, "n1"),
	}
	r := Analyze(newKeysHistory(ops))
	assert.Empty(t, r.Violations())
	assert.Zero(t, r.Concurrency.Excess)
}

// A release that failed may still have been applied: it ends the hold
// too, though its retry through another node is answered later.
func TestConcurrencyCountsAFailedReleaseAsMaybeApplied(t *testing.T) {
	timedOut := released(1, 300*ms, 1300*ms)
	timedOut.Outcome = Timeout
	ops := []Op{
		acquired(1, 100*ms, 101*ms, "n1"), timedOut, released(1, 1400*ms, 1401*ms),
		acquired(2, 110*ms, 111*ms, "n1"),
		acquired(3, 500*ms, 501*ms, "n2"),
	}
	assert.Empty(t, Analyze(newKeysHistory(ops)).Violations())
}

// A slot never released frees itself its window (2 s) after it was
// taken, and no earlier than its window after its acquire was sent,
// less the nodes' millisecond.
func TestConcurrencyFreesAnUnreleasedSlotAtItsWindow(t *testing.T) {
	ops := []Op{
		acquired(1, 100*ms, 101*ms, "n1"),                                // never released
		acquired(2, 110*ms, 111*ms, "n1"), released(2, 3000*ms, 3001*ms), // held to 3 s
	}
	r := Analyze(newKeysHistory(append(ops, acquired(3, 2150*ms, 2151*ms, "n1"))))
	assert.Empty(t, r.Violations(), "slot 1 freed at 2.1 s")

	r = Analyze(newKeysHistory(append(ops, acquired(3, 2050*ms, 2051*ms, "n1"))))
	require.Len(t, r.Concurrency.Violations, 1, "slot 1 still held")
	assert.Equal(t, 2051*ms, r.Concurrency.Violations[0].To)

	r = Analyze(newKeysHistory(append(ops, acquired(3, 1900*ms, 2150*ms, "n1"))))
	assert.Empty(t, r.Violations(), "may have been decided after slot 1 freed itself")

	h := newKeysHistory(append(ops, acquired(3, 2050*ms, 2051*ms, "n1")))
	h.ClockRate = 0.03 // its owner's 2 s are 1.94 real seconds
	assert.Empty(t, Analyze(h).Violations())
}

// The bound follows the phases and the fallback deciders as a window's
// does, and a count over the limit must be out loud.
func TestConcurrencyBoundFollowsThePhasesAndTheSilentRule(t *testing.T) {
	bridge := Event{Name: "bridge", Begin: 2 * time.Second, End: 2*time.Second + ms, Steady: 1, Fault: true,
		Expect: map[string][]string{"n1": {"n1", "n2", "n3"}}, Sides: map[string]int{"n1": 0}}
	views := []View{{Node: "n1", Asked: 2400 * ms, Got: 2500 * ms, Alive: []string{"n1", "n2", "n3"}}}
	// n1 owns the key; n2 and n3, cut from it, answer by fallback:
	// degraded. None is released.
	held := func(n int) []Op {
		var ops []Op
		for i := range n {
			at := 2100*ms + time.Duration(10*i)*ms
			ops = append(ops, acquired(i+1, at, at+ms, []string{"n1", "n2", "n3"}[i%3]))
			ops[i].Degraded = ops[i].Owner != "n1"
		}
		return ops
	}
	h := newKeysHistory(held(4), bridge)
	h.Views = views
	r := Analyze(h)
	assert.Empty(t, r.Violations(), "every node may decide while the fault is being detected")

	for i := range h.Ops {
		h.Ops[i].Degraded = false // nobody said so
	}
	r = Analyze(h)
	require.NotEmpty(t, r.Concurrency.Violations)
	v := r.Concurrency.Violations[0]
	assert.True(t, v.Silent)
	assert.Equal(t, "slots: 3 slots held at 2.121s (acquired from 2.1s), over the limit's 2 with no degraded answer (silent over-admission)", v.String())

	h.Ops = held(7)
	r = Analyze(h)
	require.NotEmpty(t, r.Concurrency.Violations)
	v = r.Concurrency.Violations[0]
	assert.Equal(t, 7, v.Allowed)
	assert.Equal(t, 6, v.Bound)
	assert.Equal(t, 3, v.Deciders)

	// Held past convergence, the slots acquired in the transient keep its
	// bound: the instant's deciders are those of the phases their
	// acquires may have been decided in.
	h.Ops = append(held(6), acquired(7, 2600*ms, 2601*ms, "n1"))
	r = Analyze(h)
	require.NotEmpty(t, r.Concurrency.Violations)
	assert.Equal(t, 7, r.Concurrency.Violations[0].Allowed)
	h.Ops = h.Ops[:6]
	assert.Empty(t, Analyze(h).Violations())
}
