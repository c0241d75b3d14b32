package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/wallclock"
	jepsenlite "github.com/peerlimit/peerlimit/jepsen-lite"
	"github.com/peerlimit/peerlimit/peer"
)

// Verdict is what the checker found in one seed's run.
type Verdict struct {
	Plan   Plan
	Result *jepsenlite.Result
	// Problems are why the run failed; none: it passed.
	Problems []string
	// Errors are steps that could not be taken (a member that would not
	// start): a run that did not do what its plan says.
	Errors []string
	// Allowed is how many admissions the run recorded (a reservation's
	// its cost, a slot's its acquire), and Leased how many of them a
	// budget lease answered (peer.ViaLease): what the run tells of the
	// leases.
	Allowed, Leased int
}

// Failed reports whether the run broke a bound.
func (v Verdict) Failed() bool { return len(v.Problems) > 0 || len(v.Errors) > 0 }

// Run runs seed's plan in the caller's synctest bubble (every clock and
// timer in it is simulated: a run of 30 s costs the CPU of its work) and
// judges it with jepsen-lite's checker. Logs go to logOut at level.
func Run(seed uint64, logOut io.Writer, level slog.Level) Verdict {
	p := NewPlan(seed)
	w := newWorld(p, logOut, level)
	v := Verdict{Plan: p}
	for _, id := range ids(p.Nodes) {
		if err := w.startMember(id, 0); err != nil {
			v.Errors = append(v.Errors, err.Error())
		}
	}
	time.Sleep(3 * time.Second) // the members find each other before the clock of the run starts
	w.start = time.Now()
	w.event("start", false, 0)

	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	wl := newWorkload(w, p.keys())
	bg.Go(func() { wl.run(ctx) })
	bg.Go(func() { sampleViews(ctx, w) })
	prev := time.Duration(0)
	for _, st := range p.Steps {
		// The gap the plan puts between steps, from the end of the one
		// before (a rolling restart takes a while): a fault lasts as long
		// as it was drawn to.
		time.Sleep(st.At - prev)
		prev = st.At
		if err := w.apply(st); err != nil {
			v.Errors = append(v.Errors, fmt.Sprintf("%s at %s: %v", st.describe(), st.At, err))
		}
	}
	time.Sleep(max(p.Duration-w.now(), 0))
	w.endFaults()
	time.Sleep(p.Settle)
	cancel()
	bg.Wait()
	end := w.now()
	w.stopAll()

	h := jepsenlite.History{Scenario: fmt.Sprint("seed ", seed), About: strings.TrimSpace(p.String()), Start: w.start, End: end,
		Nodes: w.everyone(), Keys: wl.keys, Ops: wl.ops, Views: w.views, Events: w.events, Up: w.up, ClockRate: p.clockRate()}
	v.Result = jepsenlite.Analyze(h)
	v.Result.MaxWorst, v.Result.MaxDegraded = p.MaxWorst, p.MaxDegraded
	v.Result.MaxWorstGCRA, v.Result.MaxWorstConcurrency = p.MaxWorstGCRA, p.MaxWorstSlots
	v.Problems = judge(v.Result)
	v.Allowed, v.Leased = admissions(wl.ops)
	return v
}

// admissions counts the admissions, and those a lease answered.
func admissions(ops []jepsenlite.Op) (allowed, leased int) {
	for _, op := range ops {
		if op.Outcome != jepsenlite.Allowed || op.Kind == jepsenlite.ReleaseOp {
			continue
		}
		allowed++
		if op.Via == peer.ViaLease.String() {
			leased++
		}
	}
	return allowed, leased
}

// judge returns what the run broke: a window over its bound (or over one
// decider's with no answer degraded), the plan's promise (Plan.MaxWorst
// and MaxDegraded, judged as jepsen-lite judges its scenarios':
// Result.OverPromise, every algorithm's worst and the degraded share),
// answers still degraded after the cluster converged at the end, or no
// convergence at the end at all.
func judge(r *jepsenlite.Result) []string {
	var out []string
	for _, vi := range r.Violations() {
		out = append(out, vi.String())
	}
	if over := r.OverPromise(); over != "" {
		out = append(out, fmt.Sprintf("the plan's promise: %s (worst: %s)", over, worstOf(r)))
	}
	if r.Unsettled > 0 {
		out = append(out, fmt.Sprintf("%d answers degraded more than %s after the cluster converged at the end", r.Unsettled, jepsenlite.Settle))
	}
	if last := r.Events[len(r.Events)-1]; last.Converged < 0 {
		out = append(out, fmt.Sprintf("the cluster never converged after %q at %s", last.Name, last.Begin))
	}
	return out
}

// worstOf says where each algorithm's worst window was, for a broken
// promise's report.
func worstOf(r *jepsenlite.Result) string {
	var parts []string
	for _, a := range []struct {
		name string
		a    jepsenlite.Admission
	}{{"log", r.Log}, {"counter fixed", r.CounterFixed}, {"gcra", r.GCRA}, {"concurrency", r.Concurrency}} {
		if a.a.Windows > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f× %s at %s", a.name, a.a.Worst, a.a.WorstKey, a.a.WorstAt.Round(time.Millisecond)))
		}
	}
	return strings.Join(parts, ", ")
}

// sampleViews records every member's view every 100 ms, as jepsen-lite's
// monitor does.
func sampleViews(ctx context.Context, w *World) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		w.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// apply takes one step, and records it for the checker: from the step's
// start, the cluster may have every member decide until it has
// converged to what the step leaves. A step of several changes (a
// rolling restart, a full stop) records each.
func (w *World) apply(st Step) error {
	begin := w.now()
	var err error
	fault := true
	switch st.Kind {
	case Crash, PowerLoss:
		w.kill(st.Nodes[0], st.Kind == PowerLoss)
	case Restart:
		err, fault = w.startSlow(st.Nodes[0], st.join()), false
	case Pause:
		w.pause(st.Nodes[0], true)
	case Resume:
		w.pause(st.Nodes[0], false)
		fault = false
	case Partition:
		w.partition(st.Groups)
	case Bridge:
		w.cutLink(st.Nodes[0], st.Nodes[1])
	case Loss, Latency:
		w.slowLink(st)
	case Heal:
		w.healByMember(st)
		w.heal()
		fault = false
	case Join:
		err = w.startSlow(st.Nodes[0], st.join())
	case Leave:
		w.leave(st.Nodes[0])
	case Rolling:
		return w.rolling(st)
	case FullStop, FullKill:
		return w.full(st)
	}
	w.event(st.describe(), fault, begin)
	return err
}

func (w *World) partition(groups [][]string) {
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					w.cutLink(a, b)
				}
			}
		}
	}
}

// healByMember heals a partition as st says, one member of its second
// group at a time, st.Delay apart: each one's links to the first group
// come back together. Without Groups, nothing: heal does it all.
func (w *World) healByMember(st Step) {
	if st.Delay <= 0 || len(st.Groups) != 2 {
		return
	}
	for i, b := range st.Groups[1] {
		if i > 0 {
			time.Sleep(st.Delay)
		}
		w.mu.Lock()
		for _, a := range st.Groups[0] {
			w.net.SetFaults(a, b, memnet.Faults{})
			w.net.SetFaults(b, a, memnet.Faults{})
			delete(w.cut, pairOf(a, b))
		}
		w.mu.Unlock()
	}
}

func (w *World) slowLink(st Step) {
	w.mu.Lock()
	w.faulty = true
	w.mu.Unlock()
	f := memnet.Faults{DropRequests: st.Loss, Delay: st.Delay, Jitter: st.Jitter}
	w.net.SetFaults(st.Nodes[0], st.Nodes[1], f)
	if !st.OneWay {
		w.net.SetFaults(st.Nodes[1], st.Nodes[0], f)
	}
}

// rolling restarts every member in turn, each leaving gracefully and
// starting again once the others have taken its keys over, joining over
// links slowed as st says.
func (w *World) rolling(st Step) error {
	var errs []error
	for _, id := range w.everyoneUp() {
		begin := w.now()
		w.leave(id)
		w.event("rolling: leave "+id, true, begin)
		time.Sleep(2 * time.Second)
		begin = w.now()
		errs = append(errs, w.startSlow(id, st.join()))
		w.event("rolling: start "+id, false, begin)
		time.Sleep(2 * time.Second)
	}
	return errors.Join(errs...)
}

// full stops (or kills) every member at once, then starts them all again
// from their disks, each joining over links slowed as st says.
func (w *World) full(st Step) error {
	kill := st.Kind == FullKill
	ups := w.everyoneUp()
	begin := w.now()
	var wg sync.WaitGroup
	for _, id := range ups {
		wg.Go(func() {
			if kill {
				w.kill(id, false)
			} else {
				w.leave(id)
			}
		})
	}
	wg.Wait()
	w.event(fmt.Sprintf("every member stopped (killed: %v)", kill), true, begin)
	time.Sleep(time.Second)
	begin = w.now()
	var errs []error
	for _, id := range ups {
		errs = append(errs, w.startSlow(id, st.join()))
	}
	w.event("every member started again", false, begin)
	return errors.Join(errs...)
}

// endFaults undoes what the plan left: a crashed member starts again, a
// paused one resumes, every link heals.
func (w *World) endFaults() {
	begin := w.now()
	w.heal()
	for id := range w.paused {
		if w.paused[id] {
			w.pause(id, false)
		}
	}
	for _, id := range w.everyone() {
		w.mu.Lock()
		_, up := w.members[id]
		_, known := w.disks[id]
		w.mu.Unlock()
		if !up && known && !w.left(id) {
			_ = w.startMember(id, 0)
		}
	}
	w.event("end of faults", false, begin)
}

// left reports whether the plan made id leave for good.
func (w *World) left(id string) bool {
	for _, st := range w.plan.Steps {
		if st.Kind == Leave && st.Nodes[0] == id {
			return true
		}
	}
	return false
}

// everyone is every member the run started, sorted.
func (w *World) everyone() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.disks))
}

// everyoneUp is the members up now, sorted.
func (w *World) everyoneUp() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.members))
}

// clockRate is what the checker needs of the clocks (History.ClockRate):
// how much faster than real time the fastest runs, a drift or the 1 %
// slew after a step forward (internal/wallclock); and nonzero whenever a
// clock runs at another rate at all, slower too, since its counter's
// fixed windows then drift away from the real clock's, where the checker
// counts them: it doubles their bound then, as jepsen-lite's clock
// scenarios have it.
func (p Plan) clockRate() float64 {
	rate, skewed := 0.0, false
	for _, c := range p.Clocks {
		rate = max(rate, c.Drift)
		if c.Step > 0 {
			rate = max(rate, wallclock.DefaultMaxSlew)
		}
		skewed = skewed || c.Drift != 0 || c.Step != 0
	}
	if skewed && rate == 0 {
		rate = 1e-9 // slower only: the windows are no shorter, but misaligned
	}
	return rate
}
