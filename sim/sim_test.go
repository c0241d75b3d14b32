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

// options are the test's flags (register): which seeds, and which plans
// they draw.
type options struct {
	seed, from   *uint64
	seeds        *int
	v            *bool
	clocks, hunt *bool // these select the plan a seed draws (replayCommand)
	longStops    *bool // so does this (investigation only)
}

// register defines the test's flags on fs.
func register(fs *flag.FlagSet) options {
	return options{
		seed:      fs.Uint64("sim.seed", 0, "replay one seed, with its logs and its violations' operations on failure"),
		seeds:     fs.Int("sim.seeds", defaultSeeds, "how many seeds to run, from -sim.from"),
		from:      fs.Uint64("sim.from", 1, "the first seed"),
		v:         fs.Bool("sim.v", false, "print every seed's plan and what the checker counted"),
		clocks:    fs.Bool("sim.clocks", true, "draw clock faults (false: investigate the others)"),
		longStops: fs.Bool("sim.longstops", false, "plans with a full stop draw windows and slots as the others, not 1 s (sim.LongFullStops; investigation)"),
		hunt:      fs.Bool("sim.hunt", false, "hunting plans: slowed joins, windows up to 10 s, heals one member at a time, the scenarios' promises (sim.Hunt; make sim hunts)"),
	}
}

var opts = register(flag.CommandLine)

// The flags by their old names, for the tests that read them.
var (
	seed, hunt, v = opts.seed, opts.hunt, opts.v
)

// apply makes the plans drawn from now on those o selects.
func (o options) apply() {
	sim.Hunt(*o.hunt)
	sim.Clocks(*o.clocks)
	if o.longStops != nil && *o.longStops {
		sim.LongFullStops()
	}
}

// replayCommand is the one command that replays seed s under o: the
// same seed with every flag that selects its plan (sim.Hunt, sim.Clocks),
// so that it draws the plan that failed.
func replayCommand(o options, s uint64) string {
	cmd := fmt.Sprintf("go test -count=1 -run 'TestSimulation$' ./sim -sim.seed %d", s)
	if *o.hunt {
		cmd += " -sim.hunt"
	}
	if !*o.clocks {
		cmd += " -sim.clocks=false"
	}
	if o.longStops != nil && *o.longStops {
		cmd += " -sim.longstops"
	}
	return cmd
}

// TestSimulation runs seeds of the whole cluster on simulated time: each
// seed draws a cluster, a workload and faults (sim.NewPlan), runs them on
// the nodes' own code in one process (node.Core over memnet, memberlist
// over cluster.MemNetwork, in a synctest bubble), and jepsen-lite's
// checker judges the history. The seeds are shared out over GOMAXPROCS
// shards. A failing seed says how to replay it.
func TestSimulation(t *testing.T) {
	opts.apply()
	list := []uint64{*seed}
	if *seed == 0 {
		list = list[:0]
		for s := *opts.from; s < *opts.from+uint64(*opts.seeds); s++ {
			list = append(list, s)
		}
	}
	start := time.Now()
	var tally tally
	shards := min(runtime.GOMAXPROCS(0), len(list))
	t.Run("seeds", func(t *testing.T) {
		for sh := range shards {
			t.Run(fmt.Sprint("shard", sh), func(t *testing.T) {
				t.Parallel()
				for i := sh; i < len(list); i += shards {
					tally.add(runSeed(t, list[i]))
				}
			})
		}
	})
	t.Logf("%d seeds in %s on %d shards, %d failed; %d admissions through a lease (in %d seeds) of %d allowed",
		len(list), time.Since(start).Round(time.Millisecond), shards, tally.failed.Load(), tally.leased.Load(),
		tally.leasing.Load(), tally.allowed.Load())
}

// tally is what the seeds of a run add up to.
type tally struct {
	failed, leasing atomic.Int32
	leased, allowed atomic.Int64
}

func (ta *tally) add(v sim.Verdict) {
	if v.Failed() {
		ta.failed.Add(1)
	}
	if v.Leased > 0 {
		ta.leasing.Add(1)
	}
	ta.leased.Add(int64(v.Leased))
	ta.allowed.Add(int64(v.Allowed))
}

// runSeed runs one seed and returns its verdict; a failure says what
// broke and how to replay it.
func runSeed(t *testing.T, s uint64) sim.Verdict {
	var logs strings.Builder
	out, level := io.Writer(&logs), slog.LevelWarn
	if *seed == 0 {
		out = io.Discard
	}
	var verdict sim.Verdict
	synctest.Test(t, func(t *testing.T) { verdict = sim.Run(s, out, level) })
	if *v {
		r := verdict.Result
		t.Logf("%s  ops %d, answered %d, allowed %d (%d through a lease), degraded %d, timeouts %d; windows log %d counter %d, gcra intervals %d, slot instants %d; worst log %.2f× counter fixed %.2f× gcra %.2f× concurrency %.2f×",
			verdict.Plan, r.All.Ops, r.All.Answered, verdict.Allowed, verdict.Leased, r.All.Degraded, r.All.Timeouts, r.Log.Windows, r.CounterFixed.Windows,
			r.GCRA.Windows, r.Concurrency.Windows, r.Log.Worst, r.CounterFixed.Worst, r.GCRA.Worst, r.Concurrency.Worst)
	}
	if !verdict.Failed() {
		return verdict
	}
	t.Errorf("seed %d failed:\n%s\n%s\nreplay: %s", s, verdict.Plan,
		strings.Join(append(verdict.Errors, verdict.Problems...), "\n"), replayCommand(opts, s))
	if *seed != 0 {
		fmt.Fprintln(os.Stderr, logs.String())
		dumpViolations(t, verdict)
	}
	return verdict
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
	for _, vi := range append(v.Result.Violations(), overPromise(v.Result)...) {
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

// overPromise returns the worst window of each algorithm over the plan's
// promise as a violation of it, for dumpViolations (a concurrency key's
// worst instant taken as a window of its slots' life from its first
// acquire: violationSpan).
func overPromise(r *jepsenlite.Result) []jepsenlite.Violation {
	var out []jepsenlite.Violation
	own := func(w float64) float64 { // a kind of key's own promise, else the plan's
		if w > 0 {
			return w
		}
		return r.MaxWorst
	}
	for i, a := range []jepsenlite.Admission{r.Log, r.CounterFixed, r.GCRA, r.Concurrency} {
		promised := []float64{r.MaxWorst, r.MaxWorst, own(r.MaxWorstGCRA), own(r.MaxWorstConcurrency)}[i]
		if promised > 0 && a.Worst > promised {
			out = append(out, jepsenlite.Violation{Key: a.WorstKey, From: a.WorstAt, PerDecider: "the plan's promise"})
		}
	}
	return out
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
