package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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

// clientTimeout is the workload's deadline per call, as jepsen-lite's.
const clientTimeout = 2 * time.Second

// keys returns the plan's keys: KeysPerAlgorithm of each algorithm, key
// 0 the hot one.
func (p Plan) keys() []jepsenlite.KeySpec {
	var out []jepsenlite.KeySpec
	for i := range p.KeysPerAlgorithm {
		out = append(out,
			jepsenlite.KeySpec{Name: fmt.Sprint("c", i), Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER, Limit: p.Limit, Window: p.Window},
			jepsenlite.KeySpec{Name: fmt.Sprint("l", i), Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Limit: p.Limit, Window: p.Window})
	}
	return out
}

// workload runs the workers until ctx ends, and returns what they did.
type workload struct {
	w    *World
	keys []jepsenlite.KeySpec

	mu  sync.Mutex
	ops []jepsenlite.Op
}

func (wl *workload) run(ctx context.Context) {
	p := wl.w.plan
	rate := p.Load * float64(p.Limit) * float64(len(wl.keys)) / p.Window.Seconds()
	interval := time.Duration(float64(time.Second) * float64(p.Workers) / rate)
	var wg sync.WaitGroup
	for i := range p.Workers {
		wg.Go(func() { wl.worker(ctx, i, interval, rand.New(rand.NewPCG(p.Seed, uint64(i)+1))) })
	}
	wg.Wait()
}

func (wl *workload) worker(ctx context.Context, id int, interval time.Duration, r *rand.Rand) {
	t := time.NewTimer(time.Duration(r.Int64N(int64(interval))))
	defer t.Stop()
	var pending sync.WaitGroup // reservations' settles
	defer pending.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wl.one(ctx, id, r, &pending)
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
		wl.batch(ctx, worker, m, wl.draw(r, 2+r.IntN(3)), false)
	case x < p.BatchShare+p.AllShare:
		wl.batch(ctx, worker, m, wl.draw(r, 2), true)
	case x < p.BatchShare+p.AllShare+p.ReserveShare:
		wl.reserve(ctx, worker, m, wl.draw(r, 1)[0], r, pending)
	default:
		wl.batch(ctx, worker, m, wl.draw(r, 1), false)
	}
}

// draw picks n distinct keys, the hot one with the plan's share.
func (wl *workload) draw(r *rand.Rand, n int) []int {
	var out []int
	for len(out) < n {
		k := r.IntN(len(wl.keys))
		if r.Float64() < wl.w.plan.HotShare {
			k = 0
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
	return limiter.Request{Key: ks.Name, Limit: ks.Limit, Window: ks.Window, Algorithm: limiter.Algorithm(ks.Algorithm), Hits: hits}
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
	estimate := int64(1 + r.IntN(3))
	req := wl.request(k, estimate)
	req.Op = limiter.OpReserve
	invoke := wl.w.now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clientTimeout)
	res := peer.Result{Err: context.DeadlineExceeded}
	if wl.w.awaitResumed(cctx, m.id) {
		res = m.core.Service().Check(cctx, req)
	}
	cancel()
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
		ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
		res := peer.Result{Err: context.DeadlineExceeded}
		if wl.w.awaitResumed(ctx, m.id) {
			res = m.core.Service().Check(ctx, req)
		}
		cancel()
		if res.Err == nil {
			return
		}
	}
}

func (wl *workload) record(op jepsenlite.Op) {
	wl.mu.Lock()
	wl.ops = append(wl.ops, op)
	wl.mu.Unlock()
}
