package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/internal/proccpu"
)

// target is a system under load: a peerlimit cluster or a Redis server.
type target interface {
	// caller returns worker i's caller. Each worker has its own, so a
	// caller may keep reusable buffers.
	caller(i int) caller
	// close releases the connections once every worker has stopped.
	close() error
}

// caller makes one worker's calls.
type caller interface {
	// call decides the checks of keys (indexes into the key space) in one
	// call and adds their outcomes to o. An error is the failure of the
	// call as a whole: none of its checks was decided. A check that failed
	// on its own (an item of a batch) is counted in o.failed instead.
	call(ctx context.Context, keys []int, o *outcome) error
}

// outcome is what one call decided.
type outcome struct {
	allowed, denied, degraded, failed int64
	err                               error // of the first failed check
}

// count counts one decided check.
func (o *outcome) count(allowed, degraded bool) {
	if allowed {
		o.allowed++
	} else {
		o.denied++
	}
	if degraded {
		o.degraded++
	}
}

const (
	// setupTimeout bounds connecting and loading the scripts, before the
	// load phase (which -duration bounds) starts.
	setupTimeout = 10 * time.Second
	// errorPause is how long a worker waits after a failed call, so that a
	// dead endpoint that fails calls at once does not turn the workers into
	// a busy loop starving the machine (and the nodes on it).
	errorPause = 10 * time.Millisecond
	// keptErrors is how many errors the result quotes.
	keptErrors = 5
)

// worker is one concurrent caller's state. Its counters are atomic only
// because the progress line reads them while the worker runs.
type worker struct {
	allowed, denied, degraded, failed, calls atomic.Int64
	lat                                      *reservoir
	_                                        [64]byte // keeps workers' counters off each other's cache lines
}

// run loads cfg's target for cfg.Duration or until cfg.Count checks, or
// until ctx ends (SIGINT), and returns what it measured. An error means
// the run could not start: bad configuration, or the target could not be
// set up. Errors of calls during the run are counted in the Result.
func run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, fmt.Errorf("invalid configuration: %w", err)
	}
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = io.Discard
		cfg.Stderr = stderr
	}
	warn(cfg, stderr)
	keys := keyNames(cfg.KeyPrefix, cfg.Keys)

	setupCtx, cancelSetup := context.WithTimeout(ctx, setupTimeout)
	tgt, err := openTarget(setupCtx, &cfg, keys)
	cancelSetup()
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if err := tgt.close(); err != nil {
			fmt.Fprintf(stderr, "loadgen: closing the connections: %v\n", err)
		}
	}()
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("interrupted during setup: %w", err)
	}
	return load(ctx, cfg, tgt), nil
}

// load is the load phase of run: cfg.Workers workers calling tgt until
// cfg.Duration has passed, cfg.Count checks were made or ctx ends. Every
// goroutine it starts has stopped when it returns.
func load(ctx context.Context, cfg Config, tgt target) Result {
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	workers := make([]*worker, cfg.Workers)
	capacity, expect := sampleCap(cfg.Workers), expectedCalls(cfg)
	for i := range workers {
		workers[i] = &worker{lat: newReservoir(capacity, expect, cfg.Seed^uint64(i))}
	}
	var issued atomic.Int64
	take := func() int { // how many checks the next call may carry
		if cfg.Count == 0 {
			return cfg.Batch
		}
		end := issued.Add(int64(cfg.Batch))
		begin := end - int64(cfg.Batch)
		if begin >= cfg.Count {
			return 0
		}
		return int(min(end, cfg.Count) - begin)
	}
	var hist *histogram // only the progress line reads it: nil, and not fed, without one
	if cfg.Progress {
		hist = &histogram{}
	}
	errs := &errorLog{}
	loadCtx, cancelLoad := context.WithTimeout(ctx, cfg.Duration)
	defer cancelLoad()
	cpu0, cpuOK := proccpu.Self()
	start := time.Now()
	var wg sync.WaitGroup
	for i, w := range workers {
		c := tgt.caller(i)
		gen := newKeyGen(cfg.Dist, cfg.Keys, cfg.ZipfS, cfg.Seed, uint64(i))
		wg.Go(func() { w.loop(loadCtx, cfg.Batch, c, gen, take, hist, errs, start) })
	}
	stopProgress := func() {}
	if cfg.Progress {
		done, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			progress(stderr, done, time.Second, start, workers, hist, cfg.Target == targetPeerlimit)
		}()
		stopProgress = func() { close(done); <-stopped }
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, cpuOK1 := proccpu.Self()
	stopProgress()

	res := summarize(cfg, workers, start, elapsed)
	if cpuOK && cpuOK1 {
		res.CPUSeconds = (cpu1 - cpu0).Seconds()
	}
	res.FirstErrors = errs.first()
	return res
}

// summarize adds the workers' counts and latencies up into the run's
// Result.
func summarize(cfg Config, workers []*worker, start time.Time, elapsed time.Duration) Result {
	res := Result{
		Target: cfg.Target, Workers: cfg.Workers, Batch: cfg.Batch, Algorithm: cfg.Algorithm,
		Keys: cfg.Keys, Dist: cfg.Dist, DurationS: elapsed.Seconds(),
		LatencyUnit: "call", StartedAt: start.UTC(),
	}
	if cfg.Target == targetPeerlimit {
		res.API, res.Route = cfg.API, cfg.Route
		res.Coalesce = cfg.Route == routeOwner && cfg.Coalesce
		if cfg.API == apiEnvoy {
			res.Algorithm, res.RLSDomain = "", cfg.RLSDomain
		}
	}
	lats := make([]*reservoir, len(workers))
	for i, w := range workers {
		res.Allowed += w.allowed.Load()
		res.Denied += w.denied.Load()
		res.Errors += w.failed.Load()
		res.Degraded += w.degraded.Load()
		res.Calls += w.calls.Load()
		lats[i] = w.lat
	}
	res.Checks = res.Allowed + res.Denied
	res.ChecksPerS = float64(res.Checks) / elapsed.Seconds()
	res.LatencyUS = mergePercentiles(lats)
	return res
}

// openTarget connects to cfg's target.
func openTarget(ctx context.Context, cfg *Config, keys []string) (target, error) {
	switch {
	case cfg.Target == targetRedis:
		return newRedisTarget(ctx, cfg, keys)
	case cfg.API == apiHTTP:
		return newHTTPTarget(ctx, cfg, keys)
	case cfg.API == apiEnvoy:
		return newEnvoyTarget(ctx, cfg, keys)
	}
	return newPeerlimitTarget(ctx, cfg, keys)
}

// warn prints what is valid but probably not what the user meant.
func warn(cfg Config, w io.Writer) {
	if cfg.Target != targetPeerlimit {
		return
	}
	// Both are node flags; the nodes may have been started with others.
	if cfg.API != apiEnvoy && cfg.Algorithm == algoLog && cfg.Limit > 10_000 {
		fmt.Fprintf(w, "loadgen: warning: -limit %d with -algorithm log: nodes refuse log limits over --max-log-limit (default 10000)\n", cfg.Limit)
	}
	if cfg.Batch > 1000 {
		fmt.Fprintf(w, "loadgen: warning: -batch %d: nodes refuse batches over --max-batch (default 1000)\n", cfg.Batch)
	}
}

// expectedCalls guesses how many calls one worker will make, to allocate
// its latency samples up front (more are appended if needed).
func expectedCalls(cfg Config) int {
	if cfg.Count > 0 {
		return int(cfg.Count/int64(cfg.Batch)/int64(cfg.Workers)) + 16
	}
	const callsPerSecond = 50_000 // about what one box does with batch 1
	return int(min(cfg.Duration.Seconds()*callsPerSecond/float64(cfg.Batch*cfg.Workers), 1<<30))
}

// loop makes calls until the run ends or take allows no more checks. hist
// is nil when no progress line reads it.
func (w *worker) loop(ctx context.Context, batch int, c caller, gen *keyGen, take func() int,
	hist *histogram, errs *errorLog, start time.Time) {
	idx := make([]int, batch)
	pause := time.NewTimer(0)
	defer pause.Stop()
	for ctx.Err() == nil {
		n := take()
		if n == 0 {
			return
		}
		for i := range n {
			idx[i] = gen.next()
		}
		var o outcome
		t0 := time.Now()
		err := c.call(ctx, idx[:n], &o)
		d := time.Since(t0)
		if err == nil && o.failed == int64(n) {
			err = o.err // nothing decided: a failed call, whatever the reason
		}
		if (err != nil || o.failed > 0) && ended(ctx) {
			return // cut short by the end of the run: not the target's failure
		}
		if err != nil {
			w.failed.Add(int64(n))
			errs.add(time.Since(start), err)
			pause.Reset(errorPause)
			select {
			case <-ctx.Done():
				return
			case <-pause.C:
			}
			continue
		}
		w.lat.add(d)
		if hist != nil {
			hist.add(d)
		}
		w.calls.Add(1)
		w.allowed.Add(o.allowed)
		w.denied.Add(o.denied)
		if o.degraded > 0 {
			w.degraded.Add(o.degraded)
		}
		if o.failed > 0 {
			w.failed.Add(o.failed)
			errs.add(time.Since(start), o.err)
		}
	}
}

// ended reports whether the run's context is over. A call can fail on the
// run's deadline a moment before the context's own timer fires (gRPC
// checks the deadline against the clock), so the clock decides too.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// progress writes a line to w every interval until done is closed: the
// elapsed time, checks/s over the last interval, the p99 so far and the
// errors so far (and the degraded answers so far, with degraded).
func progress(w io.Writer, done <-chan struct{}, interval time.Duration, start time.Time,
	workers []*worker, hist *histogram, degraded bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var prevChecks int64
	prevT := start
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			var checks, failed, deg int64
			for _, wk := range workers {
				checks += wk.allowed.Load() + wk.denied.Load()
				failed += wk.failed.Load()
				deg += wk.degraded.Load()
			}
			rate := float64(checks-prevChecks) / now.Sub(prevT).Seconds()
			prevChecks, prevT = checks, now
			line := fmt.Sprintf("loadgen: %5.0fs %9.0f checks/s  p99 %-8s errors %d",
				now.Sub(start).Seconds(), rate, fmtUS(micros(hist.quantile(990))), failed)
			if degraded {
				line += fmt.Sprintf("  degraded %d", deg)
			}
			fmt.Fprintln(w, line)
		}
	}
}

// errorLog keeps the first few errors of a run.
type errorLog struct {
	full atomic.Bool // then add takes no lock
	mu   sync.Mutex
	errs []string
}

func (l *errorLog) add(at time.Duration, err error) {
	if l.full.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < keptErrors {
		l.errs = append(l.errs, fmt.Sprintf("at %.3fs: %v", at.Seconds(), err))
	}
	l.full.Store(len(l.errs) == keptErrors)
}

func (l *errorLog) first() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errs...)
}
