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
// with a full stop or kill, a promise exactly for plans of node faults,
// and a heal one member at a time only of the partition before it.
func TestPlanKeepsWhatTheCheckerNeeds(t *testing.T) {
	sim.Hunt(true)
	defer sim.Hunt(*hunt)
	nodeFaults := []sim.Kind{sim.Crash, sim.PowerLoss, sim.Restart, sim.Pause, sim.Resume}
	var promised, long, byMember, slowed int
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
		onlyNode := len(p.Steps) > 0 && !slices.ContainsFunc(p.Steps, func(st sim.Step) bool { return !slices.Contains(nodeFaults, st.Kind) })
		assert.Equal(t, onlyNode, p.MaxWorst > 0, "seed %d: a promise exactly for plans of node faults", seed)
		if p.MaxWorst > 0 {
			promised++
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
	assert.Greater(t, long, 600)
	assert.Greater(t, byMember, 150)
	assert.Greater(t, slowed, 500)
	t.Logf("of 2,000 plans: %d promise, %d longer windows, %d heals by member, %d slowed starts", promised, long, byMember, slowed)
}
