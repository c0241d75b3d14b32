package jepsenlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Reservations under a crash. The profile's workload sends plain checks;
// reserve-kill adds, from its own steps, callers that RESERVE an estimate
// of keys owned by the node it kills, hold each reservation open for a
// while and then SETTLE it at a real cost no higher than the estimate (or
// RELEASE it), retrying a settle that failed through another node. The
// last step checks those keys with the checker's own rules (Analyze):
// each admitted reservation is charged its real cost over its RESERVE's
// [invoke, complete] interval, and the bound is limit × deciders, the
// phases from the reservation steps' own membership samples.
//
// Why in steps: the Workload and the History know one kind of operation,
// a check that admits one hit; a reservation admits its estimate and
// counts its cost, later. The steps run their own callers and monitor,
// and a violation fails the check step, which the report lists among the
// scenario's errors.

// reserveScenarios are the scenarios of reservations.
func reserveScenarios() []Scenario {
	rk := &reserveKill{}
	return []Scenario{{
		Name: "reserve-kill", About: "RESERVE then SETTLE on n2's keys, and kill -9 n2 for good while reservations are open: " +
			"their settles go to the heirs, which apply them from the tokens",
		// The crash's promise, for the profile's keys.
		Nodes: 3, Duration: 25 * time.Second, MaxWorst: 1.5,
		Steps: []Step{
			// Not at 0: the run's own start must converge first, before
			// its next step begins.
			{At: time.Second, Name: "open reservations on n2's keys", Steady: 1, Do: rk.begin},
			{At: 10 * time.Second, Name: "kill -9 n2, reservations open", Steady: 1, Fault: true, Do: rk.kill},
			{At: 22 * time.Second, Name: "check the reservations", Steady: 1, Do: rk.check},
		},
	}}
}

// Reservation workload settings: the profile's limits (full and short
// differ only in time), estimates of 1 to 3 hits held open 50 to 500 ms,
// at the profile's load.
const (
	resvKeysPerAlgorithm = 2
	resvWorkers          = 8
	resvMaxEstimate      = 3
	resvTTL              = 3 * time.Second
	resvSettleAttempts   = 3
)

// resvOp is one reservation as its caller saw it.
type resvOp struct {
	key              int
	node, owner      string
	invoke, complete time.Duration
	outcome          Outcome
	degraded         bool
	estimate, cost   int64
	// settled is the settle's answer (SETTLED_NOW, …), or how its last
	// attempt failed; attempts counts them.
	settled  string
	attempts int
}

// reserveKill is the state of one run of reserve-kill, from its first
// step to its last.
type reserveKill struct {
	p       Profile
	keys    []KeySpec
	cancel  context.CancelFunc
	callers sync.WaitGroup // workers and their settles
	mon     *Monitor
	monDone chan struct{}
	events  []Event

	mu  sync.Mutex
	ops []resvOp
}

// begin picks the keys n2 owns, and starts the callers and a membership
// monitor of its own.
func (rk *reserveKill) begin(ctx context.Context, e *Env) error {
	rk.p, rk.ops, rk.cancel = FullProfile(), nil, nil // a scenario may run again
	keys, err := ownedKeys(ctx, e, e.ID(1), rk.p)
	if err != nil {
		return err
	}
	rk.keys = keys
	expect, sides := e.expectation(e.observable())
	rk.events = []Event{{Name: "start", Steady: 1, Expect: expect, Sides: sides}}
	runCtx, cancel := context.WithCancel(ctx)
	rk.cancel = cancel
	rk.mon = &Monitor{Interval: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, Nodes: func() []string { return e.ids }}
	rk.monDone = make(chan struct{})
	go func() { defer close(rk.monDone); rk.mon.Run(runCtx, e.clients, e.start) }()
	// Reservations per second, all keys: the profile's load in hits, at
	// the mean estimate.
	rate := rk.p.Load * float64(rk.p.Limit) * float64(len(keys)) / rk.p.Window.Seconds() / ((1 + resvMaxEstimate) / 2.0)
	interval := time.Duration(float64(time.Second) * resvWorkers / rate)
	for i := range resvWorkers {
		r := rand.New(rand.NewPCG(uint64(e.start.UnixNano()), uint64(i)))
		rk.callers.Go(func() { rk.worker(runCtx, e, interval, r) })
	}
	return nil
}

// ownedKeys returns resvKeysPerAlgorithm keys of each algorithm that
// owner owns, asking another node with peeks.
func ownedKeys(ctx context.Context, e *Env, owner string, p Profile) ([]KeySpec, error) {
	cl := e.clients.client(e.ID(0))
	var keys []KeySpec
	for _, alg := range []pb.Algorithm{pb.Algorithm_SLIDING_WINDOW_COUNTER, pb.Algorithm_SLIDING_WINDOW_LOG} {
		found := 0
		for i := 0; found < resvKeysPerAlgorithm && i < 1000; i++ {
			ks := KeySpec{Name: fmt.Sprintf("jepsen:reserve-kill:resv:%s:%d", algName(alg), i), Algorithm: alg, Limit: p.Limit, Window: p.Window}
			zero := int64(0)
			cctx, cancel := context.WithTimeout(ctx, p.ClientTimeout)
			resp, err := cl.Check(cctx, &pb.CheckRequest{Key: ks.Name, Limit: ks.Limit, WindowMs: ks.Window.Milliseconds(), Algorithm: alg, Hits: &zero})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("finding %s's keys: %w", owner, err)
			}
			if resp.GetOwner() == owner {
				keys = append(keys, ks)
				found++
			}
		}
		if found < resvKeysPerAlgorithm {
			return nil, fmt.Errorf("no %d %s keys of %s's among 1000", resvKeysPerAlgorithm, algName(alg), owner)
		}
	}
	return keys, nil
}

// worker reserves a random key through a random node every interval
// until ctx ends; each admitted reservation is settled on its own
// goroutine, after a hold.
func (rk *reserveKill) worker(ctx context.Context, e *Env, interval time.Duration, r *rand.Rand) {
	next := time.Now().Add(time.Duration(r.Int64N(int64(interval))))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if node, cl := e.clients.pick(r); cl != nil {
			rk.reserve(ctx, e, cl, node, r)
		}
		next = next.Add(interval)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		t.Reset(time.Until(next))
	}
}

// reserve makes one reservation and, if admitted, settles it later.
func (rk *reserveKill) reserve(ctx context.Context, e *Env, cl pb.RateLimiterClient, node string, r *rand.Rand) {
	k := r.IntN(len(rk.keys))
	ks := rk.keys[k]
	op := resvOp{key: k, node: node, invoke: e.now(), estimate: 1 + r.Int64N(resvMaxEstimate)}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rk.p.ClientTimeout)
	resp, err := cl.Check(cctx, &pb.CheckRequest{Key: ks.Name, Limit: ks.Limit, WindowMs: ks.Window.Milliseconds(), Algorithm: ks.Algorithm,
		Hits: &op.estimate, Op: pb.Op_RESERVE, TtlMs: resvTTL.Milliseconds()})
	cancel()
	op.complete = e.now()
	op.outcome = outcomeOf(err)
	if err == nil {
		op.owner, op.degraded = resp.GetOwner(), resp.GetDegraded()
		if resp.GetAllowed() {
			op.outcome = Allowed
		}
	}
	if op.outcome != Allowed || resp.GetReservation() == "" {
		rk.record(op)
		return
	}
	settle := &pb.CheckRequest{Key: ks.Name, Limit: ks.Limit, WindowMs: ks.Window.Milliseconds(), Algorithm: ks.Algorithm,
		Op: pb.Op_SETTLE, Reservation: resp.GetReservation()}
	if op.cost = r.Int64N(op.estimate + 1); r.IntN(5) == 0 {
		settle.Op, op.cost = pb.Op_RELEASE, 0
	}
	settle.Hits = &op.cost
	hold := 50*time.Millisecond + time.Duration(r.Int64N(int64(450*time.Millisecond)))
	seed := r.Uint64()
	rk.callers.Go(func() {
		time.Sleep(hold) // the work the reservation pays for; settled even once the run ends
		op.settled, op.attempts = rk.settle(ctx, e, settle, rand.New(rand.NewPCG(seed, 0)))
		rk.record(op)
	})
}

// settle closes a reservation through random nodes, retrying a failed or
// timed-out attempt through another node, as a client would, and returns
// its last answer.
func (rk *reserveKill) settle(ctx context.Context, e *Env, req *pb.CheckRequest, r *rand.Rand) (string, int) {
	var last string
	failed := map[string]bool{}
	for a := 1; a <= resvSettleAttempts; a++ {
		node, cl := e.clients.pick(r)
		for i := 0; i < 8 && failed[node]; i++ {
			node, cl = e.clients.pick(r)
		}
		if cl == nil {
			return "no node to settle through", a
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rk.p.ClientTimeout)
		resp, err := cl.Check(cctx, req)
		cancel()
		if err == nil {
			return resp.GetSettled().String(), a
		}
		failed[node] = true
		last = string(outcomeOf(err)) + ": " + err.Error()
		time.Sleep(100 * time.Millisecond)
	}
	return last, resvSettleAttempts
}

// outcomeOf is how a call that returned err ended, as workload.do says.
func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return Denied
	case status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return Timeout
	}
	return Failed
}

func (rk *reserveKill) record(op resvOp) {
	rk.mu.Lock()
	rk.ops = append(rk.ops, op)
	rk.mu.Unlock()
}

// kill kills n2 and records the step as the run's own does, for the
// reservations' phases.
func (rk *reserveKill) kill(ctx context.Context, e *Env) error {
	ev := Event{Name: "kill -9 n2", Begin: e.now(), Steady: 1, Fault: true}
	err := e.Kill(ctx, e.ID(1))
	ev.End = e.now()
	ev.Expect, ev.Sides = e.expectation(e.observable())
	if err != nil {
		ev.Err = err.Error()
	}
	rk.events = append(rk.events, ev)
	return err
}

// check stops the callers, waits for every settle, and holds the
// reservations' keys to the checker's bounds: an error names each
// violation.
func (rk *reserveKill) check(_ context.Context, e *Env) error {
	if rk.cancel == nil {
		return errors.New("the reservations never started")
	}
	rk.cancel()
	rk.callers.Wait()
	<-rk.monDone
	res := Analyze(rk.history(e))
	e.log.Info("reservations", "summary", rk.summary(), "log_worst", res.Log.Worst, "counter_fixed_worst", res.CounterFixed.Worst,
		"counter_rolling_worst", res.CounterSliding.Worst, "windows", res.Log.Windows+res.CounterFixed.Windows)
	var errs []error
	if res.Log.Windows == 0 || res.CounterFixed.Windows == 0 {
		errs = append(errs, fmt.Errorf("reservations: nothing to check (%s)", rk.summary()))
	}
	for _, v := range res.Violations() {
		errs = append(errs, fmt.Errorf("reservations: over-admission beyond the bound: %s", v))
	}
	return errors.Join(errs...)
}

// history is the reservations as the checker reads checks: each admitted
// reservation is its cost in allowed checks over its RESERVE's interval,
// decided where the RESERVE was (owner, degraded).
func (rk *reserveKill) history(e *Env) History {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	var ops []Op
	for _, o := range rk.ops {
		if o.outcome != Allowed {
			continue
		}
		for range o.cost {
			ops = append(ops, Op{Key: o.key, Node: o.node, Invoke: o.invoke, Complete: o.complete, Outcome: Allowed, Owner: o.owner, Degraded: o.degraded})
		}
	}
	return History{Scenario: "reserve-kill (reservations)", Start: e.start, End: e.now(), Nodes: e.ids, Keys: rk.keys,
		Ops: ops, Views: rk.mon.Views(), Events: rk.events}
}

// summary counts the reservations by outcome and their settles by answer.
func (rk *reserveKill) summary() string {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	outcomes, settles := map[Outcome]int{}, map[string]int{}
	retried, failed := 0, ""
	for _, o := range rk.ops {
		outcomes[o.outcome]++
		if o.outcome == Allowed {
			settles[strings.SplitN(o.settled, ":", 2)[0]]++
		}
		if o.outcome == Allowed && strings.Contains(o.settled, ":") {
			failed = o.settled
		}
		if o.attempts > 1 {
			retried++
		}
	}
	out := fmt.Sprintf("reservations %v; settles %v, %d retried", outcomes, settles, retried)
	if failed != "" {
		out += "; a settle that failed every attempt: " + failed
	}
	return out
}
