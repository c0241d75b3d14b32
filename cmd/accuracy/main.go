// Command accuracy measures how far the sliding window counter's decisions
// are from those of an exact sliding window log, the way Cloudflare measured
// theirs ("0.003% of requests wrongly allowed or rate limited").
//
// Every request of a simulated key goes to a real limiter.Store running the
// counter. Its verdict is then judged against the exact rule applied to the
// same history: count the hits the counter itself admitted in (T−W, T] and
// allow iff count+1 ≤ limit. Judging against an independent log store would
// be wrong, because the two algorithms admit different requests and their
// states drift apart; one early difference would then be counted again and
// again.
//
// The same request sequence also drives a real SlidingWindowLog store. Its
// verdicts are checked against the same exact rule on its own history, and
// its worst rolling window must never exceed the limit.
//
// The same sequence drives two GCRA buckets (bucketShapes): one at the
// limit's rate with a burst of one limit, the token bucket most would
// configure, and one at half the rate with half the burst, the largest
// bucket that never admits more than the limit in a rolling window. Each
// is judged twice: against GCRA's own formula recomputed here (it must
// never differ), and against the exact log rule on the bucket's own
// history, to show how a bucket's decisions differ from a rolling
// window's under the same traffic.
//
// The simulation is deterministic. Time is simulated (no clock is read and
// nothing sleeps), and every key draws from its own PCG stream derived from
// -seed, the row's name and the key's index, so a row's numbers do not depend
// on which other rows run, on -workers, or on goroutine scheduling.
//
// Usage:
//
//	go run ./cmd/accuracy [-seed 1] [-keys 1000] [-duration 10m] [-out table.md] [-json]
//
// The defaults cost about 30 s of CPU (about 270 million store decisions),
// under 20 s of wall time on two free cores.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
}

// run is main with its inputs and outputs injected, so that the test can
// drive the command end to end.
func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the flag package has printed the usage
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "accuracy: seed %d, %d keys per row, %s simulated per key, %d workers\n",
		o.seed, o.keys, o.duration, o.workers)
	began := time.Now() // wall time of the run, for the log line only
	rows, err := simulate(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "accuracy: %d rows in %s\n", len(rows), time.Since(began).Round(time.Millisecond))

	table := markdown(o, rows)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(table), 0o644); err != nil {
			return fmt.Errorf("writing the table: %w", err)
		}
	}
	if o.json {
		err = writeJSON(stdout, o, rows)
	} else {
		_, err = io.WriteString(stdout, table)
	}
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	// Checked last so that a violation comes with the numbers that show it.
	return checkInvariants(rows)
}

// options is one run's configuration.
type options struct {
	seed     uint64
	keys     int
	duration time.Duration
	out      string
	json     bool
	workers  int
	patterns []pattern
	specs    []spec
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{patterns: allPatterns(), specs: defaultSpecs}
	fs := flag.NewFlagSet("accuracy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Uint64Var(&o.seed, "seed", 1, "seed of every key's random stream; same seed, same numbers")
	fs.IntVar(&o.keys, "keys", 1000, "keys simulated per row (pattern × limit)")
	fs.DurationVar(&o.duration, "duration", 10*time.Minute, "simulated time per key")
	fs.StringVar(&o.out, "out", "", "also write the Markdown table to this file")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of the Markdown table")
	fs.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "keys simulated in parallel; does not change the numbers")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("parsing flags: %w", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.validate()
}

func (o options) validate() error {
	switch {
	case o.keys < 1:
		return fmt.Errorf("-keys must be ≥ 1, got %d", o.keys)
	case o.duration < time.Millisecond:
		return fmt.Errorf("-duration must be ≥ 1ms, got %s", o.duration)
	case o.workers < 1:
		return fmt.Errorf("-workers must be ≥ 1, got %d", o.workers)
	}
	return nil
}

// spec is one limit under test: Limit hits per rolling Window.
type spec struct {
	Limit  int64
	Window time.Duration
}

func (s spec) String() string { return fmt.Sprintf("%d/%gs", s.Limit, s.Window.Seconds()) }

// defaultSpecs span limits from 10 to 1000 per minute, where the log's
// memory grows with the limit, and a one-second window, where the whole
// simulated duration holds hundreds of windows and their boundaries.
var defaultSpecs = []spec{
	{10, time.Minute},
	{100, time.Minute},
	{1000, time.Minute},
	{10, time.Second},
}

// epochMS is where simulated time starts (2023-11-14T22:14:00Z): far from
// zero, so that the store's clamping of pre-1970 times plays no part. Each
// row starts at the first boundary of its window at or after it, because the
// store aligns windows to multiples of W since the Unix epoch and the
// patterns aim at those boundaries.
const epochMS = 1_700_000_040_000

// row is the result for one pattern under one spec.
type row struct {
	Pattern string
	Spec    spec
	Keys    int
	tally
}

// tally accumulates one key's, or one row's, outcomes.
type tally struct {
	Requests       int64
	CounterAllowed int64
	// FalseAllows counts requests the counter allowed but the exact rule,
	// on the counter's own admitted history, would have denied.
	FalseAllows int64
	// FalseDenies counts the opposite mistake.
	FalseDenies int64
	// AbsEstimateError sums |counter estimate − exact count| over requests,
	// SignedEstimateError sums estimate − exact: negative when the counter
	// underestimates, the direction that lets too much through.
	AbsEstimateError    int64
	SignedEstimateError int64
	// CounterPeak is the most hits the counter admitted in any rolling
	// window (T−W, T]; CounterPeakKey is the lowest key index reaching it.
	CounterPeak    int64
	CounterPeakKey int
	LogAllowed     int64
	LogPeak        int64
	// LogMismatches counts requests where the real log store decided
	// otherwise than the exact rule on the log's own admitted history. The
	// log is the ground truth only if this is zero.
	LogMismatches int64
	// FormulaMismatches counts requests where the real counter store
	// decided, or estimated, otherwise than the documented formula
	// floor(prev × (W−e)/W) + curr + 1 ≤ limit recomputed here. It makes sure
	// the table measures the algorithm the package documents.
	FormulaMismatches int64
	// Buckets are the GCRA buckets' outcomes, one per bucketShapes.
	Buckets [len(bucketShapes)]bucketTally
}

// bucketTally is one GCRA bucket's outcomes. Allowed counts what the
// GCRA store admitted. Looser counts requests it admitted that the exact
// rolling-window rule, on the bucket's own admitted history, would have
// denied; Stricter the opposite. Peak is the most hits it admitted in one
// rolling window. Mismatches counts requests where the store decided, or
// gave a retry time, otherwise than the bucket formula recomputed here.
type bucketTally struct {
	Allowed, Looser, Stricter, Peak, Mismatches int64
}

// bucketShape is a GCRA bucket for a limit L per W: Rate hits per W and
// a burst of Burst, each a fraction of L.
type bucketShape struct {
	Name        string
	Rate, Burst float64
}

// bucketShapes: the limit's rate with a burst of the limit (up to 2L in a
// window: a full bucket, then a window's refill), and half of each (at
// most L/2 + L/2 = L in any window: checkInvariants holds it to that).
var bucketShapes = [...]bucketShape{{"rate L/W, burst L", 1, 1}, {"rate L/2W, burst L/2", 0.5, 0.5}}

// of returns the shape's rate and burst for limit, at least 1 each.
func (b bucketShape) of(limit int64) (rate, burst int64) {
	return max(int64(float64(limit)*b.Rate), 1), max(int64(float64(limit)*b.Burst), 1)
}

func newTally() tally { return tally{CounterPeakKey: -1} }

// merge adds o into t. It is commutative, so the order in which workers
// finish does not change a row.
func (t *tally) merge(o tally) {
	if o.CounterPeakKey >= 0 && (t.CounterPeakKey < 0 || o.CounterPeak > t.CounterPeak ||
		o.CounterPeak == t.CounterPeak && o.CounterPeakKey < t.CounterPeakKey) {
		t.CounterPeak, t.CounterPeakKey = o.CounterPeak, o.CounterPeakKey
	}
	t.Requests += o.Requests
	t.CounterAllowed += o.CounterAllowed
	t.FalseAllows += o.FalseAllows
	t.FalseDenies += o.FalseDenies
	t.AbsEstimateError += o.AbsEstimateError
	t.SignedEstimateError += o.SignedEstimateError
	t.LogAllowed += o.LogAllowed
	t.LogPeak = max(t.LogPeak, o.LogPeak)
	t.LogMismatches += o.LogMismatches
	t.FormulaMismatches += o.FormulaMismatches
	for i := range t.Buckets {
		b, ob := &t.Buckets[i], o.Buckets[i]
		b.Allowed += ob.Allowed
		b.Looser += ob.Looser
		b.Stricter += ob.Stricter
		b.Peak = max(b.Peak, ob.Peak)
		b.Mismatches += ob.Mismatches
	}
}

// simulate runs every row, one after the other, each with its keys spread
// over the workers.
func simulate(o options) ([]row, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	var rows []row
	for _, p := range o.patterns {
		for _, sp := range o.specs {
			r, err := simulateRow(o, p, sp)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// simulateRow runs o.keys keys of pattern p under sp, against a fresh pair of
// stores: the store identifies state by key and window, not by limit, so
// rows must not share a store.
func simulateRow(o options, p pattern, sp spec) (row, error) {
	name := p.name + " " + sp.String()
	counter, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	if err != nil {
		return row{}, fmt.Errorf("row %s: counter store: %w", name, err)
	}
	logs, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	if err != nil {
		return row{}, fmt.Errorf("row %s: log store: %w", name, err)
	}
	buckets, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	if err != nil {
		return row{}, fmt.Errorf("row %s: GCRA store: %w", name, err)
	}
	w := sp.Window.Milliseconds()
	start := (epochMS + w - 1) / w * w
	end := start + o.duration.Milliseconds()

	var (
		mu    sync.Mutex
		total = newTally()
		errs  []error
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	for range min(o.workers, o.keys) {
		wg.Go(func() {
			local := newTally()
			for k := int(next.Add(1) - 1); k < o.keys; k = int(next.Add(1) - 1) {
				src := p.newSource(keyRNG(o.seed, name, k), sp, start, end)
				t, err := simulateKey(stores{counter, logs, buckets}, sp, "k"+strconv.Itoa(k), src)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				t.CounterPeakKey = k
				local.merge(t)
			}
			mu.Lock()
			total.merge(local)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return row{}, fmt.Errorf("row %s: %w", name, err)
	}
	// An evicted key restarts from nothing, which would show up here as
	// limiter error; refuse to report such a row.
	if ev := counter.Stats().Evictions + logs.Stats().Evictions + buckets.Stats().Evictions; ev > 0 {
		return row{}, fmt.Errorf("row %s: the stores evicted %d keys; use fewer -keys", name, ev)
	}
	return row{Pattern: p.name, Spec: sp, Keys: o.keys, tally: total}, nil
}

// keyRNG returns key k's random stream for the named row. Hashing the name
// (FNV-1a) rather than using the row's position keeps a row's numbers stable
// when rows are added, removed or run alone, as in the test.
func keyRNG(seed uint64, rowName string, k int) *rand.Rand {
	h := uint64(14695981039346656037)
	for i := 0; i < len(rowName); i++ {
		h ^= uint64(rowName[i])
		h *= 1099511628211
	}
	return rand.New(rand.NewPCG(seed, h^(uint64(k)+1)*0x9e3779b97f4a7c15))
}

// stores are the three a row's keys run against: the counter, the log and
// GCRA.
type stores struct{ counter, logs, buckets *limiter.Store }

// simulateKey feeds one key's requests to the three stores and judges
// every decision. Each request consumes one hit.
func simulateKey(st stores, sp spec, key string, src source) (tally, error) {
	w := sp.Window.Milliseconds()
	creq := limiter.Request{Key: key, Limit: sp.Limit, Window: sp.Window, Algorithm: limiter.SlidingWindowCounter, Hits: 1}
	lreq := creq
	lreq.Algorithm = limiter.SlidingWindowLog
	counter, logs := st.counter, st.logs
	var buckets [len(bucketShapes)]bucketRun
	for i, shape := range bucketShapes {
		buckets[i] = newBucketRun(creq, shape, i)
	}

	var (
		t         = newTally()
		last      limiter.Decision
		prev      = int64(math.MinInt64)
		byCounter = rolling{w: w} // hits the counter admitted
		byLog     = rolling{w: w} // hits the log admitted
		formula   = twoWindows{w: w}
	)
	for {
		ms, ok := src.next(last)
		if !ok {
			break
		}
		if ms < prev {
			return t, fmt.Errorf("key %s: the source went back in time, from %d to %d ms", key, prev, ms)
		}
		prev = ms
		now := time.UnixMilli(ms)

		dc, err := counter.Check(now, creq)
		if err != nil {
			return t, fmt.Errorf("key %s: counter check at %d ms: %w", key, ms, err)
		}
		dl, err := logs.Check(now, lreq)
		if err != nil {
			return t, fmt.Errorf("key %s: log check at %d ms: %w", key, ms, err)
		}
		for i := range buckets {
			if err := buckets[i].check(st.buckets, &t.Buckets[i], ms, sp.Limit); err != nil {
				return t, fmt.Errorf("key %s: %w", key, err)
			}
		}
		t.Requests++
		t.judgeCounter(dc, byCounter.count(ms), sp.Limit)
		t.checkFormula(dc, &formula, ms, sp.Limit)
		t.judgeLog(dl, byLog.count(ms), sp.Limit)
		if dc.Allowed {
			byCounter.admit(ms)
		}
		if dl.Allowed {
			byLog.admit(ms)
		}
		last = dc
	}
	t.CounterPeak, t.LogPeak = byCounter.peak, byLog.peak
	for i := range buckets {
		t.Buckets[i].Peak = buckets[i].admitted.peak
	}
	return t, nil
}

// bucketRun is one key's GCRA bucket of one shape: its request (a key of
// its own, so that the shapes share a store), the formula it must follow,
// and the hits it admitted.
type bucketRun struct {
	req      limiter.Request
	model    gcraModel
	admitted rolling
}

func newBucketRun(base limiter.Request, shape bucketShape, i int) bucketRun {
	r := base
	r.Key = base.Key + "/" + strconv.Itoa(i)
	r.Algorithm = limiter.GCRA
	r.Limit, r.Burst = shape.of(base.Limit)
	return bucketRun{req: r, model: newGCRAModel(r.Window, r.Limit, r.Burst), admitted: rolling{w: base.Window.Milliseconds()}}
}

// check decides a hit at ms on the store, checks it against the bucket
// formula, and compares it with the exact rolling-window rule for limit
// on the bucket's own history (the hits it admitted in (T−W, T]).
func (b *bucketRun) check(s *limiter.Store, t *bucketTally, ms, limit int64) error {
	d, err := s.Check(time.UnixMilli(ms), b.req)
	if err != nil {
		return fmt.Errorf("GCRA check at %d ms: %w", ms, err)
	}
	allowed, retry := b.model.decide(ms)
	if d.Allowed != allowed || (!allowed && d.RetryAfter != retry) {
		t.Mismatches++
	}
	want := b.admitted.count(ms)+1 <= limit
	switch {
	case d.Allowed && !want:
		t.Looser++
	case !d.Allowed && want:
		t.Stricter++
	}
	if d.Allowed {
		t.Allowed++
		b.admitted.admit(ms)
	}
	return nil
}

// gcraModel is GCRA as docs/limiter.md states it, written independently
// of the store: a theoretical arrival time tat (ns); a hit at now fits iff
// max(tat, now) + T − now ≤ burst × T, T = ⌈W / limit⌉ ns; it then moves
// tat there. A denied hit's retry time is that excess.
type gcraModel struct {
	tat, t, burst int64
}

func newGCRAModel(window time.Duration, rate, burst int64) gcraModel {
	w := window.Nanoseconds()
	return gcraModel{t: (w + rate - 1) / rate, burst: burst}
}

func (m *gcraModel) decide(ms int64) (bool, time.Duration) {
	now := ms * int64(time.Millisecond)
	next := max(m.tat, now) + m.t
	if over := next - now - m.burst*m.t; over > 0 {
		return false, time.Duration(over)
	}
	m.tat = next
	return true, 0
}

// judgeCounter compares the counter's decision with the exact rule on the
// counter's own history, exact being the hits it admitted in (T−W, T].
func (t *tally) judgeCounter(d limiter.Decision, exact, limit int64) {
	want := exact+1 <= limit
	switch {
	case d.Allowed && !want:
		t.FalseAllows++
	case !d.Allowed && want:
		t.FalseDenies++
	}
	if d.Allowed {
		t.CounterAllowed++
	}
	t.AbsEstimateError += abs(d.CurrentCount - exact)
	t.SignedEstimateError += d.CurrentCount - exact
}

// judgeLog checks the log store against the exact rule on its own history.
func (t *tally) judgeLog(d limiter.Decision, exact, limit int64) {
	if d.Allowed != (exact+1 <= limit) || d.CurrentCount != exact {
		t.LogMismatches++
	}
	if d.Allowed {
		t.LogAllowed++
	}
}

// checkFormula recomputes the counter's decision from the package's
// documented formula and counts any difference.
func (t *tally) checkFormula(d limiter.Decision, m *twoWindows, ms, limit int64) {
	est := m.estimate(ms)
	allowed := est+1 <= limit
	if d.Allowed != allowed || d.CurrentCount != est {
		t.FormulaMismatches++
	}
	if allowed {
		m.curr++
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// rolling holds the times of one key's admitted hits and counts those in
// (t−w, t], the log's window. Queries come in time order, so a lower index
// that only moves forward answers in amortised constant time; that is why it
// is not a binary search over all history.
type rolling struct {
	w    int64
	ts   []int64
	lo   int   // ts[lo:] are the hits that may still be in the window
	peak int64 // most hits seen in one window, sampled at every admission
}

// count returns the hits in (t−w, t]. t must not decrease between calls.
func (r *rolling) count(t int64) int64 {
	for r.lo < len(r.ts) && r.ts[r.lo] <= t-r.w {
		r.lo++
	}
	if r.lo >= 1024 && r.lo > len(r.ts)/2 { // drop expired history
		r.ts = append(r.ts[:0], r.ts[r.lo:]...)
		r.lo = 0
	}
	return int64(len(r.ts) - r.lo)
}

// admit records a hit at t and updates the peak. The busiest rolling window
// always ends at an admitted hit (slide its end back to the last hit it
// holds: it loses nothing), so sampling at admissions finds the true maximum.
func (r *rolling) admit(t int64) {
	r.ts = append(r.ts, t)
	r.peak = max(r.peak, r.count(t))
}

// twoWindows is the counter as doc.go and the seeds define it, written
// independently of the store so that the simulator can tell whether the store
// implements it.
type twoWindows struct {
	w, id, prev, curr int64
}

// estimate returns floor(prev × (W−e)/W) + curr at ms, after rolling the
// windows forward. Callers count an admission by incrementing curr.
func (m *twoWindows) estimate(ms int64) int64 {
	id := ms / m.w // ms > 0 in this simulation
	switch id - m.id {
	case 0:
	case 1:
		m.prev, m.curr = m.curr, 0
	default:
		m.prev, m.curr = 0, 0
	}
	m.id = id
	e := ms - id*m.w
	return m.prev*(m.w-e)/m.w + m.curr
}

// checkInvariants returns an error for every row that breaks what must hold
// whatever the traffic: the log is exact and never exceeds its limit, and
// the counter never admits more than twice its limit in a rolling window
// (see docs/accuracy.md for the derivation).
func checkInvariants(rows []row) error {
	var errs []error
	for _, r := range rows {
		name := r.Pattern + " " + r.Spec.String()
		if r.LogPeak > r.Spec.Limit {
			errs = append(errs, fmt.Errorf("%s: the log admitted %d hits in one window, over its limit %d", name, r.LogPeak, r.Spec.Limit))
		}
		if r.LogMismatches > 0 {
			errs = append(errs, fmt.Errorf("%s: the log store disagreed with an exact count %d times", name, r.LogMismatches))
		}
		if r.FormulaMismatches > 0 {
			errs = append(errs, fmt.Errorf("%s: the counter store disagreed with its documented formula %d times", name, r.FormulaMismatches))
		}
		if r.CounterPeak > 2*r.Spec.Limit {
			errs = append(errs, fmt.Errorf("%s: the counter admitted %d hits in one window, over twice its limit %d", name, r.CounterPeak, r.Spec.Limit))
		}
		for i, b := range r.Buckets {
			if b.Mismatches > 0 {
				errs = append(errs, fmt.Errorf("%s: the GCRA store (%s) disagreed with the bucket's formula %d times", name, bucketShapes[i].Name, b.Mismatches))
			}
			// A bucket admits at most burst + rate × span over any span,
			// and a rolling window spans under W.
			rate, burst := bucketShapes[i].of(r.Spec.Limit)
			if b.Peak > rate+burst {
				errs = append(errs, fmt.Errorf("%s: GCRA (%s) admitted %d hits in one window, over its burst plus a window's rate, %d", name, bucketShapes[i].Name, b.Peak, rate+burst))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invariant violated:\n%w", err)
	}
	return nil
}

// source yields one key's request times in milliseconds, never decreasing.
// last is the counter's decision on the previous request (the zero Decision
// before the first); only adaptive attackers look at it.
type source interface {
	next(last limiter.Decision) (ms int64, ok bool)
}

// pattern is a named traffic shape. newSource returns one key's requests in
// [start, end) for sp, drawing only from rng.
type pattern struct {
	name      string
	newSource func(rng *rand.Rand, sp spec, start, end int64) source
}

// allPatterns is every row of the report, in report order.
func allPatterns() []pattern {
	return []pattern{
		{"uniform-0.1x", uniformPattern(0.1)},
		{"uniform-0.5x", uniformPattern(0.5)},
		{"uniform-1x", uniformPattern(1)},
		{"uniform-2x", uniformPattern(2)},
		{"mixed", mixedSource},
		{"edge-bursts", edgeBurstSource},
		{"adversary-edge", adversaryEdgeSource},
		{"adversary-retry", adversaryRetrySource},
	}
}

// uniformPattern is Poisson arrivals at mult times the limit's average rate
// (limit/window): the memoryless traffic the counter's even-spread
// assumption describes best.
func uniformPattern(mult float64) func(*rand.Rand, spec, int64, int64) source {
	return func(rng *rand.Rand, sp spec, start, end int64) source {
		return newPoisson(rng, mult*perMS(sp), start, end)
	}
}

// mixed draws each key's rate log-uniformly between 0.001× and 2× the limit
// rate, so most keys are far below their limit and a few above it: a crude
// stand-in for real traffic, to show how a blended figure depends on the mix.
const mixedLow, mixedHigh = 0.001, 2.0

func mixedSource(rng *rand.Rand, sp spec, start, end int64) source {
	mult := math.Exp(math.Log(mixedLow) + rng.Float64()*(math.Log(mixedHigh)-math.Log(mixedLow)))
	return newPoisson(rng, mult*perMS(sp), start, end)
}

// perMS is the limit's average rate in hits per millisecond.
func perMS(sp spec) float64 { return float64(sp.Limit) / float64(sp.Window.Milliseconds()) }

// poisson yields arrivals with exponential gaps at rate (per ms). Time is
// kept as a float offset from start so that precision does not depend on the
// epoch; several arrivals may share a millisecond.
type poisson struct {
	rng        *rand.Rand
	rate       float64
	at         float64
	start, end int64
}

func newPoisson(rng *rand.Rand, rate float64, start, end int64) *poisson {
	return &poisson{rng: rng, rate: rate, start: start, end: end}
}

func (p *poisson) next(limiter.Decision) (int64, bool) {
	if p.rate <= 0 {
		return 0, false
	}
	p.at += p.rng.ExpFloat64() / p.rate
	ms := p.start + int64(p.at)
	return ms, ms < p.end
}

// fixed replays precomputed times.
type fixed struct {
	ts []int64
	i  int
}

func (f *fixed) next(limiter.Decision) (int64, bool) {
	if f.i >= len(f.ts) {
		return 0, false
	}
	f.i++
	return f.ts[f.i-1], true
}

// Edge bursts: the fixed-window boundary attack (a limit's worth just before
// a boundary and again just after it), thrown at half of the boundaries,
// over background traffic at a quarter of the limit rate.
const (
	edgeFraction   = 0.05 // each half of a burst falls within 5% of W of the boundary
	edgeBackground = 0.25 // background rate, × limit/window
	edgeProb       = 0.5  // chance that a given boundary is attacked
)

func edgeBurstSource(rng *rand.Rand, sp spec, start, end int64) source {
	var ts []int64
	bg := newPoisson(rng, edgeBackground*perMS(sp), start, end)
	for ms, ok := bg.next(limiter.Decision{}); ok; ms, ok = bg.next(limiter.Decision{}) {
		ts = append(ts, ms)
	}
	w := sp.Window.Milliseconds()
	spread := max(int64(float64(w)*edgeFraction), 1)
	for b := start + w; b < end; b += w {
		if rng.Float64() >= edgeProb {
			continue
		}
		for range burstSize(rng, sp.Limit) {
			ts = append(ts, b-1-rng.Int64N(spread)) // in [b−spread, b)
		}
		for range burstSize(rng, sp.Limit) {
			if t := b + rng.Int64N(spread); t < end {
				ts = append(ts, t)
			}
		}
	}
	slices.Sort(ts)
	return &fixed{ts: ts}
}

// burstSize is about a limit's worth: uniform in [0.8, 1.2] × limit.
func burstSize(rng *rand.Rand, limit int64) int64 {
	return max(int64(math.Round(float64(limit)*(0.8+0.4*rng.Float64()))), 1)
}

// adversaryEdgeSource builds the counter's worst case. In every even window
// the attacker sends a full limit in the window's last millisecond. In every
// odd window it sends another full limit d ms before that window's last
// millisecond, with 1 ≤ d and limit × (d+1) < W. There the previous window
// weighs floor(limit × (d+1)/W) = 0, so the whole burst is admitted, while
// the earlier burst, only W − d ms old, is still inside the rolling window:
// 2 × limit admitted within W − d ms. d is drawn per key to show that the
// attack needs no precise timing: any instant in the last W/limit of the
// window works. (If W ≤ 2 × limit ms no such d exists, d is 1 and part of
// the second burst is refused; the default specs are far from that.)
func adversaryEdgeSource(rng *rand.Rand, sp spec, start, end int64) source {
	w := sp.Window.Milliseconds()
	d := 1 + rng.Int64N(max((w-1)/sp.Limit-1, 1))
	var ts []int64
	for j := int64(0); ; j++ {
		at := start + (j+1)*w - 1
		if j%2 == 1 {
			at -= d
		}
		if at >= end {
			break
		}
		for range sp.Limit {
			ts = append(ts, at)
		}
	}
	return &fixed{ts: ts}
}

// retryProber is an adaptive attacker that takes all the counter will give:
// it fires until refused, then comes back exactly when RetryAfter says the
// estimate will have dropped enough. It starts at a random point of the
// first window; the later it starts, the more of its opening burst is still
// in the rolling window when the counter has let the previous window's
// weight decay.
type retryProber struct {
	at, end int64
	started bool
}

func adversaryRetrySource(rng *rand.Rand, sp spec, start, end int64) source {
	return &retryProber{at: start + rng.Int64N(sp.Window.Milliseconds()), end: end}
}

func (p *retryProber) next(last limiter.Decision) (int64, bool) {
	switch {
	case !p.started:
		p.started = true
	case last.Allowed: // fire again in the same millisecond
	default:
		// RetryAfter is at least 1 ms on a denial; the floor only guards
		// against a limiter bug turning into an endless loop.
		p.at += max(last.RetryAfter.Milliseconds(), 1)
	}
	return p.at, p.at < p.end
}

// jsonRow is a row as -json prints it: raw counts plus the derived figures
// of the table, so that scripts need not recompute them.
type jsonRow struct {
	Pattern             string       `json:"pattern"`
	Limit               int64        `json:"limit"`
	WindowMS            int64        `json:"window_ms"`
	Keys                int          `json:"keys"`
	Requests            int64        `json:"requests"`
	CounterAllowed      int64        `json:"counter_allowed"`
	FalseAllows         int64        `json:"false_allows"`
	FalseDenies         int64        `json:"false_denies"`
	WrongAllowedPct     float64      `json:"wrongly_allowed_pct"`
	WrongDeniedPct      float64      `json:"wrongly_denied_pct"`
	WrongTotalPct       float64      `json:"wrong_total_pct"`
	MeanAbsErrorOfLimit float64      `json:"mean_abs_estimate_error_of_limit"`
	MeanErrorOfLimit    float64      `json:"mean_signed_estimate_error_of_limit"`
	CounterPeak         int64        `json:"counter_peak"`
	CounterPeakRatio    float64      `json:"counter_peak_ratio"`
	CounterPeakKey      int          `json:"counter_peak_key"`
	LogAllowed          int64        `json:"log_allowed"`
	LogPeak             int64        `json:"log_peak"`
	LogPeakRatio        float64      `json:"log_peak_ratio"`
	LogMismatches       int64        `json:"log_mismatches"`
	FormulaMismatches   int64        `json:"formula_mismatches"`
	Buckets             []jsonBucket `json:"gcra"`
}

// jsonBucket is one GCRA shape's figures in a jsonRow.
type jsonBucket struct {
	Shape       string  `json:"shape"`
	Allowed     int64   `json:"allowed"`
	LooserPct   float64 `json:"allowed_where_log_denies_pct"`
	StricterPct float64 `json:"denied_where_log_allows_pct"`
	Peak        int64   `json:"peak"`
	PeakRatio   float64 `json:"peak_ratio"`
	Mismatches  int64   `json:"mismatches"`
}

type jsonReport struct {
	Seed       uint64    `json:"seed"`
	Keys       int       `json:"keys"`
	DurationMS int64     `json:"duration_ms"`
	Command    string    `json:"command"`
	Rows       []jsonRow `json:"rows"`
}

func (r row) json() jsonRow {
	return jsonRow{
		Pattern: r.Pattern, Limit: r.Spec.Limit, WindowMS: r.Spec.Window.Milliseconds(), Keys: r.Keys,
		Requests: r.Requests, CounterAllowed: r.CounterAllowed,
		FalseAllows: r.FalseAllows, FalseDenies: r.FalseDenies,
		WrongAllowedPct: r.pct(r.FalseAllows), WrongDeniedPct: r.pct(r.FalseDenies),
		WrongTotalPct:       r.pct(r.FalseAllows + r.FalseDenies),
		MeanAbsErrorOfLimit: r.perRequestOfLimit(r.AbsEstimateError),
		MeanErrorOfLimit:    r.perRequestOfLimit(r.SignedEstimateError),
		CounterPeak:         r.CounterPeak, CounterPeakRatio: r.ratio(r.CounterPeak), CounterPeakKey: r.CounterPeakKey,
		LogAllowed: r.LogAllowed, LogPeak: r.LogPeak, LogPeakRatio: r.ratio(r.LogPeak),
		LogMismatches: r.LogMismatches, FormulaMismatches: r.FormulaMismatches,
		Buckets: r.jsonBuckets(),
	}
}

func (r row) jsonBuckets() []jsonBucket {
	out := make([]jsonBucket, len(r.Buckets))
	for i, b := range r.Buckets {
		out[i] = jsonBucket{Shape: bucketShapes[i].Name, Allowed: b.Allowed, LooserPct: r.pct(b.Looser), StricterPct: r.pct(b.Stricter),
			Peak: b.Peak, PeakRatio: r.ratio(b.Peak), Mismatches: b.Mismatches}
	}
	return out
}

// pct is n as a percentage of the row's requests.
func (r row) pct(n int64) float64 {
	if r.Requests == 0 {
		return 0
	}
	return 100 * float64(n) / float64(r.Requests)
}

func (r row) ratio(n int64) float64 { return float64(n) / float64(r.Spec.Limit) }

// perRequestOfLimit is sum averaged over the row's requests, as a fraction
// of the limit.
func (r row) perRequestOfLimit(sum int64) float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(sum) / float64(r.Requests) / float64(r.Spec.Limit)
}

func writeJSON(w io.Writer, o options, rows []row) error {
	rep := jsonReport{Seed: o.seed, Keys: o.keys, DurationMS: o.duration.Milliseconds(), Command: command(o)}
	for _, r := range rows {
		rep.Rows = append(rep.Rows, r.json())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	return nil
}

// command is the invocation that reproduces o's numbers.
func command(o options) string {
	return fmt.Sprintf("go run ./cmd/accuracy -seed %d -keys %d -duration %s", o.seed, o.keys, o.duration)
}

// markdown renders the table with the command and seed that reproduce it.
func markdown(o options, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Seed %d, %d keys per row, %s of simulated traffic per key. Reproduce with:\n\n", o.seed, o.keys, o.duration)
	fmt.Fprintf(&b, "    %s\n\n", command(o))
	b.WriteString("| pattern | limit | requests | counter admitted | wrongly allowed | wrongly denied | wrong total | mean \\|est − exact\\| / limit | worst window / limit, counter | worst window / limit, log |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %.4f | %.3f | %.3f |\n",
			r.Pattern, r.Spec, r.Requests, fmtPct(r.pct(r.CounterAllowed)),
			fmtPct(r.pct(r.FalseAllows)), fmtPct(r.pct(r.FalseDenies)), fmtPct(r.pct(r.FalseAllows+r.FalseDenies)),
			r.perRequestOfLimit(r.AbsEstimateError), r.ratio(r.CounterPeak), r.ratio(r.LogPeak))
	}
	b.WriteString("\nGCRA buckets for the same limit L per W, against the exact log's rule on each bucket's own history:\n\n")
	b.WriteString("| pattern | limit | bucket | log admitted | bucket admitted | allowed, log's rule denies | denied, log's rule allows | worst window / limit |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|\n")
	for _, r := range rows {
		for i, k := range r.Buckets {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.3f |\n",
				r.Pattern, r.Spec, bucketShapes[i].Name, fmtPct(r.pct(r.LogAllowed)), fmtPct(r.pct(k.Allowed)),
				fmtPct(r.pct(k.Looser)), fmtPct(r.pct(k.Stricter)), r.ratio(k.Peak))
		}
	}
	return b.String()
}

// fmtPct prints small rates with enough digits to compare with 0.003%.
func fmtPct(p float64) string {
	if p == 0 {
		return "0%"
	}
	return strconv.FormatFloat(p, 'f', 4, 64) + "%"
}
