package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	jepsenlite "github.com/peerlimit/peerlimit/jepsen-lite"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// The workload: closed-loop workers, each pacing itself to its share of
// the plan's rate, each operation one of: a check of one key at a member
// up (most), a batch of keys (route.Ingress.CheckBatch), an
// all-or-nothing batch (CheckAll), or a reservation settled a little
// later, perhaps through another member. What each admitted is recorded
// as jepsen-lite's checker reads it: one operation per hit, over the
// interval of the call that admitted it (for a reservation, its real
// cost over its RESERVE's interval: a lower bound of what it counted,
// so that a violation found is certain).
//
// A concurrency key takes only ACQUIRE, RELEASE and a peek, so its
// operation is always a single one: an ACQUIRE, whose slot, once
// acquired, is held and released as jepsen-lite's workload does it
// (jepsen-lite/workload.go): held 50–500 ms, then released through a
// member up, a failed release retried through another; one in twenty
// never released. Each acquire and each release attempt is recorded
// (Op.Kind, Op.Slot), so the checker holds each slot from its acquire's
// answer until its first release was sent (jepsen-lite/concurrency.go).

// clientTimeout is the workload's deadline per call, as jepsen-lite's.
const clientTimeout = 2 * time.Second

// maxReservation is the most hits a reservation reserves.
const maxReservation = 3

// keys returns the plan's keys: KeysPerAlgorithm of each window
// algorithm (c0, l0, c1, l1, …; the hot one is HotKey, of HotLimit if
// set), then the GCRA and concurrency keys. A concurrency key weighs what
// makes its demand about Load × its slots, as a window key's is about
// Load × its limit (slotWeight).
func (p Plan) keys() []jepsenlite.KeySpec {
	var out []jepsenlite.KeySpec
	for i := range p.KeysPerAlgorithm {
		out = append(out,
			jepsenlite.KeySpec{Name: fmt.Sprint("c", i), Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER, Limit: p.Limit, Window: p.Window},
			jepsenlite.KeySpec{Name: fmt.Sprint("l", i), Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Limit: p.Limit, Window: p.Window})
	}
	if p.HotLimit > 0 {
		out[p.HotKey].Limit = p.HotLimit
	}
	for i := range p.GCRAKeys {
		out = append(out, jepsenlite.KeySpec{Name: fmt.Sprint("g", i), Algorithm: pb.Algorithm_GCRA, Limit: p.GCRALimit, Window: p.Window, Burst: p.GCRABurst})
	}
	for i := range p.SlotKeys {
		out = append(out, jepsenlite.KeySpec{Name: fmt.Sprint("s", i), Algorithm: pb.Algorithm_CONCURRENCY, Limit: p.Slots, Window: p.SlotWindow, Weight: p.slotWeight()})
	}
	return out
}

// slotWeight is a concurrency key's weight: a key of weight 1 is offered
// about Load × Limit per Window, and a slot is held for meanHold on
// average, so a weight of Slots ÷ (Limit per Window × meanHold) makes
// about Load × Slots of them wanted at once.
func (p Plan) slotWeight() int {
	const every = jepsenlite.AbandonEvery
	meanHold := (jepsenlite.HoldMin+jepsenlite.HoldMax)/2*(every-1)/every + p.SlotWindow/every
	perSecond := float64(p.Limit) / p.Window.Seconds()
	return max(1, int(math.Ceil(float64(p.Slots)/(perSecond*meanHold.Seconds()))))
}

// weights is how many shares of the workload's draws the keys take in
// all: each key its weight (a window or GCRA key 1).
func (p Plan) weights() int {
	n := 0
	for _, ks := range p.keys() {
		n += max(ks.Weight, 1)
	}
	return n
}

// offered is the workload's rate, operations per second: Load × the
// window keys' rate for each share of the draws (weights).
func (p Plan) offered() float64 {
	return p.Load * float64(p.Limit) * float64(p.weights()) / p.Window.Seconds()
}

// hotShareOfChecks is about what share of the single checks go to the
// hot key: HotShare of them, and its share of the others.
func (p Plan) hotShareOfChecks() float64 {
	return p.HotShare + (1-p.HotShare)/float64(p.weights())
}

// workload runs the workers until ctx ends, and returns what they did.
type workload struct {
	w    *World
	keys []jepsenlite.KeySpec
	// every lists each key's index as often as its weight; batchable the
	// same without the concurrency keys, which a batch, an all-or-nothing
	// batch or a reservation may not hold.
	every, batchable []int
	slots            atomic.Int64 // the acquires' Op.Slot

	mu  sync.Mutex
	ops []jepsenlite.Op
}

func newWorkload(w *World, keys []jepsenlite.KeySpec) *workload {
	wl := &workload{w: w, keys: keys}
	for k, ks := range keys {
		for range max(ks.Weight, 1) {
			wl.every = append(wl.every, k)
			if !ks.IsConcurrency() {
				wl.batchable = append(wl.batchable, k)
			}
		}
	}
	return wl
}

func (wl *workload) run(ctx context.Context) {
	p := wl.w.plan
	interval := time.Duration(float64(time.Second) * float64(p.Workers) / p.offered())
	var wg sync.WaitGroup
	for i := range p.Workers {
		wg.Go(func() { wl.worker(ctx, i, interval) })
	}
	wg.Wait()
}

// opStream is the stream of the seed's generator (PCG's second word)
// that worker's k-th operation draws from (k 0: when the worker starts).
// Each operation has its own, so that what it draws does not depend on
// what the ones before it drew, which depends on their answers (an
// admitted reservation draws its settle, a denied one does not). The
// high word keeps them apart from the plan's streams (NewPlan).
func opStream(worker, k int) uint64 { return 0x0b<<56 | uint64(worker)<<32 | uint64(uint32(k)) }

// worker does one operation every interval after the one before ended
// (a closed loop, as a client's), each drawn from its own stream of the
// seed (opStream), until ctx ends.
func (wl *workload) worker(ctx context.Context, id int, interval time.Duration) {
	seed := wl.w.plan.Seed
	first := rand.New(rand.NewPCG(seed, opStream(id, 0)))
	t := time.NewTimer(time.Duration(first.Int64N(int64(interval))))
	defer t.Stop()
	var pending sync.WaitGroup // reservations' settles, slots' releases
	defer pending.Wait()
	for k := 1; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wl.one(ctx, id, rand.New(rand.NewPCG(seed, opStream(id, k))), &pending)
		t.Reset(interval)
	}
}

// one does one operation, drawn by r.
func (wl *workload) one(ctx context.Context, worker int, r *rand.Rand, pending *sync.WaitGroup) {
	p := wl.w.plan
	m := wl.w.target(r.IntN)
	if m == nil {
		return
	}
	switch x := r.Float64(); {
	case x < p.BatchShare:
		wl.batch(ctx, worker, m, wl.draw(r, 2+r.IntN(3), wl.batchable), false)
	case x < p.BatchShare+p.AllShare:
		wl.batch(ctx, worker, m, wl.draw(r, 2, wl.batchable), true)
	case x < p.BatchShare+p.AllShare+p.ReserveShare:
		wl.reserve(ctx, worker, m, wl.draw(r, 1, wl.batchable)[0], r, pending)
	default:
		if k := wl.draw(r, 1, wl.every)[0]; wl.keys[k].IsConcurrency() {
			wl.acquire(ctx, worker, m, k, r, pending)
		} else {
			wl.batch(ctx, worker, m, []int{k}, false)
		}
	}
}

// draw picks n distinct keys of from (each key's index as often as its
// weight), the hot one (Plan.HotKey) with the plan's share.
func (wl *workload) draw(r *rand.Rand, n int, from []int) []int {
	var out []int
	for len(out) < n {
		k := from[r.IntN(len(from))]
		if r.Float64() < wl.w.plan.HotShare {
			k = wl.w.plan.HotKey
		}
		if !containsInt(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (wl *workload) request(k int, hits int64) limiter.Request {
	ks := wl.keys[k]
	return limiter.Request{Key: ks.Name, Limit: ks.Limit, Window: ks.Window, Algorithm: limiter.Algorithm(ks.Algorithm), Burst: ks.Burst, Hits: hits}
}

// call sends req to m as a client would, within clientTimeout; a call to
// a paused member waits for it to resume.
func (wl *workload) call(ctx context.Context, m *member, req limiter.Request) peer.Result {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clientTimeout)
	defer cancel()
	if !wl.w.awaitResumed(cctx, m.id) {
		return peer.Result{Err: cctx.Err()}
	}
	return m.core.Service().Check(cctx, req)
}

// batch checks keys at m: one at a time (Check), together (CheckBatch),
// or all or nothing (CheckAll).
func (wl *workload) batch(ctx context.Context, worker int, m *member, keys []int, all bool) {
	reqs := make([]limiter.Request, len(keys))
	for i, k := range keys {
		reqs[i] = wl.request(k, 1)
	}
	invoke := wl.w.now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clientTimeout)
	var results []peer.Result
	var err error
	switch {
	case !wl.w.awaitResumed(cctx, m.id):
		err = cctx.Err()
	case all:
		results, err = m.core.Service().CheckAll(cctx, reqs)
	case len(reqs) == 1:
		results = []peer.Result{m.core.Service().Check(cctx, reqs[0])}
	default:
		results, err = m.core.Service().CheckBatch(cctx, reqs)
	}
	cancel()
	complete := wl.w.now()
	for i, k := range keys {
		op := jepsenlite.Op{Worker: worker, Key: k, Node: m.id, Invoke: invoke, Complete: complete}
		switch {
		case err == nil:
			outcome(&op, results[i])
		case errors.Is(err, context.DeadlineExceeded):
			op.Outcome, op.Err = jepsenlite.Timeout, err.Error()
		default:
			op.Outcome, op.Err = jepsenlite.Failed, err.Error()
		}
		wl.record(op)
	}
}

// outcome fills op from a result.
func outcome(op *jepsenlite.Op, res peer.Result) {
	switch {
	case res.Err == nil:
		op.Outcome, op.Owner, op.Degraded, op.Via = jepsenlite.Denied, res.Owner, res.Degraded, res.Via.String()
		if res.Decision.Allowed {
			op.Outcome = jepsenlite.Allowed
		}
	case errors.Is(res.Err, context.DeadlineExceeded):
		op.Outcome, op.Err = jepsenlite.Timeout, res.Err.Error()
	default:
		op.Outcome, op.Err = jepsenlite.Failed, res.Err.Error()
	}
}

// reserve reserves an estimate of key k's hits at m; once admitted, a
// little later, it settles at a cost no higher through a member up
// (retrying through another on failure), and records the cost.
func (wl *workload) reserve(ctx context.Context, worker int, m *member, k int, r *rand.Rand, pending *sync.WaitGroup) {
	estimate := int64(1 + r.IntN(maxReservation))
	req := wl.request(k, estimate)
	req.Op = limiter.OpReserve
	invoke := wl.w.now()
	res := wl.call(ctx, m, req)
	op := jepsenlite.Op{Worker: worker, Key: k, Node: m.id, Invoke: invoke, Complete: wl.w.now()}
	outcome(&op, res)
	if op.Outcome != jepsenlite.Allowed || res.Decision.Adjust == nil {
		wl.record(op)
		return
	}
	cost := 1 + r.Int64N(estimate)
	hold := time.Duration(50+r.IntN(450)) * time.Millisecond
	token, seed := res.Decision.Adjust.Reservation, r.Uint64()
	pending.Go(func() {
		time.Sleep(hold)
		wl.settle(k, token, cost, seed)
	})
	for range cost {
		wl.record(op)
	}
}

// settle settles a reservation at cost through members up, three tries.
func (wl *workload) settle(k int, token string, cost int64, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	req := wl.request(k, cost)
	req.Op, req.Reservation = limiter.OpSettle, token
	for range 3 {
		m := wl.w.target(r.IntN)
		if m == nil {
			return
		}
		if res := wl.call(context.Background(), m, req); res.Err == nil {
			return
		}
	}
}

// acquire takes a slot of concurrency key k at m and records it; an
// acquired slot is held and released (release) on a goroutine pending
// waits for, except one in jepsenlite.AbandonEvery, never released, which frees
// itself at its key's window.
func (wl *workload) acquire(ctx context.Context, worker int, m *member, k int, r *rand.Rand, pending *sync.WaitGroup) {
	req := wl.request(k, 1)
	req.Op = limiter.OpAcquire
	op := jepsenlite.Op{Worker: worker, Key: k, Node: m.id, Kind: jepsenlite.AcquireOp, Slot: int(wl.slots.Add(1)), Invoke: wl.w.now()}
	res := wl.call(ctx, m, req)
	op.Complete = wl.w.now()
	outcome(&op, res)
	wl.record(op)
	if op.Outcome != jepsenlite.Allowed || res.Decision.Adjust == nil || res.Decision.Adjust.Reservation == "" {
		return
	}
	hold, held := jepsenlite.DrawHold(r)
	if !held {
		return
	}
	token, seed := res.Decision.Adjust.Reservation, r.Uint64()
	pending.Go(func() { wl.release(ctx, op, token, hold, seed) })
}

// release holds acq's slot for hold, then releases it through members
// up, as jepsen-lite's workload does (jepsenlite.HoldThenRelease; each
// attempt recorded: the first one sent ends the slot's certain hold).
func (wl *workload) release(ctx context.Context, acq jepsenlite.Op, token string, hold time.Duration, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 2))
	req := wl.request(acq.Key, 0)
	req.Op, req.Reservation = limiter.OpRelease, token
	jepsenlite.HoldThenRelease(ctx, hold, func() (string, func() bool) {
		m := wl.w.target(r.IntN)
		if m == nil {
			return "", nil
		}
		return m.id, func() bool {
			op := jepsenlite.Op{Worker: acq.Worker, Key: acq.Key, Node: m.id, Kind: jepsenlite.ReleaseOp, Slot: acq.Slot, Invoke: wl.w.now()}
			res := wl.call(ctx, m, req)
			op.Complete = wl.w.now()
			outcome(&op, res)
			wl.record(op)
			return op.Answered()
		}
	})
}

func (wl *workload) record(op jepsenlite.Op) {
	wl.mu.Lock()
	wl.ops = append(wl.ops, op)
	wl.mu.Unlock()
}
