package jepsenlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

const ms = time.Millisecond

// history builds a synthetic history of one log key (limit 3 per second)
// and one counter key with the same limit, on three nodes.
func history(ops []Op, events ...Event) History {
	start := time.UnixMilli(1_000_000_000_000) // a whole second: counter windows start at offsets k×1s
	all := append([]Event{{Name: "start", Steady: 1, Expect: map[string][]string{}}}, events...)
	return History{
		Scenario: "synthetic", Start: start, End: 10 * time.Second, Nodes: []string{"n1", "n2", "n3"},
		Keys: []KeySpec{
			{Name: "log", Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Limit: 3, Window: time.Second},
			{Name: "counter", Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER, Limit: 3, Window: time.Second},
		},
		Ops: ops, Events: all,
		Up: map[string][]Span{"n1": {{From: 0}}, "n2": {{From: 0}}, "n3": {{From: 0}}},
	}
}

func allowed(key int, inv, comp time.Duration, owner string) Op {
	return Op{Key: key, Node: owner, Invoke: inv, Complete: comp, Outcome: Allowed, Owner: owner}
}

func TestCheckerFlagsACertainOverAdmission(t *testing.T) {
	var ops []Op
	for i := range 4 { // 4 > limit 3, all certainly inside one second
		ops = append(ops, allowed(0, time.Duration(100+100*i)*ms, time.Duration(101+100*i)*ms, "n1"))
	}
	r := Analyze(history(ops))
	require.Len(t, r.Log.Violations, 1)
	v := r.Log.Violations[0]
	assert.Equal(t, 4, v.Allowed)
	assert.Equal(t, 3, v.Bound)
	assert.InDelta(t, 4.0/3, r.Log.Worst, 1e-9)
	assert.Equal(t, 1, r.Log.Excess, "an exact log refuses the fourth")
	assert.Equal(t, 1, r.Log.ExcessCalm)
}

// Timing uncertainty is never charged: if the fourth check could have
// been decided after the first left the window, there is no violation.
func TestCheckerGivesTheBenefitOfTheDoubt(t *testing.T) {
	ops := []Op{
		allowed(0, 100*ms, 101*ms, "n1"),
		allowed(0, 200*ms, 201*ms, "n1"),
		allowed(0, 300*ms, 301*ms, "n1"),
		// Invoked inside the first's window, completed after it ended:
		// maybe decided at 1100 ms, when only two were in the window.
		allowed(0, 1050*ms, 1150*ms, "n1"),
	}
	r := Analyze(history(ops))
	assert.Empty(t, r.Violations())
	assert.Zero(t, r.Log.Excess)
}

func TestCheckerBoundsFollowThePhases(t *testing.T) {
	// A fault at 2 s converges at 2.5 s into a 2-sided steady state.
	fault := Event{Name: "partition", Begin: 2 * time.Second, End: 2*time.Second + ms, Steady: 2, Fault: true,
		Expect: map[string][]string{"n1": {"n1"}}, Sides: map[string]int{"n1": 0}}
	views := []View{{Node: "n1", Asked: 2400 * ms, Got: 2500 * ms, Alive: []string{"n1"}}}

	// One admission says it is degraded: over the limit is allowed only
	// out loud (TestCheckerFlagsSilentOverAdmission).
	mk := func(from time.Duration, n int, owner func(i int) string) []Op {
		var ops []Op
		for i := range n {
			ops = append(ops, allowed(0, from+time.Duration(10*i)*ms, from+time.Duration(10*i+1)*ms, owner(i)))
		}
		ops[n-1].Degraded = true
		return ops
	}
	two := func(i int) string { return []string{"n1", "n2"}[i%2] }

	// 6 = 2 × limit inside the steady partition: within its bound.
	h := history(mk(3*time.Second, 6, two), fault)
	h.Views = views
	r := Analyze(h)
	require.Len(t, r.Events, 2)
	assert.Equal(t, 500*ms, r.Events[1].ConvergedAfter())
	assert.Empty(t, r.Violations())

	// 7 there is one too many (none degraded: a degraded answer would
	// count its node as one more decider).
	seven := mk(3*time.Second, 7, two)
	seven[6].Degraded = false
	h = history(seven, fault)
	h.Views = views
	vs := Analyze(h).Log.Violations
	require.NotEmpty(t, vs)
	assert.Equal(t, 7, vs[0].Allowed)
	assert.False(t, vs[0].Silent, "over the two sides' bound") // the smaller windows after it are silent too

	// While the fault is being detected every node may decide: 9 pass.
	h = history(mk(2100*ms, 9, func(i int) string { return []string{"n1", "n2", "n3"}[i%3] }), fault)
	h.Views = views
	assert.Empty(t, Analyze(h).Violations())
}

func TestCheckerCountsFallbackDecidersAndNeverConvergedSteps(t *testing.T) {
	// Calm, but n2 answered by fallback: two deciders, bound 6.
	ops := []Op{
		allowed(0, 100*ms, 101*ms, "n1"), allowed(0, 110*ms, 111*ms, "n1"), allowed(0, 120*ms, 121*ms, "n1"),
		allowed(0, 130*ms, 131*ms, "n2"), allowed(0, 140*ms, 141*ms, "n2"),
	}
	ops[3].Degraded, ops[4].Degraded = true, true
	r := Analyze(history(ops))
	assert.Empty(t, r.Violations())
	assert.Positive(t, r.Log.Raised)

	// A step whose expectation is never met stays transient to the end.
	never := Event{Name: "kill", Begin: time.Second, Steady: 1, Fault: true,
		Expect: map[string][]string{"n1": {"n1", "n3"}}, Sides: map[string]int{"n1": 0}}
	r = Analyze(history(nil, never))
	assert.Equal(t, time.Duration(-1), r.Events[1].ConvergedAfter())
	last := r.Phases[len(r.Phases)-1]
	assert.Equal(t, "transient", last.Kind)
	assert.Equal(t, 10*time.Second, last.To)
}

func TestCheckerCounterFixedWindows(t *testing.T) {
	// 3 in [0, 1 s) and 3 in [1 s, 2 s): 6 in a rolling second, which the
	// counter may do (2×), but never 4 in one of its own windows.
	var ops []Op
	for i := range 3 {
		ops = append(ops, allowed(1, time.Duration(900+10*i)*ms, time.Duration(901+10*i)*ms, "n1"))
		ops = append(ops, allowed(1, time.Duration(1000+10*i)*ms, time.Duration(1001+10*i)*ms, "n1"))
	}
	r := Analyze(history(ops))
	assert.Empty(t, r.Violations())
	assert.InDelta(t, 2.0, r.CounterSliding.Worst, 1e-9)
	assert.InDelta(t, 1.0, r.CounterFixed.Worst, 1e-9)

	ops = append(ops, allowed(1, 1100*ms, 1101*ms, "n1"))
	r = Analyze(history(ops))
	require.Len(t, r.CounterFixed.Violations, 1)
	assert.Equal(t, 4, r.CounterFixed.Violations[0].Allowed)
	assert.Equal(t, 1, r.CounterFixed.Excess)
}

func TestAvailabilityCountsOnlyNodesThatWereUp(t *testing.T) {
	h := history([]Op{
		{Key: 0, Node: "n1", Invoke: 100 * ms, Complete: 102 * ms, Outcome: Denied, Owner: "n1"},
		{Key: 0, Node: "n2", Invoke: 100 * ms, Complete: 300 * ms, Outcome: Allowed, Owner: "n1", Degraded: true},
		{Key: 0, Node: "n3", Invoke: 3 * time.Second, Complete: 4 * time.Second, Outcome: Timeout},
	})
	h.Up["n3"] = []Span{{From: 0, To: 2 * time.Second}} // paused at 2 s
	r := Analyze(h)
	assert.Equal(t, Availability{Ops: 3, Answered: 2, Fast: 1, Degraded: 1, Timeouts: 1}, r.All)
	assert.Equal(t, Availability{Ops: 2, Answered: 2, Fast: 1, Degraded: 1}, r.Healthy)
}

func TestCheckerFlagsDegradedAnswersLongAfterConvergence(t *testing.T) {
	heal := Event{Name: "heal", Begin: 2 * time.Second, End: 2*time.Second + ms, Steady: 1,
		Expect: map[string][]string{"n1": {"n1"}}, Sides: map[string]int{"n1": 0}}
	soon := Op{Key: 0, Node: "n1", Invoke: 3 * time.Second, Complete: 3*time.Second + ms, Outcome: Denied, Owner: "n1", Degraded: true}
	late := soon
	late.Invoke, late.Complete = 5*time.Second, 5*time.Second+ms
	h := history([]Op{soon, late}, heal)
	h.Views = []View{{Node: "n1", Asked: 2400 * ms, Got: 2500 * ms, Alive: []string{"n1"}}}
	r := Analyze(h)
	assert.Equal(t, 1, r.Unsettled, "only the answer more than Settle after convergence at 2.5 s")
}

// Over the limit with not one admission marked degraded is a violation,
// whatever the phase allows: here every node may decide (the fault is
// being detected), and 5 of a limit of 3 is within that bound, but
// nobody said so.
func TestCheckerFlagsSilentOverAdmission(t *testing.T) {
	fault := Event{Name: "bridge", Begin: 2 * time.Second, End: 2*time.Second + ms, Steady: 1, Fault: true,
		Expect: map[string][]string{"n1": {"n1", "n2", "n3"}}, Sides: map[string]int{"n1": 0}}
	var ops []Op
	for i := range 5 {
		ops = append(ops, allowed(0, 2100*ms+time.Duration(10*i)*ms, 2101*ms+time.Duration(10*i)*ms, []string{"n1", "n3"}[i%2]))
	}
	r := Analyze(history(ops, fault))
	require.NotEmpty(t, r.Log.Violations)
	for _, v := range r.Log.Violations {
		assert.True(t, v.Silent, v.String())
		assert.Equal(t, 3, v.Bound)
	}
	assert.Contains(t, r.Log.Violations[0].String(), "silent over-admission")

	ops[1].Degraded = true // n3 said so
	assert.Empty(t, Analyze(history(ops, fault)).Violations())
}
