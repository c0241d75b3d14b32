package jepsenlite

import (
	"fmt"
	"slices"
	"sort"
	"time"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// History is everything recorded in one scenario.
type History struct {
	Scenario string            `json:"scenario"`
	About    string            `json:"about"`
	Start    time.Time         `json:"start"` // offset 0; wall time maps offsets to the nodes' clocks
	End      time.Duration     `json:"end_ns"`
	Nodes    []string          `json:"nodes"`
	Keys     []KeySpec         `json:"keys"`
	Ops      []Op              `json:"ops"`
	Views    []View            `json:"views"`
	Events   []Event           `json:"events"`
	Up       map[string][]Span `json:"up"`
	// ClockRate is the scenario's Scenario.ClockRate.
	ClockRate float64 `json:"clock_rate,omitempty"`
}

// Phase is a stretch of the run with one admission bound, in deciders per
// key: calm (1), transient (every node may decide: from a step until the
// cluster has converged) or steady (after convergence, as the step says).
type Phase struct {
	Kind     string        `json:"kind"`
	From, To time.Duration `json:"-"`
	Deciders int           `json:"deciders"`
}

// EventResult is a step and how long the cluster took to converge after it.
type EventResult struct {
	Event
	// Converged is when every answering node's view matched the
	// expectation (the sample's completion time: an upper bound), or -1.
	Converged time.Duration `json:"converged_ns"`
}

// ConvergedAfter is the time from the step's start to convergence, or -1.
func (e EventResult) ConvergedAfter() time.Duration {
	if e.Converged < 0 {
		return -1
	}
	return e.Converged - e.Begin
}

// Availability counts answers.
type Availability struct {
	Ops      int `json:"ops"`
	Answered int `json:"answered"`
	Fast     int `json:"fast"` // answered within 100 ms
	Degraded int `json:"degraded"`
	Timeouts int `json:"timeouts"`
	Errors   int `json:"errors"`
}

func (a Availability) AnsweredShare() float64 { return share(a.Answered, a.Ops) }
func (a Availability) FastShare() float64     { return share(a.Fast, a.Ops) }

func share(n, of int) float64 {
	if of == 0 {
		return 1
	}
	return float64(n) / float64(of)
}

// Admission is the over-admission found for one algorithm and one kind of
// window.
type Admission struct {
	// Windows is how many window positions were checked.
	Windows int `json:"windows"`
	// Worst is the highest allowed/limit in any window, and where.
	Worst    float64       `json:"worst"`
	WorstKey string        `json:"worst_key"`
	WorstAt  time.Duration `json:"worst_at_ns"`
	// WorstCalm is the highest allowed/limit in windows entirely inside
	// calm phases (no fault, converged).
	WorstCalm float64 `json:"worst_calm"`
	// Excess counts admissions an exact limiter would certainly have
	// refused (see Analyze).
	Excess     int `json:"excess"`
	ExcessCalm int `json:"excess_calm"`
	// Raised counts windows whose bound fallback decisions raised.
	Raised int `json:"raised"`
	// Allowance counts the admissions a kill may have lost (decided within
	// its Step.Loses before it) that the checker let the windows hold on
	// top of their bounds: the persistence bound's allowance, used or not.
	Allowance  int         `json:"allowance,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
}

// Violation is a window that admitted more than its bound, or more than
// one decider's share with no admission marked degraded (Silent).
type Violation struct {
	Key      string        `json:"key"`
	From     time.Duration `json:"from_ns"`
	Allowed  int           `json:"allowed"`
	Bound    int           `json:"bound"` // in requests
	Deciders int           `json:"deciders"`
	// Silent: over the limit of one decider, and not one admission in the
	// window said it was degraded. Whatever the phase's bound, a limiter
	// that over-admits must say so.
	Silent bool `json:"silent,omitempty"`
	// Kind is what was counted: "" the admissions of a window from From;
	// KindInterval a GCRA key's admissions in [From, To]; KindInFlight a
	// concurrency key's slots held at To (Allowed), acquired from From.
	Kind string        `json:"kind,omitempty"`
	To   time.Duration `json:"to_ns,omitempty"`
	// PerDecider is how one decider's bound is made, for the message
	// ("burst 10 + ⌊20 per 1s × 501ms⌋ = 20"); "" for the limit.
	PerDecider string `json:"per_decider,omitempty"`
}

// The kinds of Violation besides a window's.
const (
	KindInterval = "interval"
	KindInFlight = "in flight"
)

func (v Violation) String() string {
	from, to := v.From.Round(time.Millisecond), v.To.Round(time.Millisecond)
	var what string
	switch v.Kind {
	case KindInterval:
		what = fmt.Sprintf("%d allowed from %s to %s", v.Allowed, from, to)
	case KindInFlight:
		what = fmt.Sprintf("%d slots held at %s (acquired from %s)", v.Allowed, to, from)
	default:
		what = fmt.Sprintf("%d allowed in the window from %s", v.Allowed, from)
	}
	switch {
	case v.Silent && v.PerDecider != "":
		return fmt.Sprintf("%s: %s, over one decider's %s with no degraded answer (silent over-admission)", v.Key, what, v.PerDecider)
	case v.Silent:
		return fmt.Sprintf("%s: %s, over the limit's %d with no degraded answer (silent over-admission)", v.Key, what, v.Bound)
	case v.PerDecider != "":
		return fmt.Sprintf("%s: %s, bound %d (%d deciders × (%s))", v.Key, what, v.Bound, v.Deciders, v.PerDecider)
	}
	return fmt.Sprintf("%s: %s, bound %d (%d deciders)", v.Key, what, v.Bound, v.Deciders)
}

// Result is the checker's verdict on one scenario.
type Result struct {
	Scenario string `json:"scenario"`
	About    string `json:"about"`
	// Skipped says why the scenario did not run; nothing else is set.
	Skipped string `json:"skipped,omitempty"`
	// Errors are steps that failed: the run does not show what the
	// scenario meant to show.
	Errors []string `json:"errors,omitempty"`

	Duration     time.Duration `json:"duration_ns"`
	All, Healthy Availability
	// Unsettled counts degraded answers to checks invoked more than
	// Settle after the last step's convergence: once the cluster has
	// converged, forwards must work again, not only gossip.
	Unsettled int           `json:"unsettled"`
	Events    []EventResult `json:"events"`
	Phases    []Phase       `json:"phases"`
	// Log: sliding windows. CounterFixed: the counter's own fixed
	// windows, where its bound is exact. CounterSliding: rolling windows,
	// where the counter's approximation allows up to 2× per decider.
	Log, CounterFixed, CounterSliding Admission
	// Calendar: the calendar keys' periods (a day in its zone), where
	// the bound is exact: the limit per period per decider.
	Calendar Admission
	// GCRA: the GCRA keys' intervals between two admissions, where the
	// bound is exact: burst + rate × the interval per decider (gcra.go).
	// Worst is allowed ÷ that, one decider's bound.
	GCRA Admission
	// Concurrency: the concurrency keys' slots held at each instant,
	// where the bound is exact: the limit per decider (concurrency.go).
	Concurrency Admission
	// MaxWorst is the scenario's promise (Scenario.MaxWorst); 0: none.
	MaxWorst float64 `json:"max_worst,omitempty"`
	// MaxWorstGCRA and MaxWorstConcurrency, above 0, are the promise for
	// the GCRA and the concurrency keys instead of MaxWorst: a promise
	// with a slack of admissions for small limits is looser on a key
	// with fewer (2 slots, a burst of 3) than on the windows' keys.
	MaxWorstGCRA        float64 `json:"max_worst_gcra,omitempty"`
	MaxWorstConcurrency float64 `json:"max_worst_concurrency,omitempty"`
	// ReportedWorst is the promised worst of a scenario held to its
	// bounds only (Scenario.ReportedWorst): reported, not held.
	ReportedWorst float64 `json:"reported_worst,omitempty"`
	// MaxDegraded is its Scenario.MaxDegraded; 0: none.
	MaxDegraded float64 `json:"max_degraded,omitempty"`
	// Defect is its Scenario.Defect: a known defect, not fixed yet.
	Defect string `json:"defect,omitempty"`
	// Link is how the cluster did over slow links (Scenario.Needs
	// NeedSlowLink), with its promise; nil otherwise.
	Link *LinkResult `json:"link,omitempty"`
	// Series is admitted requests over time relative to the limits'
	// rate, per algorithm, in Bucket steps: the chart.
	Bucket                   time.Duration `json:"bucket_ns"`
	SeriesCounter, SeriesLog []float64
	History                  History `json:"-"`
	maxDeciders              int
}

// Violations lists every violation of every algorithm.
func (r *Result) Violations() []Violation {
	return slices.Concat(r.Log.Violations, r.CounterFixed.Violations, r.CounterSliding.Violations, r.Calendar.Violations,
		r.GCRA.Violations, r.Concurrency.Violations)
}

// OverPromise says how the run broke its scenario's MaxWorst, or "".
func (r *Result) OverPromise() string {
	switch degraded := share(r.All.Degraded, r.All.Answered); {
	case r.Link.OverPromise() != "":
		return r.Link.OverPromise()
	case r.MaxDegraded > 0 && degraded > r.MaxDegraded:
		return fmt.Sprintf("%.2f %% of answers degraded > the promised %.2f %%", 100*degraded, 100*r.MaxDegraded)
	case r.MaxWorst <= 0:
		return ""
	case r.Log.Worst > r.MaxWorst:
		return fmt.Sprintf("log worst %.2f× > the promised %.2f×", r.Log.Worst, r.MaxWorst)
	case r.CounterFixed.Worst > r.MaxWorst && r.History.ClockRate == 0: // not the owners' windows otherwise
		return fmt.Sprintf("counter fixed worst %.2f× > the promised %.2f×", r.CounterFixed.Worst, r.MaxWorst)
	case r.Calendar.Worst > r.MaxWorst:
		return fmt.Sprintf("calendar worst %.2f× > the promised %.2f×", r.Calendar.Worst, r.MaxWorst)
	case r.GCRA.Worst > promised(r.MaxWorstGCRA, r.MaxWorst):
		return fmt.Sprintf("gcra worst %.2f× > the promised %.2f×", r.GCRA.Worst, promised(r.MaxWorstGCRA, r.MaxWorst))
	case r.Concurrency.Worst > promised(r.MaxWorstConcurrency, r.MaxWorst):
		return fmt.Sprintf("concurrency worst %.2f× > the promised %.2f×", r.Concurrency.Worst, promised(r.MaxWorstConcurrency, r.MaxWorst))
	}
	return ""
}

// promised is a kind of key's own promise (above 0), else the run's.
func promised(own, run float64) float64 {
	if own > 0 {
		return own
	}
	return run
}

// Settle is how long after the cluster converged degraded answers may
// still come: a forward in flight, a peer connection's next attempt.
const Settle = 2 * time.Second

// Analyze checks a history.
//
// Timing. Each check is decided at one instant on the owner's clock,
// somewhere between the client's invoke and completion. A window is
// charged only with the allowed checks whose whole [invoke, complete]
// interval lies inside it: those were certainly decided inside. The count
// is therefore a lower bound of what the window really held, and a count
// over the bound is a certain violation, never an artefact of timing
// (Jepsen's rule). Checks that timed out are indeterminate and not
// charged; the report gives their number.
//
// Bounds. The bound of a window is limit × deciders: how many nodes may
// have decided the key from separate state in it. That is 1 in calm
// phases, every node in a transient (from a step until the cluster has
// converged: views disagree, forwards fail over to local decisions), and
// the step's Steady number after convergence (k for k sides). A node that
// answered by fallback (degraded) in the window decided from its own
// state: each such node adds one decider. The counter's rolling windows
// get twice the bound: its estimate admits up to 2× in a rolling window by
// design (docs/accuracy.md); its fixed windows get the plain bound.
//
// Silent over-admission. Whatever a phase allows, a window that admitted
// more than one decider's bound (limit, or 2 × limit for the counter's
// rolling windows) is a violation unless at least one of its admissions
// was marked degraded: over-admitting is allowed only out loud.
//
// Calendar keys are checked per period (a day in the key's zone, from
// the harness's wall clock, the one the nodes decide by on this host):
// the admissions certainly decided inside it, at most limit × deciders,
// where the deciders are the most of any phase the period overlaps.
//
// GCRA keys are checked over every interval from one admission's invoke
// to another's completion: at most deciders × (burst + rate × the
// interval) (gcra.go). Concurrency keys are checked at every instant:
// the slots certainly held then, at most deciders × limit
// (concurrency.go). Both with the windows' rules: the deciders of every
// phase the admissions counted may have been decided in, plus the nodes
// that answered them by fallback, and no more than one decider's bound
// unless one of them said it was degraded.
//
// Excess counts, with the same certainty, admissions an exact limiter
// would have refused: for the log, those an exact sliding log replaying
// the admitted checks refuses; for the counter and the calendar keys,
// those beyond the limit in one of their fixed windows or periods; for
// GCRA and concurrency keys, those an exact bucket or an exact count of
// slots replaying the admissions refuses.
func Analyze(h History) *Result {
	r := &Result{Scenario: h.Scenario, About: h.About, Duration: h.End, History: h, Bucket: 250 * time.Millisecond}
	r.Events = convergence(h)
	r.Phases = phases(h.End, r.Events, len(h.Nodes))
	r.maxDeciders = len(h.Nodes)
	r.All, r.Healthy = availability(h)
	if last := r.Events[len(r.Events)-1]; last.Converged >= 0 {
		for _, op := range h.Ops {
			if op.Degraded && op.Invoke > last.Converged+Settle {
				r.Unsettled++
			}
		}
	}

	byKey := map[int][]Op{}
	for _, op := range h.Ops {
		if op.Admitted() {
			byKey[op.Key] = append(byKey[op.Key], op)
		}
	}
	released := firstReleases(h.Ops)
	for k, ks := range h.Keys {
		ops := byKey[k]
		sort.Slice(ops, func(i, j int) bool { return ops[i].Invoke < ops[j].Invoke })
		if ks.IsCalendar() {
			r.calendar(&r.Calendar, h.Start, ks, ops)
			continue
		}
		// A node whose clock runs fast has windows that much shorter in
		// real time (Scenario.ClockRate).
		ks.Window = time.Duration(float64(ks.Window) / (1 + max(h.ClockRate, 0)))
		switch ks.Algorithm {
		case pb.Algorithm_SLIDING_WINDOW_LOG:
			r.sliding(&r.Log, ks, ops, 1)
			r.excessLog(&r.Log, ks, ops)
		case pb.Algorithm_GCRA:
			r.gcra(&r.GCRA, ks, ops)
			r.excessGCRA(&r.GCRA, ks, ops)
		case pb.Algorithm_CONCURRENCY:
			slots := heldSlots(ks, ops, released)
			r.inFlight(&r.Concurrency, ks, slots)
			r.excessSlots(&r.Concurrency, ks, slots)
		default:
			r.sliding(&r.CounterSliding, ks, ops, 2)
			r.fixed(&r.CounterFixed, h.Start, ks, ops, h.ClockRate)
		}
	}
	r.series(h)
	return r
}

// convergence finds, for each event, when the views first matched its
// expectation before the next event began.
func convergence(h History) []EventResult {
	out := make([]EventResult, len(h.Events))
	for i, ev := range h.Events {
		out[i] = EventResult{Event: ev, Converged: -1}
		if i > 0 && len(ev.Expect) == 0 {
			// Nobody answers (every node killed or stopped): there is no
			// view to wait for, and no node to decide.
			out[i].Converged = ev.End
			continue
		}
		until := h.End
		if i+1 < len(h.Events) {
			until = h.Events[i+1].Begin
		}
		latest := map[string]View{}
		for _, v := range h.Views {
			if v.Asked < ev.Begin || v.Asked >= until {
				continue
			}
			if _, watched := ev.Expect[v.Node]; !watched {
				continue
			}
			latest[v.Node] = v
			if matches(ev, latest) {
				out[i].Converged = v.Got
				break
			}
		}
	}
	return out
}

func matches(ev Event, latest map[string]View) bool {
	ring := map[int]uint64{}
	for id, want := range ev.Expect {
		v, ok := latest[id]
		if !ok || v.Failed || !slices.Equal(v.Alive, want) {
			return false
		}
		side := ev.Sides[id]
		if r, seen := ring[side]; seen && r != v.Ring {
			return false
		}
		ring[side] = v.Ring
	}
	return true
}

func phases(end time.Duration, evs []EventResult, nodes int) []Phase {
	var out []Phase
	for i, ev := range evs {
		to := end
		if i+1 < len(evs) {
			to = evs[i+1].Begin
		}
		if i == 0 { // before any step: the cluster converged before the workload began
			out = append(out, Phase{Kind: "calm", From: 0, To: to, Deciders: 1})
			continue
		}
		conv := ev.Converged
		if conv < 0 || conv > to {
			conv = to
		}
		out = append(out, Phase{Kind: "transient", From: ev.Begin, To: conv, Deciders: nodes})
		if conv < to {
			kind := "steady"
			if !ev.Fault && ev.Steady <= 1 {
				kind = "calm"
			}
			out = append(out, Phase{Kind: kind, From: conv, To: to, Deciders: max(ev.Steady, 1)})
		}
	}
	return out
}

// bound returns the deciders allowed over [from, to) by the phases, and
// whether every phase it touches is calm.
func (r *Result) bound(from, to time.Duration) (int, bool) {
	d, calm := 0, true
	for _, p := range r.Phases {
		if p.From < to && from < p.To {
			d = max(d, p.Deciders)
			calm = calm && p.Kind == "calm"
		}
	}
	return max(d, 1), calm
}

func fallbackDeciders(ops []Op) int {
	var seen []string
	for _, op := range ops {
		if op.Degraded && !slices.Contains(seen, op.Owner) {
			seen = append(seen, op.Owner)
		}
	}
	return len(seen)
}

// check charges one window and records the worst and any violation.
// lost is how many of its admissions a kill may have lost from the
// deciders' counts (Step.Loses): the bounds are that much higher.
func (r *Result) check(a *Admission, ks KeySpec, from, to time.Duration, in []Op, factor, lost int) {
	if v := r.judge(a, ks.Name, from, to, tallyOf(in), int(ks.Limit)*factor, float64(ks.Limit), lost); v != nil {
		a.Violations = append(a.Violations, *v)
	}
}

// tally is what a window (an interval, an instant) is charged with: how
// many admissions, how many nodes decided some of them by fallback, and
// whether any of them said it was degraded.
type tally struct {
	n, fallback int
	degraded    bool
}

func tallyOf(in []Op) tally {
	return tally{n: len(in), fallback: fallbackDeciders(in), degraded: anyDegraded(in)}
}

// judge records a window over [from, to] charged with t: one decider's
// bound is one (in requests), and its worst is t.n ÷ per. It returns the
// violation, if any (the caller keeps it): over one × the deciders (the
// phases', plus the fallback's), or, with no admission marked degraded,
// over one. lost raises both (Result.lost).
func (r *Result) judge(a *Admission, key string, from, to time.Duration, t tally, one int, per float64, lost int) *Violation {
	a.Windows++
	d, calm := r.bound(from, to)
	if t.fallback > 0 {
		if d < r.maxDeciders {
			a.Raised++
		}
		d = min(d+t.fallback, r.maxDeciders)
	}
	ratio := float64(t.n) / per
	if ratio > a.Worst {
		a.Worst, a.WorstKey, a.WorstAt = ratio, key, from
	}
	if calm && ratio > a.WorstCalm {
		a.WorstCalm = ratio
	}
	switch {
	case t.n > one*d+lost:
		return &Violation{Key: key, From: from, Allowed: t.n, Bound: one*d + lost, Deciders: d}
	case t.n > one+lost && !t.degraded:
		return &Violation{Key: key, From: from, Allowed: t.n, Bound: one + lost, Deciders: 1, Silent: true}
	}
	return nil
}

func anyDegraded(ops []Op) bool {
	return slices.ContainsFunc(ops, func(op Op) bool { return op.Degraded })
}

// sliding checks the windows that start just before each allowed check.
// Node timestamps are whole milliseconds, so a window is taken 1 ms short.
func (r *Result) sliding(a *Admission, ks KeySpec, ops []Op, factor int) {
	w := ks.Window - time.Millisecond
	for i := range ops {
		from := ops[i].Invoke
		var in []Op
		for _, op := range ops[i:] {
			if op.Invoke >= from+w {
				break
			}
			if op.Complete < from+w {
				in = append(in, op)
			}
		}
		r.check(a, ks, from, from+ks.Window, in, factor, 0)
	}
}

// fixed checks the counter's epoch-aligned windows, where it never admits
// more than the limit per decider.
// A clock that runs at another rate has windows not aligned with the
// harness's: they are held to the rolling bound (factor 2) then.
func (r *Result) fixed(a *Admission, start time.Time, ks KeySpec, ops []Op, clockRate float64) {
	factor := 1
	if clockRate != 0 {
		factor = 2
	}
	w := ks.Window.Milliseconds()
	base := start.UnixMilli()
	wall := func(d time.Duration) int64 { return base + d.Milliseconds() }
	byWin := map[int64][]Op{}
	for _, op := range ops {
		if lo, hi := wall(op.Invoke), wall(op.Complete); lo/w == hi/w {
			byWin[lo/w] = append(byWin[lo/w], op)
		}
	}
	wins := make([]int64, 0, len(byWin))
	for k := range byWin {
		wins = append(wins, k)
	}
	slices.Sort(wins)
	for _, k := range wins {
		from := time.Duration(k*w-base) * time.Millisecond
		r.check(a, ks, from, from+ks.Window, byWin[k], factor, 0)
		if n := len(byWin[k]); n > int(ks.Limit) {
			a.Excess += n - int(ks.Limit)
			if _, calm := r.bound(from, from+ks.Window); calm {
				a.ExcessCalm += n - int(ks.Limit)
			}
		}
	}
}

// excessLog replays the allowed checks through an exact sliding log and
// counts those it would certainly have refused: L already kept checks
// certainly decided before this one and certainly less than a window
// before it (invoke and completion times, as for the windows).
func (r *Result) excessLog(a *Admission, ks KeySpec, ops []Op) {
	w := ks.Window - time.Millisecond
	var kept []Op // by invoke time
	for _, op := range ops {
		n := 0
		for _, k := range kept {
			if k.Complete <= op.Invoke && k.Invoke > op.Complete-w {
				n++
			}
		}
		if n >= int(ks.Limit) {
			a.Excess++
			if _, calm := r.bound(op.Invoke-ks.Window, op.Complete); calm {
				a.ExcessCalm++
			}
			continue
		}
		kept = append(kept, op)
		for len(kept) > 0 && kept[0].Complete < op.Invoke-2*ks.Window {
			kept = kept[1:]
		}
	}
}

// availability counts answers, for all checks and for the checks sent to
// a node that was up (running, not paused) for the whole check: what a
// client that avoids dead nodes would have seen.
func availability(h History) (all, healthy Availability) {
	count := func(a *Availability, op Op) {
		a.Ops++
		switch op.Outcome {
		case Allowed, Denied:
			a.Answered++
			if op.Latency() <= 100*time.Millisecond {
				a.Fast++
			}
			if op.Degraded {
				a.Degraded++
			}
		case Timeout:
			a.Timeouts++
		default:
			a.Errors++
		}
	}
	for _, op := range h.Ops {
		count(&all, op)
		for _, s := range h.Up[op.Node] {
			if s.From <= op.Invoke && (s.To == 0 || op.Complete <= s.To) {
				count(&healthy, op)
				break
			}
		}
	}
	return all, healthy
}

// series samples, every Bucket, the checks admitted in the window before
// (by midpoint) divided by what the limits admit in a window: 1.0 is every
// key exactly at its limit.
func (r *Result) series(h History) {
	n := int(h.End/r.Bucket) + 1
	cnt, lg := make([]float64, n), make([]float64, n)
	var capC, capL float64
	for _, ks := range h.Keys {
		if !charted(ks) {
			continue
		}
		if ks.Algorithm == pb.Algorithm_SLIDING_WINDOW_LOG {
			capL += float64(ks.Limit)
		} else {
			capC += float64(ks.Limit)
		}
	}
	for _, op := range h.Ops {
		if !op.Admitted() || !charted(h.Keys[op.Key]) {
			continue
		}
		mid := (op.Invoke + op.Complete) / 2
		w := h.Keys[op.Key].Window
		s := cnt
		if h.Keys[op.Key].Algorithm == pb.Algorithm_SLIDING_WINDOW_LOG {
			s = lg
		}
		// Sample i at time i×Bucket counts mid when mid ∈ (t−W, t].
		for i := int((mid + r.Bucket - 1) / r.Bucket); i < n && time.Duration(i)*r.Bucket < mid+w; i++ {
			s[i]++
		}
	}
	for i := range n {
		if capC > 0 {
			cnt[i] /= capC
		}
		if capL > 0 {
			lg[i] /= capL
		}
	}
	r.SeriesCounter, r.SeriesLog = cnt, lg
}

// charted reports whether the chart counts the key's admissions: the
// window algorithms' sliding keys. A day's budget has no rate to chart
// against, a bucket's burst and a slot's hold none in one window.
func charted(ks KeySpec) bool {
	return !ks.IsCalendar() && (ks.Algorithm == pb.Algorithm_SLIDING_WINDOW_COUNTER || ks.Algorithm == pb.Algorithm_SLIDING_WINDOW_LOG)
}
