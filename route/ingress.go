package route

import (
	"context"
	"fmt"
	"sync"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Ingress is the request path as the faces call it: checks, one at a time,
// in batches and all or nothing, resets, policies. Safe for concurrent
// use.
type Ingress struct {
	*core
	chain chain // what a check whose owner is another member goes through
}

// BatchTooLarge returns why a batch of n items of what ("checks",
// "descriptors") is refused, wrapping ErrBatchTooLarge, or nil if it is
// within Config.MaxBatch. Every face asks it before converting a batch's
// items, and CheckBatch once more: the one place the bound is checked.
func (in *Ingress) BatchTooLarge(what string, n int) error {
	if n <= in.cfg.MaxBatch {
		return nil
	}
	return fmt.Errorf("%s: %d items; the maximum is %d: %w", what, n, in.cfg.MaxBatch, ErrBatchTooLarge)
}

// Store is the node's limiter state.
func (in *Ingress) Store() *limiter.Store { return in.store }

// InflightForwards returns how many forwarded checks wait for their
// owners' answers now.
func (in *Ingress) InflightForwards() int { return in.inflight.inUse() }

// Check answers one request: decided here if this node owns the key, once
// its partition has settled; else taken to its owner through the chain
// (chain.go).
func (in *Ingress) Check(ctx context.Context, req limiter.Request) peer.Result {
	owner, local, _ := in.settledOwner(ctx, req.Key)
	res := routed{route: routeLocal}
	if local {
		res.Result = in.decide(in.deps.Now(), req) // the store validates
		res.Via = peer.ViaHere
	} else {
		res = in.chain.toOwner(ctx, owner, req)
	}
	in.metrics.check(req.Algorithm, res.route, res.Result)
	return res.Result
}

// CheckBatch answers every request, each on its own and in order. Checks
// this node owns are decided together, stamped with one arrival time; the
// others go to their owners, one call per owner, all at once. The error is
// for the batch as a whole (too large); per-item failures are in the
// results.
func (in *Ingress) CheckBatch(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error) {
	if err := in.BatchTooLarge("checks", len(reqs)); err != nil {
		return nil, err
	}
	in.metrics.checkBatch(len(reqs))
	if len(reqs) == 1 {
		// One check (an Envoy descriptor, say): as Check, which may ask
		// its owner for a budget lease.
		return []peer.Result{in.Check(ctx, reqs[0])}, nil
	}
	out := make([]peer.Result, len(reqs))
	remote := in.decideOwn(ctx, reqs, out)
	var wg sync.WaitGroup
	n := 0
	for owner, idx := range remote {
		n++
		idx = in.chain.reserveSlots(ctx, owner, reqs, idx, out)
		switch {
		case len(idx) == 0:
		case n == len(remote):
			// The last owner's call goes out on this goroutine, whose
			// stack is already grown (as in internal/batch and the client).
			in.chain.forwardBatch(ctx, owner, reqs, idx, out)
		default:
			wg.Go(func() { in.chain.forwardBatch(ctx, owner, reqs, idx, out) })
		}
	}
	wg.Wait()
	return out, nil
}

// decideOwn decides the checks of reqs this node owns into out, refuses
// the invalid ones bound elsewhere, admits those a lease it holds covers,
// and returns the others' indexes by owner.
func (in *Ingress) decideOwn(ctx context.Context, reqs []limiter.Request, out []peer.Result) map[peer.Route][]int {
	var remote map[peer.Route][]int // made at the first remote check: a batch to its owner has none
	now := in.deps.Now()
	for i, r := range reqs {
		owner, local, waited := in.settledOwner(ctx, r.Key) // once settled, the others return at once
		if waited {
			now = in.deps.Now() // decided when it may be, not when the batch came: the wait can be SettleWait long
		}
		if local {
			out[i] = in.decide(now, r) // the store validates
			out[i].Via = peer.ViaHere
			in.metrics.check(r.Algorithm, routeLocal, out[i])
			continue
		}
		if err := in.store.Validate(r); err != nil {
			out[i] = peer.Result{Err: err}
			in.metrics.check(r.Algorithm, routeForwarded, out[i])
			continue
		}
		if r.Op == limiter.OpCheck {
			if d, ok := in.deps.Leases.Admit(now, r); ok {
				out[i] = peer.Result{Decision: d, Owner: owner.ID, Via: peer.ViaLease}
				in.metrics.check(r.Algorithm, routeLeased, out[i])
				continue
			}
		}
		if remote == nil {
			remote = map[peer.Route][]int{}
		}
		remote[owner] = append(remote[owner], i)
	}
	return remote
}

// routed is a result and the route that answered it.
type routed struct {
	peer.Result
	route int
}
