package sim_test

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	jepsenlite "github.com/peerlimit/peerlimit/jepsen-lite"
	"github.com/peerlimit/peerlimit/sim"
)

var (
	seed   = flag.Uint64("sim.seed", 0, "replay one seed, with its logs and its violations' operations on failure")
	seeds  = flag.Int("sim.seeds", defaultSeeds, "how many seeds to run, from -sim.from")
	from   = flag.Uint64("sim.from", 1, "the first seed")
	v      = flag.Bool("sim.v", false, "print every seed's plan and what the checker counted")
	clocks = flag.Bool("sim.clocks", true, "draw clock faults (false: investigate the others)")
	long   = flag.Bool("sim.longstops", false, "plans with a full stop draw windows and slots as the others, not 1 s (sim.LongFullStops; investigation)")
	hunt   = flag.Bool("sim.hunt", false, "hunting plans: slowed joins, windows up to 10 s, heals one member at a time, a promise for node faults (sim.Hunt; make sim hunts)")
)

// TestSimulation runs seeds of the whole cluster on simulated time: each
// seed draws a cluster, a workload and faults (sim.NewPlan), runs them on
// the nodes' own code in one process (node.Core over memnet, memberlist
// over cluster.MemNetwork, in a synctest bubble), and jepsen-lite's
// checker judges the history. The seeds are shared out over GOMAXPROCS
// shards. A failing seed says how to replay it.
func TestSimulation(t *testing.T) {
	if !*clocks {
		sim.NoClocks()
	}
	if *hunt {
		sim.Hunt(true)
	}
	if *long {
		sim.LongFullStops()
	}
	list := []uint64{*seed}
	if *seed == 0 {
		list = list[:0]
		for s := *from; s < *from+uint64(*seeds); s++ {
			list = append(list, s)
		}
	}
	start := time.Now()
	var failed atomic.Int32
	shards := min(runtime.GOMAXPROCS(0), len(list))
	t.Run("seeds", func(t *testing.T) {
		for sh := range shards {
			t.Run(fmt.Sprint("shard", sh), func(t *testing.T) {
				t.Parallel()
				for i := sh; i < len(list); i += shards {
					if !runSeed(t, list[i]) {
						failed.Add(1)
					}
				}
			})
		}
	})
	t.Logf("%d seeds in %s on %d shards, %d failed", len(list), time.Since(start).Round(time.Millisecond), shards, failed.Load())
}

// runSeed runs one seed and reports whether it passed; a failure says
// what broke and how to replay it.
func runSeed(t *testing.T, s uint64) bool {
	var logs strings.Builder
	out, level := io.Writer(&logs), slog.LevelWarn
	if *seed == 0 {
		out = io.Discard
	}
	var verdict sim.Verdict
	synctest.Test(t, func(t *testing.T) { verdict = sim.Run(s, out, level) })
	if *v {
		r := verdict.Result
		t.Logf("%s  ops %d, answered %d, degraded %d, timeouts %d; windows log %d counter %d, gcra intervals %d, slot instants %d; worst log %.2f× counter fixed %.2f× gcra %.2f× concurrency %.2f×",
			verdict.Plan, r.All.Ops, r.All.Answered, r.All.Degraded, r.All.Timeouts, r.Log.Windows, r.CounterFixed.Windows,
			r.GCRA.Windows, r.Concurrency.Windows, r.Log.Worst, r.CounterFixed.Worst, r.GCRA.Worst, r.Concurrency.Worst)
	}
	if !verdict.Failed() {
		return true
	}
	t.Errorf("seed %d failed:\n%s\n%s\nreplay: go test ./sim -run TestSimulation -sim.seed %d", s, verdict.Plan,
		strings.Join(append(verdict.Errors, verdict.Problems...), "\n"), s)
	if *seed != 0 {
		fmt.Fprintln(os.Stderr, logs.String())
		dumpViolations(t, verdict)
	}
	return false
}

// dumpViolations prints the run's steps with when the cluster converged
// after each, and, for the first violation of each key, the allowed
// operations it counted: where each came in, who decided it, degraded
// or not (for a concurrency key, the acquires and their releases).
func dumpViolations(t *testing.T, v sim.Verdict) {
	h := v.Result.History
	for _, ev := range v.Result.Events {
		t.Logf("event %q at %s, converged %s, steady %d, expect %v", ev.Name, ev.Begin, ev.Converged, ev.Steady, ev.Expect)
	}
	seen := map[string]bool{}
	for _, vi := range v.Result.Violations() {
		if seen[vi.Key] {
			continue
		}
		seen[vi.Key] = true
		k := slices.IndexFunc(h.Keys, func(ks jepsenlite.KeySpec) bool { return ks.Name == vi.Key })
		from, to := violationSpan(vi, h.Keys[k])
		t.Logf("%s", vi)
		slots := map[int]bool{}
		for _, op := range h.Ops {
			if op.Key == k && op.Outcome == jepsenlite.Allowed && op.Kind != jepsenlite.ReleaseOp && op.Invoke >= from && op.Invoke < to {
				t.Logf("  %s %s–%s at %s via %s, decided by %s, degraded %v (worker %d, slot %d)", op.Kind, op.Invoke, op.Complete, op.Node, op.Via, op.Owner, op.Degraded, op.Worker, op.Slot)
				slots[op.Slot] = op.Slot != 0
			}
		}
		for _, op := range h.Ops {
			if op.Key == k && op.Kind == jepsenlite.ReleaseOp && slots[op.Slot] {
				t.Logf("  release of slot %d %s–%s at %s: %s %s", op.Slot, op.Invoke, op.Complete, op.Node, op.Outcome, op.Err)
			}
		}
	}
}

// violationSpan is when the operations a violation counted were invoked,
// give or take 100 ms: its window, its GCRA interval, or, for slots held
// at an instant, from the first acquire to that instant.
func violationSpan(vi jepsenlite.Violation, ks jepsenlite.KeySpec) (time.Duration, time.Duration) {
	const margin = 100 * time.Millisecond
	switch vi.Kind {
	case jepsenlite.KindInterval, jepsenlite.KindInFlight:
		return vi.From - margin, vi.To + margin
	}
	return vi.From - margin, vi.From + ks.Window + margin
}
