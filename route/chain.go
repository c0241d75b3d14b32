package route

import (
	"context"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// The chain a check goes through when another member owns its key. Each
// step answers the check, or passes it on to the next:
//
//  1. lease: a budget lease this node holds on the key admits it
//     (answers); or the key is hot here, and the forward asks the owner to
//     lend this node hits for later checks (passes);
//  2. forward: the owner decides it (answers); the check is invalid, or
//     over the in-flight bound (answers, refused); the owner cannot be
//     asked, or hands it back undecided (passes, with the cause);
//  3. relay: one other member takes it to the owner, or decides it from
//     the owner's replica as its heir (answers: exact, or degraded); it
//     cannot (passes). This heals a link cut between this node and the
//     owner only (a bridge), which gossip's indirect probes hide;
//  4. heir: this node, the key's heir, decides it from the owner's
//     replica merged into its own state (answers, degraded); it is not
//     the heir (passes);
//  5. fallback: the policy answers (degraded), unless the caller gave up.
//
// Relay and heir need replication (Deps.Failover): without it no member
// is a key's heir, and the policy answers at once. A batch goes through
// the same steps, its checks grouped by owner and by relay
// (forwardBatch, unreachableBatch).
type chain struct{ *core }

// toOwner answers req, whose owner is another member, by the steps above.
func (c chain) toOwner(ctx context.Context, owner peer.Route, req limiter.Request) routed {
	lease := c.lease(owner, req) // 1
	if lease.admitted {
		return routed{peer.Result{Decision: lease.d, Owner: owner.ID, Via: peer.ViaLease}, routeLeased}
	}
	res, cause := c.forward(ctx, owner, req, lease) // 2
	if cause == nil {
		return res
	}
	return c.unreachable(ctx, owner, req, cause) // 3, 4, 5
}

// leaseStep is what step 1 found: admitted from a lease this node holds
// (d), or a lease to ask the owner for with the forward (want, from
// asked), or neither (no hits wanted).
type leaseStep struct {
	admitted bool
	d        limiter.Decision
	want     peer.LeaseWant
	asked    time.Time
}

// lease is step 1. Only a check is lent for: every other op is its
// owner's.
func (c chain) lease(owner peer.Route, req limiter.Request) leaseStep {
	if req.Op != limiter.OpCheck {
		return leaseStep{}
	}
	now := c.deps.Now()
	d, admitted, want, ask := c.deps.Leases.Take(now, req, true)
	switch {
	case admitted:
		return leaseStep{admitted: true, d: d}
	case !ask:
		return leaseStep{}
	case c.store.Validate(req) != nil: // the forward refuses it, naming the field
		c.deps.Leases.Forgo(owner, req, now)
		return leaseStep{}
	}
	return leaseStep{want: want, asked: now}
}

// forward is step 2: req to its owner, asking for a lease if step 1 said
// so. The answer, or why the owner could not decide req (cause, for the
// next steps).
func (c chain) forward(ctx context.Context, owner peer.Route, req limiter.Request, lease leaseStep) (_ routed, cause error) {
	if lease.want.Hits == 0 {
		if err := c.store.Validate(req); err != nil { // refused where it arrived, not after a hop
			return routed{peer.Result{Err: err}, routeForwarded}, nil
		}
	}
	if c.inflight.acquire(1) == 0 {
		if lease.want.Hits > 0 {
			c.deps.Leases.Forgo(owner, req, lease.asked)
		}
		return routed{c.overloaded(ctx, owner, 1), routeForwarded}, nil
	}
	fctx, span := c.startForward(ctx, owner, 1, lease.want.Hits > 0)
	var res peer.Result
	var id string
	var err error
	if lease.want.Hits > 0 {
		res, err = c.deps.Leases.Ask(fctx, owner, req, lease.want, lease.asked)
	} else {
		res, id, err = c.deps.Peers.Forward(fctx, owner, req)
		if err == nil && peer.NotDecided(res.Err) {
			err = res.Err // the owner took it back, or a batch's call failed
		}
	}
	c.inflight.release(1)
	endForward(span, err, 0)
	if err != nil {
		return routed{}, err
	}
	c.metrics.forwarded(forwardOK, 1)
	c.ownerRefused(ctx, owner, res, id)
	res.Via = peer.ViaForward
	return routed{res, routeForwarded}, nil
}

// unreachable answers req, whose owner could not decide it (cause), by
// steps 3 to 5.
func (c chain) unreachable(ctx context.Context, owner peer.Route, req limiter.Request, cause error) routed {
	out := make([]peer.Result, 1)
	if c.rescue(ctx, owner, []limiter.Request{req}, []int{0}, out)[0] {
		return routed{out[0], routeFallback}
	}
	return c.byPolicy(ctx, owner, req, cause)
}

// rescue is steps 3 and 4 for the checks idx of reqs, whose owner could
// not decide them: through a relay, one call per relay, then as their
// heir. It fills in out for those it answered and returns them.
func (c chain) rescue(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result) map[int]bool {
	if callerGone(ctx) != nil {
		return nil
	}
	answered := c.relayed(ctx, owner, reqs, idx, out) // 3
	now := c.deps.Now()
	for _, i := range idx { // 4
		if !answered[i] {
			if res, ok := c.asHeir(now, reqs[i]); ok {
				out[i], answered[i] = res, true
				out[i].Via = peer.ViaHeir
			}
		}
	}
	for i := range answered {
		c.metrics.forwarded(forwardFailed, 1)
		c.metrics.rescued(out[i].Degraded)
	}
	return answered
}

// relayed is step 3: the checks idx of reqs go to their relays, one call
// per relay; it fills in out for those a relay answered, and returns them.
func (c chain) relayed(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result) map[int]bool {
	byRelay := map[peer.Route][]int{}
	for _, i := range idx {
		if via, ok := c.relayFor(reqs[i].Key, owner); ok {
			byRelay[via] = append(byRelay[via], i)
		}
	}
	answered := map[int]bool{}
	for via, vidx := range byRelay {
		results := c.relay(ctx, via, reqs, vidx)
		for j, i := range vidx {
			if results != nil && results[j].Err == nil {
				out[i], answered[i] = results[j], true
				out[i].Via = peer.ViaRelay
			}
		}
	}
	return answered
}

// relayFor returns the member that relays key's checks to owner: the
// key's heir, or, when the heir is this node, the first other live member
// that is not the owner. false: there is none (a ring of two, or
// replication off).
func (c chain) relayFor(key string, owner peer.Route) (peer.Route, bool) {
	h, ok := c.heirOf(key)
	if !ok || h.ID == owner.ID {
		return peer.Route{}, false
	}
	if h.ID != c.deps.NodeID {
		return h, true
	}
	for _, m := range c.deps.Cluster.Members() {
		if m.ID != c.deps.NodeID && m.ID != owner.ID {
			return m, true
		}
	}
	return peer.Route{}, false
}

// relay has via take the checks idx of reqs to their owner in one call,
// and returns their results in order; nil if via could not be asked.
func (c chain) relay(ctx context.Context, via peer.Route, reqs []limiter.Request, idx []int) []peer.Result {
	got := c.inflight.acquire(len(idx))
	defer c.inflight.release(got)
	if got < len(idx) {
		return nil
	}
	sub := pick(reqs, idx)
	results, err := c.deps.Peers.Relay(ctx, via, sub)
	if err != nil || len(results) != len(sub) {
		return nil
	}
	return results
}

// byPolicy is step 5: req, whose owner could not be reached, answered by
// the fallback policy.
func (c chain) byPolicy(ctx context.Context, owner peer.Route, req limiter.Request, cause error) routed {
	if err := callerGone(ctx); err != nil {
		return routed{peer.Result{Err: err}, routeForwarded}
	}
	c.metrics.forwarded(forwardFailed, 1)
	c.metrics.unreachable(c.cfg.Fallback)
	if c.unreachableLog.Allow() {
		c.log.Warn("owner unreachable; answering by fallback policy", append([]any{"owner", owner.ID, "addr", owner.Addr,
			"policy", c.cfg.Fallback.String(), "err", cause}, peer.LogAttrs(ctx, peer.CallID(cause))...)...)
	}
	var res peer.Result
	switch {
	case c.cfg.Fallback == FallbackShare && req.Op.Admits():
		// Checks, reservations and holds alike get this node's share
		// of the limit: a side of a partition keeps to its share
		// whatever it is asked.
		_, known := c.share()
		res = c.decideShare(c.deps.Now(), req, 1, known)
	case c.cfg.Fallback == FallbackDeny && req.Op.Admits():
		// Fail closed means every admission: reservations and holds too.
		res = peer.Result{Decision: limiter.Decision{Allowed: false, Limit: req.Limit, RetryAfter: time.Second}, Owner: c.deps.NodeID}
	case req.Op != limiter.OpCheck:
		// Refunds, charges and settles change what was counted: whatever the
		// policy, this node applies them to its own store, whose state
		// goes to the owner when it is back (FallbackLocal's rule), so
		// a charge is not lost and a refund never exceeds what was
		// counted here.
		res = c.decide(c.deps.Now(), req)
	case c.cfg.Fallback == FallbackAllow:
		res = peer.Result{Decision: limiter.Decision{Allowed: true, Limit: req.Limit, Remaining: max(req.Limit-req.Hits, 0)}, Owner: c.deps.NodeID}
	case c.cfg.Fallback == FallbackDeny:
		res = peer.Result{Decision: limiter.Decision{Allowed: false, Limit: req.Limit, RetryAfter: time.Second}, Owner: c.deps.NodeID}
	default:
		res = c.decide(c.deps.Now(), req)
	}
	res.Degraded = res.Err == nil
	res.Via = peer.ViaFallback
	return routed{res, routeFallback}
}

// reserveSlots takes in-flight slots for the checks idx bound to owner
// and returns those that got one. The others are refused, with one error
// and one count for the lot.
func (c chain) reserveSlots(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result) []int {
	got := c.inflight.acquire(len(idx))
	if refused := idx[got:]; len(refused) > 0 {
		r := c.overloaded(ctx, owner, len(refused))
		for _, i := range refused {
			out[i] = r
			c.metrics.check(reqs[i].Algorithm, routeForwarded, r)
		}
	}
	return idx[:got]
}

// forwardBatch is step 2 for the checks idx of reqs, whose in-flight
// slots are held: one call to owner, whose results fill in out; the
// checks it did not decide go on to steps 3 to 5 (unreachableBatch).
func (c chain) forwardBatch(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result) {
	defer c.inflight.release(len(idx))
	sub := pick(reqs, idx)
	fctx, span := c.startForward(ctx, owner, len(idx), false)
	results, id, err := c.deps.Peers.ForwardBatch(fctx, owner, sub)
	if span != nil {
		endForward(span, err, countNotDecided(results))
	}
	if err != nil {
		c.unreachableBatch(ctx, owner, reqs, idx, out, err)
		return
	}
	ok := 0
	for j, i := range idx {
		var r routed
		switch {
		case peer.NotDecided(results[j].Err):
			r = c.unreachable(ctx, owner, reqs[i], results[j].Err)
		default:
			r = routed{results[j], routeForwarded}
			r.Via = peer.ViaForward
			c.ownerRefused(ctx, owner, r.Result, id)
			ok++
		}
		out[i] = r.Result
		c.metrics.check(reqs[i].Algorithm, r.route, r.Result)
	}
	c.metrics.forwarded(forwardOK, ok)
}

// unreachableBatch is steps 3 to 5 for the checks idx of reqs, whose call
// to owner failed with cause.
func (c chain) unreachableBatch(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result, cause error) {
	rescued := c.rescue(ctx, owner, reqs, idx, out)
	for _, i := range idx {
		r := routed{out[i], routeFallback}
		if !rescued[i] {
			r = c.byPolicy(ctx, owner, reqs[i], cause)
			out[i] = r.Result
		}
		c.metrics.check(reqs[i].Algorithm, r.route, r.Result)
	}
}

// overloaded answers a check refused for the in-flight bound: counted,
// and logged at most once a second.
func (c chain) overloaded(ctx context.Context, owner peer.Route, n int) peer.Result {
	err := fmt.Errorf("forward refused: %d checks already wait for their owners' answers on this node, its maximum (--max-inflight-forwards): %w",
		c.cfg.MaxInflightForwards, ErrTooManyForwards)
	c.metrics.forwarded(forwardRefused, n)
	if c.overloadLog.Allow() {
		c.log.Warn("too many forwarded checks in flight; refusing with RESOURCE_EXHAUSTED",
			append([]any{"owner", owner.ID, "max_inflight_forwards", c.cfg.MaxInflightForwards}, peer.LogAttrs(ctx, "")...)...)
	}
	return peer.Result{Err: err}
}

// ownerRefused warns, at most once a second, about a check the owner
// refused as invalid although this node accepted it: the nodes' settings
// (--max-key-bytes, --max-window, --max-log-limit, or their versions)
// differ, and which requests pass depends on the node they reach.
func (c chain) ownerRefused(ctx context.Context, owner peer.Route, res peer.Result, id string) {
	if res.Err == nil || !settingsDiffer(res.Err) || !c.refusedLog.Allow() {
		return
	}
	c.log.Warn("the owner refused a forwarded check this node accepted: the nodes' settings differ",
		append([]any{"owner", owner.ID, "field", peer.FieldOf(res.Err), "err", res.Err}, peer.LogAttrs(ctx, id)...)...)
}

// settingsDiffer reports whether err, an owner's refusal of a check its
// sender accepted, means that the two nodes' settings differ: invalid
// input on a field both check alike. Not a reservation: the owner checks
// it against its own record, which no sender has, so one it refuses
// (forged, rewritten, another key's, already closed) is the client's
// error, and a warning about drift would mislead the operator.
func settingsDiffer(err error) bool {
	return peer.CodeOf(err) == peer.InvalidArgument && peer.FieldOf(err) != "reservation"
}

// countNotDecided returns how many of results the owner did not decide:
// the next steps answer them.
func countNotDecided(results []peer.Result) int {
	n := 0
	for _, r := range results {
		if peer.NotDecided(r.Err) {
			n++
		}
	}
	return n
}

// pick returns the requests idx of reqs, in that order: the part of a
// batch bound to one member.
func pick(reqs []limiter.Request, idx []int) []limiter.Request {
	sub := make([]limiter.Request, len(idx))
	for j, i := range idx {
		sub[j] = reqs[i]
	}
	return sub
}
