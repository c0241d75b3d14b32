// Package route is a node's request path, whatever the transport. A
// Service finds each check's owner and either decides it on this node's
// store, stamped with this node's clock, or forwards it to the owner
// through Peers; when the owner cannot be asked, the fallback policy
// answers. A key this node forwards at a high rate is admitted from a
// budget lease its owner lends (lease.go), exactly. It also resolves
// named policies, resets keys cluster-wide, answers the console's
// questions (console.go), and handles the calls other members make
// (Handler).
//
// The gRPC API (package rpc), the HTTP API (httpapi) and Envoy's rate
// limit service (envoyrls) are faces of one Service; rpc.Peers carries its
// calls to other members over gRPC, internal/testkit/memnet over an
// in-memory network with injected faults.
package route

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/reset"
)

// FallbackPolicy says how to answer a check whose owner is unreachable.
// Every such answer is marked Degraded and counted in
// peerlimit_owner_unreachable_total.
type FallbackPolicy uint8

const (
	// FallbackLocal decides on this node's own store, as if it owned the
	// key. The state it builds is handed to the owner when it is back (or
	// kept, if this node inherits the key), so admissions made meanwhile
	// still count: at most one limit per side while the owner is cut off.
	FallbackLocal FallbackPolicy = iota
	// FallbackAllow lets the request through (fail open).
	FallbackAllow
	// FallbackDeny refuses it (fail closed), with a retry after of one
	// second.
	FallbackDeny
	// FallbackShare decides on this node's own store, as FallbackLocal
	// does, but against this node's share of the limit, so that the sides
	// of a partition together stay near one limit instead of one each. A
	// check of an unreachable owner gets limit ÷ the members this node
	// knows (live and recently failed: Deps.Share); while members have
	// failed, every check this node decides, its own keys' too, gets
	// limit × live ÷ known. Such answers are marked Degraded.
	FallbackShare
)

// String returns the policy's flag spelling.
func (f FallbackPolicy) String() string {
	return [...]string{"local", "allow", "deny", "share"}[min(int(f), 3)]
}

// ParseFallbackPolicy reads "local", "allow" or "deny".
func ParseFallbackPolicy(s string) (FallbackPolicy, error) {
	for p := FallbackLocal; p <= FallbackShare; p++ {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown fallback policy %q; want local, allow, deny or share", s)
}

// Service routes checks to their owners and decides the ones this node
// owns. It is safe for concurrent use.
type Service struct {
	cfg      Config
	deps     Deps
	store    *limiter.Store
	metrics  *Metrics
	log      *slog.Logger
	inflight slots // forwarded checks waiting for their owners
	handoffs *handoff.Receiver
	resets   *reset.Resetter
	// Warnings a fault could repeat for every request: one a second each.
	unreachableLog, overloadLog, refusedLog, peerRefusedLog, lateLog, settleLog logging.Gate
}

// NewService returns a Service with cfg's settings over deps.
func NewService(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.validate(); err != nil {
		return nil, err
	}
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{cfg: cfg, deps: deps, store: deps.Store, metrics: deps.Metrics, log: log,
		inflight: slots{limit: int64(cfg.MaxInflightForwards)}, handoffs: deps.Handoffs}
	var err error
	if s.handoffs == nil {
		if s.handoffs, err = handoff.NewReceiver(handoff.ReceiverDeps{Self: deps.NodeID, Store: deps.Store, Now: deps.Now, Logger: log}); err != nil {
			return nil, err
		}
	}
	rd := reset.Deps{Self: deps.NodeID, Store: deps.Store, Now: deps.Now, Peers: deps.Peers, Logger: log}
	if deps.Cluster != nil { // a nil Cluster in the interface would not be nil
		rd.Members = deps.Cluster
	}
	if s.resets, err = reset.New(rd); err != nil {
		return nil, err
	}
	return s, nil
}

// BatchTooLarge returns why a batch of n items of what ("checks",
// "descriptors") is refused, wrapping ErrBatchTooLarge, or nil if it is
// within Config.MaxBatch. Every face asks it before converting a batch's
// items, and CheckBatch once more: the one place the bound is checked.
func (s *Service) BatchTooLarge(what string, n int) error {
	if n <= s.cfg.MaxBatch {
		return nil
	}
	return fmt.Errorf("%s: %d items; the maximum is %d: %w", what, n, s.cfg.MaxBatch, ErrBatchTooLarge)
}

// Store is the node's limiter state.
func (s *Service) Store() *limiter.Store { return s.store }

// NodeID is this node's id.
func (s *Service) NodeID() string { return s.deps.NodeID }

// InflightForwards returns how many forwarded checks wait for their
// owners' answers now.
func (s *Service) InflightForwards() int { return s.inflight.inUse() }

// Check answers one request: decided here if this node owns the key,
// else forwarded to the owner.
func (s *Service) Check(ctx context.Context, req limiter.Request) peer.Result {
	owner, local, _ := s.settledOwner(ctx, req.Key)
	if local {
		res := s.decide(s.deps.Now(), req) // the store validates
		s.metrics.check(req.Algorithm, routeLocal, res)
		return res
	}
	var res routed
	ok := false
	if req.Op == limiter.OpCheck { // a lease lends hits to checks; every other op is its owner's
		res, ok = s.viaLease(ctx, owner, req)
	}
	if !ok {
		res = s.forward(ctx, owner, req)
	}
	s.metrics.check(req.Algorithm, res.route, res.Result)
	return res.Result
}

// routed is a result and the route that answered it.
type routed struct {
	peer.Result
	route int
}

// forward answers a check another node owns: refused here if invalid or
// over the in-flight bound, else the owner's answer, else the fallback's.
func (s *Service) forward(ctx context.Context, owner peer.Route, req limiter.Request) routed {
	// Refuse a bad request where it arrived, not after a hop.
	if err := s.store.Validate(req); err != nil {
		return routed{peer.Result{Err: err}, routeForwarded}
	}
	if s.inflight.acquire(1) == 0 {
		return routed{s.overloaded(ctx, owner, 1), routeForwarded}
	}
	fctx, span := s.startForward(ctx, owner, 1, false)
	res, id, err := s.deps.Peers.Forward(fctx, owner, req)
	s.inflight.release(1)
	if err == nil && peer.NotDecided(res.Err) {
		err = res.Err // the owner took it back, or a batch's call failed
	}
	endForward(span, err, 0)
	if err != nil {
		return s.fallback(ctx, owner, req, err)
	}
	s.metrics.forwarded(forwardOK, 1)
	s.ownerRefused(ctx, owner, res, id)
	return routed{res, routeForwarded}
}

// CheckBatch answers every request, each on its own and in order. Checks
// this node owns are decided together, stamped with one arrival time; the
// others go to their owners, one call per owner, all at once. The error is
// for the batch as a whole (too large); per-item failures are in the
// results.
func (s *Service) CheckBatch(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error) {
	if err := s.BatchTooLarge("checks", len(reqs)); err != nil {
		return nil, err
	}
	s.metrics.checkBatch(len(reqs))
	if len(reqs) == 1 && s.deps.Leases != nil {
		// One check (an Envoy descriptor, say): as Check, which may ask
		// its owner for a budget lease.
		return []peer.Result{s.Check(ctx, reqs[0])}, nil
	}
	out := make([]peer.Result, len(reqs))
	remote := s.decideOwn(ctx, reqs, out)
	var wg sync.WaitGroup
	n := 0
	for owner, idx := range remote {
		n++
		idx = s.reserveSlots(ctx, owner, reqs, idx, out)
		switch {
		case len(idx) == 0:
		case n == len(remote):
			// The last owner's call goes out on this goroutine, whose
			// stack is already grown (as in internal/batch and the client).
			s.forwardBatch(ctx, owner, reqs, idx, out)
		default:
			wg.Go(func() { s.forwardBatch(ctx, owner, reqs, idx, out) })
		}
	}
	wg.Wait()
	return out, nil
}

// decideOwn decides the checks of reqs this node owns into out, refuses
// the invalid ones bound elsewhere, and returns the others' indexes by
// owner.
func (s *Service) decideOwn(ctx context.Context, reqs []limiter.Request, out []peer.Result) map[peer.Route][]int {
	var remote map[peer.Route][]int // made at the first remote check: a batch to its owner has none
	now := s.deps.Now()
	for i, r := range reqs {
		owner, local, waited := s.settledOwner(ctx, r.Key) // once settled, the others return at once
		if waited {
			now = s.deps.Now() // decided when it may be, not when the batch came: the wait can be SettleWait long
		}
		if local {
			out[i] = s.decide(now, r) // the store validates
			s.metrics.check(r.Algorithm, routeLocal, out[i])
			continue
		}
		if err := s.store.Validate(r); err != nil {
			out[i] = peer.Result{Err: err}
			s.metrics.check(r.Algorithm, routeForwarded, out[i])
			continue
		}
		if s.deps.Leases != nil && r.Op == limiter.OpCheck {
			if d, ok := s.deps.Leases.Admit(now, r); ok {
				out[i] = peer.Result{Decision: d, Owner: owner.ID}
				s.metrics.check(r.Algorithm, routeLeased, out[i])
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

// reserveSlots takes in-flight slots for the checks idx bound to owner
// and returns those that got one. The others are refused, with one error
// and one count for the lot.
func (s *Service) reserveSlots(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result) []int {
	got := s.inflight.acquire(len(idx))
	if refused := idx[got:]; len(refused) > 0 {
		r := s.overloaded(ctx, owner, len(refused))
		for _, i := range refused {
			out[i] = r
			s.metrics.check(reqs[i].Algorithm, routeForwarded, r)
		}
	}
	return idx[:got]
}

// forwardBatch sends the checks idx of reqs, whose in-flight slots are
// held, to owner in one call and fills in their results.
func (s *Service) forwardBatch(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result) {
	defer s.inflight.release(len(idx))
	sub := pick(reqs, idx)
	fctx, span := s.startForward(ctx, owner, len(idx), false)
	results, id, err := s.deps.Peers.ForwardBatch(fctx, owner, sub)
	if span != nil {
		endForward(span, err, countNotDecided(results))
	}
	if err != nil {
		s.fallbackBatch(ctx, owner, reqs, idx, out, err)
		return
	}
	ok := 0
	for j, i := range idx {
		var r routed
		switch {
		case peer.NotDecided(results[j].Err):
			r = s.fallback(ctx, owner, reqs[i], results[j].Err)
		default:
			r = routed{results[j], routeForwarded}
			s.ownerRefused(ctx, owner, r.Result, id)
			ok++
		}
		out[i] = r.Result
		s.metrics.check(reqs[i].Algorithm, r.route, r.Result)
	}
	s.metrics.forwarded(forwardOK, ok)
}

// countNotDecided returns how many of results the owner did not decide:
// the fallback answers them.
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

// overloaded answers a check refused for the in-flight bound: counted,
// and logged at most once a second.
func (s *Service) overloaded(ctx context.Context, owner peer.Route, n int) peer.Result {
	err := fmt.Errorf("forward refused: %d checks already wait for their owners' answers on this node, its maximum (--max-inflight-forwards): %w",
		s.cfg.MaxInflightForwards, ErrTooManyForwards)
	s.metrics.forwarded(forwardRefused, n)
	if s.overloadLog.Allow() {
		s.log.Warn("too many forwarded checks in flight; refusing with RESOURCE_EXHAUSTED",
			append([]any{"owner", owner.ID, "max_inflight_forwards", s.cfg.MaxInflightForwards}, peer.LogAttrs(ctx, "")...)...)
	}
	return peer.Result{Err: err}
}

// ownerRefused warns, at most once a second, about a check the owner
// refused as invalid although this node accepted it: the nodes' settings
// (--max-key-bytes, --max-window, --max-log-limit, or their versions)
// differ, and which requests pass depends on the node they reach.
func (s *Service) ownerRefused(ctx context.Context, owner peer.Route, res peer.Result, id string) {
	if res.Err == nil || peer.CodeOf(res.Err) != peer.InvalidArgument || !s.refusedLog.Allow() {
		return
	}
	s.log.Warn("the owner refused a forwarded check this node accepted: the nodes' settings differ",
		append([]any{"owner", owner.ID, "field", peer.FieldOf(res.Err), "err", res.Err}, peer.LogAttrs(ctx, id)...)...)
}

func (s *Service) decide(now time.Time, req limiter.Request) peer.Result {
	if s.cfg.Fallback == FallbackShare && req.Op.Admits() {
		if live, known := s.share(); live < known {
			return s.decideShare(now, req, live, known)
		}
	}
	d, err := s.store.Apply(now, req)
	if err != nil {
		return peer.Result{Err: err}
	}
	return peer.Result{Decision: d, Owner: s.deps.NodeID, Degraded: s.contested(req.Key)}
}

// decideShare decides req against part ÷ whole of its limit (at least
// 1), on this node's store; the answer is Degraded and says the limit it
// was held to.
func (s *Service) decideShare(now time.Time, req limiter.Request, part, whole int) peer.Result {
	if err := s.store.Validate(req); err != nil {
		return peer.Result{Err: err}
	}
	shared := req
	shared.Limit = max(req.Limit*int64(part)/int64(whole), 1) // no overflow: part ≤ whole, and whole is a member count
	over := req.Hits > shared.Limit                           // more than the whole share: refused, counting nothing
	if over {
		shared.Op, shared.Hits, shared.TTL = limiter.OpCheck, 0, 0 // a peek: a reservation over the share opens nothing
	}
	d, err := s.store.Apply(now, shared)
	if err != nil {
		return peer.Result{Err: err}
	}
	if over {
		d.Allowed = false
	}
	return peer.Result{Decision: d, Owner: s.deps.NodeID, Degraded: true}
}

// fallback answers a check whose owner could not be asked. A caller that
// gave up is told so; anything else is the owner's unavailability, which
// the policy answers, marked Degraded. AP: the caller always gets an
// answer, never a silent one.
func (s *Service) fallback(ctx context.Context, owner peer.Route, req limiter.Request, cause error) routed {
	out := make([]peer.Result, 1)
	if s.rescue(ctx, owner, []limiter.Request{req}, []int{0}, out)[0] {
		return routed{out[0], routeFallback}
	}
	return s.byPolicy(ctx, owner, req, cause)
}

// fallbackBatch answers the checks idx of reqs, whose call to owner failed
// with cause: through a relay or by their heir where it can (rescue), by
// the fallback policy for the rest.
func (s *Service) fallbackBatch(ctx context.Context, owner peer.Route, reqs []limiter.Request, idx []int, out []peer.Result, cause error) {
	rescued := s.rescue(ctx, owner, reqs, idx, out)
	for _, i := range idx {
		r := routed{out[i], routeFallback}
		if !rescued[i] {
			r = s.byPolicy(ctx, owner, reqs[i], cause)
			out[i] = r.Result
		}
		s.metrics.check(reqs[i].Algorithm, r.route, r.Result)
	}
}

// byPolicy answers req, whose owner could not be reached, by the
// fallback policy.
func (s *Service) byPolicy(ctx context.Context, owner peer.Route, req limiter.Request, cause error) routed {
	if err := callerGone(ctx); err != nil {
		return routed{peer.Result{Err: err}, routeForwarded}
	}
	s.metrics.forwarded(forwardFailed, 1)
	s.metrics.unreachable(s.cfg.Fallback)
	if s.unreachableLog.Allow() {
		s.log.Warn("owner unreachable; answering by fallback policy", append([]any{"owner", owner.ID, "addr", owner.Addr,
			"policy", s.cfg.Fallback.String(), "err", cause}, peer.LogAttrs(ctx, peer.CallID(cause))...)...)
	}
	var res peer.Result
	switch {
	case s.cfg.Fallback == FallbackShare && req.Op.Admits():
		// Checks, reservations and holds alike get this node's share
		// of the limit: a side of a partition keeps to its share
		// whatever it is asked.
		_, known := s.share()
		res = s.decideShare(s.deps.Now(), req, 1, known)
	case s.cfg.Fallback == FallbackDeny && req.Op.Admits():
		// Fail closed means every admission: reservations and holds too.
		res = peer.Result{Decision: limiter.Decision{Allowed: false, Limit: req.Limit, RetryAfter: time.Second}, Owner: s.deps.NodeID}
	case req.Op != limiter.OpCheck:
		// Refunds, charges and settles change what was counted: whatever the
		// policy, this node applies them to its own store, whose state
		// goes to the owner when it is back (FallbackLocal's rule), so
		// a charge is not lost and a refund never exceeds what was
		// counted here.
		res = s.decide(s.deps.Now(), req)
	case s.cfg.Fallback == FallbackAllow:
		res = peer.Result{Decision: limiter.Decision{Allowed: true, Limit: req.Limit, Remaining: max(req.Limit-req.Hits, 0)}, Owner: s.deps.NodeID}
	case s.cfg.Fallback == FallbackDeny:
		res = peer.Result{Decision: limiter.Decision{Allowed: false, Limit: req.Limit, RetryAfter: time.Second}, Owner: s.deps.NodeID}
	default:
		res = s.decide(s.deps.Now(), req)
	}
	res.Degraded = res.Err == nil
	return routed{res, routeFallback}
}

// callerGone reports whether the caller gave up. Past its deadline it has,
// even if ctx does not say so yet: the context's timer fires
// asynchronously, and a forward bounded by the same deadline can fail
// first, which must not count as the owner's unavailability.
func callerGone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
