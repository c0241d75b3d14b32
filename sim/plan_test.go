package sim_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/peerlimit/peerlimit/sim"
)

// TestPlanKeepsWhatTheCheckerNeeds checks what NewPlan promises of every
// plan, over many seeds: clock offsets and steps in whole windows (the
// counter's fixed windows are the epoch's on every clock), 1 s windows
// with a full stop or kill, a promise exactly for plans whose every fault
// has one in jepsen-lite's scenarios, a degraded share promised only for
// slow links, a heal one member at a time only of the partition before
// it, and leased hot keys of 64–400 in about half the plans.
func TestPlanKeepsWhatTheCheckerNeeds(t *testing.T) {
	sim.Hunt(true)
	defer sim.Hunt(*hunt)
	none := []sim.Kind{sim.Rolling, sim.FullStop, sim.FullKill} // and a partition without the share fallback
	slow := []sim.Kind{sim.Latency, sim.Loss, sim.Heal}
	var promised, degraded, long, byMember, slowed, leased int
	for seed := uint64(1); seed <= 2000; seed++ {
		p := sim.NewPlan(seed)
		for id, c := range p.Clocks {
			assert.Zero(t, c.Offset%p.Window, "seed %d %s: offset in whole windows", seed, id)
			assert.Zero(t, c.Step%p.Window, "seed %d %s: step in whole windows", seed, id)
		}
		full := slices.ContainsFunc(p.Steps, func(st sim.Step) bool { return st.Kind == sim.FullKill || st.Kind == sim.FullStop })
		if full {
			assert.Equal(t, time.Second, p.Window, "seed %d: a full stop or kill keeps 1 s windows", seed)
		}
		if p.Window > time.Second {
			long++
		}
		unpromised := slices.ContainsFunc(p.Steps, func(st sim.Step) bool {
			return slices.Contains(none, st.Kind) || st.Kind == sim.Partition && !p.Share
		})
		assert.Equal(t, !unpromised, p.MaxWorst > 0, "seed %d: a promise exactly for plans of faults with one", seed)
		assert.True(t, p.MaxWorst == 0 || p.MaxWorst >= 1.2 && p.MaxWorst <= 2, "seed %d: %.2f", seed, p.MaxWorst)
		onlySlow := !slices.ContainsFunc(p.Steps, func(st sim.Step) bool { return !slices.Contains(slow, st.Kind) })
		if p.MaxDegraded > 0 {
			degraded++
			assert.True(t, onlySlow, "seed %d: a degraded share promised only for slow links", seed)
		}
		if p.MaxWorst > 0 {
			promised++
		}
		if p.HotLimit > 0 {
			leased++
			assert.GreaterOrEqual(t, p.HotLimit, int64(64), "seed %d", seed)
			assert.LessOrEqual(t, p.HotLimit, int64(400), "seed %d", seed)
			assert.True(t, p.HotKey == 0 || p.Window >= 5*time.Second, "seed %d: a log is leased from 5 s windows", seed)
		}
		for i, st := range p.Steps {
			if st.Kind == sim.Heal && st.Delay > 0 {
				byMember++
				prev := p.Steps[i-1]
				assert.Equal(t, sim.Partition, prev.Kind, "seed %d", seed)
				assert.ElementsMatch(t, prev.Groups[1], st.Groups[1], "seed %d: heals the partition's members", seed)
			}
			if st.Lag > 0 {
				slowed++
			}
		}
	}
	// Each feature is drawn often enough to matter (counts of 2,000).
	assert.Greater(t, promised, 150)
	assert.Greater(t, degraded, 100)
	assert.Greater(t, long, 600)
	assert.Greater(t, byMember, 150)
	assert.Greater(t, slowed, 500)
	assert.Greater(t, leased, 800)
	t.Logf("of 2,000 plans: %d promise (%d a degraded share), %d longer windows, %d heals by member, %d slowed starts, %d leased hot keys",
		promised, degraded, long, byMember, slowed, leased)
}
