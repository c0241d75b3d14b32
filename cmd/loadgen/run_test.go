package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// fakeTarget answers in process: even keys are allowed, odd keys denied.
type fakeTarget struct {
	delay     time.Duration // per call
	spin      time.Duration // per call, busy: uses the CPU
	block     bool          // calls wait for their context to end
	failKey   int           // > 0: keys that are multiples of it fail on their own
	callErr   error         // every call fails so
	calls     atomic.Int64
	maxChecks atomic.Int64 // the most checks one call carried
	// answered, if set, is called after each call that succeeded.
	answered func(n int64)
	done     atomic.Int64 // calls that succeeded
}

func (f *fakeTarget) caller(int) caller { return f }
func (f *fakeTarget) close() error      { return nil }

func (f *fakeTarget) call(ctx context.Context, keys []int, o *outcome) error {
	f.calls.Add(1)
	for n := int64(len(keys)); ; {
		m := f.maxChecks.Load()
		if n <= m || f.maxChecks.CompareAndSwap(m, n) {
			break
		}
	}
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	if f.delay > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(f.delay):
		}
	}
	for end := time.Now().Add(f.spin); time.Now().Before(end); {
		// Busy on purpose: the CPU time is what a test measures.
	}
	if f.callErr != nil {
		return f.callErr
	}
	for _, k := range keys {
		switch {
		case f.failKey > 0 && k%f.failKey == 0:
			o.fail(fmt.Errorf("key %d failed", k))
		case k%2 == 0:
			o.allowed++
		default:
			o.denied++
		}
	}
	if n := f.done.Add(1); f.answered != nil {
		f.answered(n)
	}
	return nil
}

func fakeConfig() Config {
	cfg := defaultConfig()
	cfg.Workers = 4
	cfg.Duration = 500 * time.Millisecond
	cfg.Keys = 100
	cfg.Progress = false
	return cfg
}

func TestLoadStopsAtCountExactly(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := fakeConfig()
	cfg.Count, cfg.Batch, cfg.Duration = 1003, 10, time.Minute
	f := &fakeTarget{}
	res := load(context.Background(), cfg, f)
	assert.Equal(t, int64(1003), res.Checks)
	assert.Equal(t, res.Checks, res.Allowed+res.Denied)
	assert.Zero(t, res.Errors)
	assert.Equal(t, int64(101), res.Calls, "100 calls of 10, one of 3")
	assert.Equal(t, int64(101), f.calls.Load())
	assert.Equal(t, int64(10), f.maxChecks.Load())
	assert.Positive(t, res.Allowed)
	assert.Positive(t, res.Denied)
	assert.Less(t, res.DurationS, 10.0)
	assert.InDelta(t, float64(res.Checks)/res.DurationS, res.ChecksPerS, 1e-6)
}

func TestLoadCountsFailedChecks(t *testing.T) {
	cfg := fakeConfig()
	cfg.Count, cfg.Batch = 2000, 10
	res := load(context.Background(), cfg, &fakeTarget{failKey: 5})
	assert.Equal(t, int64(2000), res.Checks+res.Errors)
	assert.Equal(t, res.Checks, res.Allowed+res.Denied)
	// Keys 0, 5, 10, … fail: about a fifth of uniform draws from 0..99.
	assert.InDelta(t, 400, res.Errors, 100)
	require.NotEmpty(t, res.FirstErrors)
	assert.LessOrEqual(t, len(res.FirstErrors), keptErrors)
	assert.Regexp(t, `^at \d+\.\d{3}s: key \d+ failed$`, res.FirstErrors[0])
}

func TestLoadCountsFailedCallsAndPauses(t *testing.T) {
	cfg := fakeConfig()
	cfg.Batch, cfg.Duration = 3, 200*time.Millisecond
	f := &fakeTarget{callErr: errors.New("unavailable")}
	res := load(context.Background(), cfg, f)
	assert.Zero(t, res.Checks)
	assert.Zero(t, res.Calls, "failed calls are not latency samples")
	// A failed call of 3 checks is 3 errors, except the calls the end of
	// the run cut short (one per worker at most), which are not counted.
	assert.Zero(t, res.Errors%3, "a failed call of 3 checks is 3 errors")
	assert.LessOrEqual(t, res.Errors, 3*f.calls.Load())
	assert.GreaterOrEqual(t, res.Errors, 3*(f.calls.Load()-int64(cfg.Workers)))
	// Each worker pauses errorPause after a failure: about 20 calls each.
	assert.LessOrEqual(t, f.calls.Load(), int64(cfg.Workers)*int64(cfg.Duration/errorPause+2))
	assert.Contains(t, res.FirstErrors[0], "unavailable")
}

func TestLoadIsBoundedByDuration(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := fakeConfig()
	cfg.Duration = 300 * time.Millisecond
	began := time.Now()
	// Calls that never answer: the run still ends on time, and what the end
	// of the run cut short is neither a check nor an error.
	res := load(context.Background(), cfg, &fakeTarget{block: true})
	assert.Less(t, time.Since(began), 2*time.Second)
	assert.InDelta(t, 0.3, res.DurationS, 0.2)
	assert.Zero(t, res.Checks)
	assert.Zero(t, res.Errors)
	assert.Equal(t, Percentiles{}, res.LatencyUS)
}

func TestLoadStopsOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := fakeConfig()
	cfg.Duration = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	// The signal comes once calls have been answered, however slowly a
	// loaded machine runs them (a timer of 200 ms once saw none, under
	// the race detector beside the chaos suite).
	f := &fakeTarget{delay: 100 * time.Microsecond, answered: func(n int64) {
		if n == 50 {
			cancel()
		}
	}}
	began := time.Now()
	res := load(ctx, cfg, f)
	assert.Less(t, time.Since(began), 2*time.Second)
	assert.Positive(t, res.Checks, "what ran before the signal is reported")
	assert.Zero(t, res.Errors)
	assert.Positive(t, res.LatencyUS.P50)
	assert.GreaterOrEqual(t, res.LatencyUS.P50, 100.0)
	assert.LessOrEqual(t, res.LatencyUS.P50, res.LatencyUS.P90)
	assert.LessOrEqual(t, res.LatencyUS.P90, res.LatencyUS.P99)
	assert.LessOrEqual(t, res.LatencyUS.P99, res.LatencyUS.P999)
}

// The load generator reports its own CPU time over the load phase: here
// two workers spin, so it is a good part of the phase's length (less on a
// busy machine), and never more than the cores could give.
func TestLoadMeasuresItsCPU(t *testing.T) {
	cfg := fakeConfig()
	cfg.Workers, cfg.Duration = 2, 300*time.Millisecond
	res := load(context.Background(), cfg, &fakeTarget{spin: 50 * time.Microsecond})
	require.Positive(t, res.Checks)
	assert.Positive(t, res.CPUSeconds)
	assert.Greater(t, res.CPUSeconds, 0.05, "two spinning workers for 0.3 s, even on a busy machine")
	assert.LessOrEqual(t, res.CPUSeconds, res.DurationS*float64(runtime.NumCPU())+0.05)

	// Blocked workers use next to no CPU.
	res = load(context.Background(), cfg, &fakeTarget{block: true})
	assert.Less(t, res.CPUSeconds, 0.1)
}

func TestLoadReportsTheConfiguration(t *testing.T) {
	cfg := fakeConfig()
	cfg.Count, cfg.Batch, cfg.Algorithm, cfg.Dist, cfg.Route = 10, 2, algoLog, distZipf, routeRandom
	began := time.Now().UTC()
	res := load(context.Background(), cfg, &fakeTarget{})
	assert.Equal(t, targetPeerlimit, res.Target)
	assert.Equal(t, routeRandom, res.Route)
	assert.Equal(t, 4, res.Workers)
	assert.Equal(t, 2, res.Batch)
	assert.Equal(t, algoLog, res.Algorithm)
	assert.Equal(t, 100, res.Keys)
	assert.Equal(t, distZipf, res.Dist)
	assert.Equal(t, "call", res.LatencyUnit)
	assert.WithinDuration(t, began, res.StartedAt, time.Second)
	assert.Equal(t, time.UTC, res.StartedAt.Location())
	assert.Equal(t, apiGRPC, res.API)
	assert.Empty(t, res.RLSDomain)

	cfg.API, cfg.RLSDomain = apiEnvoy, "edge"
	res = load(context.Background(), cfg, &fakeTarget{})
	assert.Equal(t, apiEnvoy, res.API)
	assert.Equal(t, "edge", res.RLSDomain)
	assert.Empty(t, res.Algorithm, "the domain's rule decides it")

	cfg.Target = targetRedis
	res = load(context.Background(), cfg, &fakeTarget{})
	assert.Empty(t, res.Route, "redis has no route")
	assert.Empty(t, res.API, "nor API")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProgressLines(t *testing.T) {
	w := &worker{}
	w.allowed.Store(150)
	w.denied.Store(50)
	w.failed.Store(3)
	w.degraded.Store(1)
	var h histogram
	h.add(2 * time.Millisecond)
	var out syncBuffer
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		progress(&out, done, 20*time.Millisecond, time.Now(), []*worker{w}, &h, true)
	}()
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") >= 2 }, 2*time.Second, 5*time.Millisecond)
	close(done)
	<-stopped
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Regexp(t, `^loadgen: +\d+s +\d+ checks/s  p99 2\.\d+ms +errors 3  degraded 1$`, lines[0])
	assert.Contains(t, lines[1], " 0 checks/s", "the rate is over the last interval")
}

func TestRunRejectsBadConfig(t *testing.T) {
	cfg := fakeConfig()
	cfg.Workers = 0
	_, err := run(context.Background(), cfg)
	assert.ErrorContains(t, err, "invalid configuration: -workers must be ≥ 1")
}

func TestWarnings(t *testing.T) {
	var b bytes.Buffer
	cfg := fakeConfig()
	cfg.Algorithm, cfg.Batch = algoLog, 2000
	warn(cfg, &b)
	assert.Contains(t, b.String(), "--max-log-limit")
	assert.Contains(t, b.String(), "--max-batch")
	b.Reset()
	cfg.Target = targetRedis
	warn(cfg, &b)
	assert.Empty(t, b.String())
}
