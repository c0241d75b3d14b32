// Package rpc is a node's request path and its gRPC faces. A Service finds
// each check's owner and either decides it locally, stamped with this
// node's clock, or forwards it to the owner through Peers (batched per
// peer). Server adapts the public gRPC API (peerlimit.v1.RateLimiter) onto
// the Service, PeerServer the node-to-node API (peerlimit.v1.Peer). The
// HTTP/JSON API (package httpapi) calls the same Service.
package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/peerlimit/peerlimit/limiter"
)

// Config holds the Service's settings. Start from DefaultConfig.
type Config struct {
	// NodeID names this node in every answer it decides (CheckResponse.owner).
	NodeID string
	// MaxBatch caps the checks of one CheckBatch call. Default 1000.
	MaxBatch int
	// Now is the node's clock. Only the owner's clock decides: a forwarded
	// check is decided at the time the owner receives it, so skew between
	// the nodes that receive requests cannot move a key's windows.
	// Default time.Now. Tests inject their own.
	Now func() time.Time
	// Owner returns the member that owns a key. Nil means this node owns
	// every key (a node alone).
	Owner func(key string) Route
	// Peers reaches the other members. Required when Owner is set.
	Peers *Peers
	// Fallback is how a check is answered when its owner cannot be reached.
	// Default FallbackLocal.
	Fallback FallbackPolicy
	// Logger receives the owner-unreachable warnings (at most one a second).
	// Default: slog.Default().
	Logger *slog.Logger
	// Policies resolves the policy names requests may give instead of
	// numbers. Nil: this node has none, and a request naming one is
	// refused.
	Policies PolicyLookup
	// Members returns every live member's route (this node may be among
	// them), for the calls that go to all of them: Reset asks each to drop
	// its copy of a key's state. Nil: this node knows no others.
	Members func() []Route
	// MaxInflightForwards caps the checks of this node waiting for their
	// owners' answers, all peers together. A check over it is refused at
	// once with ErrTooManyForwards (RESOURCE_EXHAUSTED, HTTP 429), not
	// answered by the fallback: a slow owner must show as overload, and
	// queued checks must not pile up without bound. Default 10,000.
	MaxInflightForwards int
}

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
)

// String returns the policy's flag spelling.
func (f FallbackPolicy) String() string {
	return [...]string{"local", "allow", "deny"}[min(int(f), 2)]
}

// ParseFallbackPolicy reads "local", "allow" or "deny".
func ParseFallbackPolicy(s string) (FallbackPolicy, error) {
	for p := FallbackLocal; p <= FallbackDeny; p++ {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown fallback policy %q; want local, allow or deny", s)
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{MaxBatch: 1000, Now: time.Now, Fallback: FallbackLocal, MaxInflightForwards: 10_000}
}

// Validate reports an unusable Config.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("rpc config: NodeID must not be empty")
	case c.MaxBatch < 1:
		return fmt.Errorf("rpc config: MaxBatch must be ≥ 1, got %d", c.MaxBatch)
	case c.MaxInflightForwards < 1:
		return fmt.Errorf("rpc config: MaxInflightForwards must be ≥ 1, got %d", c.MaxInflightForwards)
	case c.Now == nil:
		return errors.New("rpc config: Now must not be nil")
	case (c.Owner != nil || c.Members != nil) && c.Peers == nil:
		return errors.New("rpc config: Peers is required with Owner or Members")
	case c.Fallback > FallbackDeny:
		return fmt.Errorf("rpc config: unknown Fallback %d", c.Fallback)
	}
	return nil
}

// Result is the answer to one check: a decision and who made it, or why
// there is none.
type Result struct {
	Decision limiter.Decision
	Owner    string
	// Degraded marks an answer given by the fallback policy because the
	// owner could not be reached.
	Degraded bool
	Err      error
}

// Service routes checks to their owners and decides the ones this node
// owns. It is safe for concurrent use.
type Service struct {
	cfg      Config
	store    *limiter.Store
	metrics  *Metrics
	log      *slog.Logger
	inflight atomic.Int64 // forwarded checks waiting for their owners
	// Warnings a fault could repeat for every request: one a second each.
	unreachableLog, overloadLog, refusedLog every
}

// ErrBatchTooLarge is returned, wrapped, for a batch over Config.MaxBatch.
var ErrBatchTooLarge = errors.New("batch too large")

// ErrTooManyForwards is returned, wrapped, for a check refused because
// Config.MaxInflightForwards checks already wait for their owners.
var ErrTooManyForwards = errors.New("too many forwarded checks in flight")

// NewService returns a Service deciding on store. metrics may be nil.
func NewService(cfg Config, store *limiter.Store, metrics *Metrics) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("rpc: nil store")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Service{cfg: cfg, store: store, metrics: metrics, log: log}, nil
}

// InflightForwards returns how many forwarded checks wait for their
// owners' answers now.
func (s *Service) InflightForwards() int { return int(s.inflight.Load()) }

// acquire reserves up to n in-flight forward slots and returns how many
// it got.
func (s *Service) acquire(n int) int {
	limit := int64(s.cfg.MaxInflightForwards)
	if n == 1 { // the common case: one atomic add
		if s.inflight.Add(1) <= limit {
			return 1
		}
		s.inflight.Add(-1)
		return 0
	}
	for {
		cur := s.inflight.Load()
		got := min(int64(n), limit-cur)
		if got <= 0 {
			return 0
		}
		if s.inflight.CompareAndSwap(cur, cur+got) {
			return int(got)
		}
	}
}

func (s *Service) release(n int) { s.inflight.Add(-int64(n)) }

// overloaded answers a check refused for the in-flight bound: counted,
// and logged at most once a second.
func (s *Service) overloaded(ctx context.Context, owner Route, n int) Result {
	err := fmt.Errorf("forward refused: %d checks already wait for their owners' answers on this node, its maximum (--max-inflight-forwards): %w",
		s.cfg.MaxInflightForwards, ErrTooManyForwards)
	s.metrics.forwarded(forwardRefused, n)
	if s.overloadLog.allow() {
		s.log.Warn("too many forwarded checks in flight; refusing with RESOURCE_EXHAUSTED",
			append([]any{"owner", owner.ID, "max_inflight_forwards", s.cfg.MaxInflightForwards}, idAttrs(ctx, "")...)...)
	}
	return Result{Err: err}
}

// owner returns key's owner, and whether it is this node.
func (s *Service) owner(key string) (Route, bool) {
	if s.cfg.Owner == nil {
		return Route{ID: s.cfg.NodeID}, true
	}
	o := s.cfg.Owner(key)
	return o, o.ID == s.cfg.NodeID || o.ID == ""
}

// Check answers one request: decided here if this node owns the key,
// else forwarded to the owner.
func (s *Service) Check(ctx context.Context, req limiter.Request) Result {
	owner, local := s.owner(req.Key)
	if local {
		res := s.decide(s.cfg.Now(), req) // the store validates
		s.metrics.check(req.Algorithm, routeLocal, res)
		return res
	}
	res := s.forward(ctx, owner, req)
	s.metrics.check(req.Algorithm, res.route, res.Result)
	return res.Result
}

// routed is a result and the route that answered it.
type routed struct {
	Result
	route int
}

// forward answers a check another node owns: refused here if invalid or
// over the in-flight bound, else the owner's answer, else the fallback's.
func (s *Service) forward(ctx context.Context, owner Route, req limiter.Request) routed {
	// Refuse a bad request where it arrived, not after a hop.
	if err := s.store.Validate(req); err != nil {
		return routed{Result{Err: err}, routeForwarded}
	}
	if s.acquire(1) == 0 {
		return routed{s.overloaded(ctx, owner, 1), routeForwarded}
	}
	res, id, err := s.cfg.Peers.Forward(ctx, owner, req)
	s.release(1)
	if err != nil {
		return s.fallback(ctx, owner, req, err)
	}
	s.metrics.forwarded(forwardOK, 1)
	s.ownerRefused(ctx, owner, res, id)
	return routed{res, routeForwarded}
}

// ownerRefused warns, at most once a second, about a check the owner
// refused as invalid although this node accepted it: the nodes' settings
// (--max-key-bytes, --max-window, --max-log-limit, or their versions)
// differ, and which requests pass depends on the node they reach.
func (s *Service) ownerRefused(ctx context.Context, owner Route, res Result, id string) {
	if res.Err == nil || Code(res.Err) != codes.InvalidArgument || !s.refusedLog.allow() {
		return
	}
	s.log.Warn("the owner refused a forwarded check this node accepted: the nodes' settings differ",
		append([]any{"owner", owner.ID, "field", Field(res.Err), "err", res.Err}, idAttrs(ctx, id)...)...)
}

// CheckBatch answers every request, each on its own and in order. Checks
// this node owns are decided together, stamped with one arrival time; the
// others go to their owners, one call per owner, all at once. The error is
// for the batch as a whole (too large); per-item failures are in the
// results.
func (s *Service) CheckBatch(ctx context.Context, reqs []limiter.Request) ([]Result, error) {
	if len(reqs) > s.cfg.MaxBatch {
		return nil, fmt.Errorf("checks: %d items; the maximum is %d: %w", len(reqs), s.cfg.MaxBatch, ErrBatchTooLarge)
	}
	s.metrics.checkBatch(len(reqs))
	out := make([]Result, len(reqs))
	remote := map[Route][]int{} // owner → indexes of its checks
	now := s.cfg.Now()
	for i, r := range reqs {
		owner, local := s.owner(r.Key)
		if local {
			out[i] = s.decide(now, r) // the store validates
			s.metrics.check(r.Algorithm, routeLocal, out[i])
			continue
		}
		if err := s.store.Validate(r); err != nil {
			out[i] = Result{Err: err}
			s.metrics.check(r.Algorithm, routeForwarded, out[i])
			continue
		}
		remote[owner] = append(remote[owner], i)
	}
	// forwardTo sends idx's checks, whose in-flight slots are held, to
	// owner in one call and fills in their results.
	forwardTo := func(owner Route, idx []int) {
		defer s.release(len(idx))
		sub := make([]limiter.Request, len(idx))
		for j, i := range idx {
			sub[j] = reqs[i]
		}
		results, id, err := s.cfg.Peers.ForwardBatch(ctx, owner, sub)
		for j, i := range idx {
			var r routed
			if err != nil {
				r = s.fallback(ctx, owner, reqs[i], err)
			} else {
				r = routed{results[j], routeForwarded}
				s.ownerRefused(ctx, owner, r.Result, id)
			}
			out[i] = r.Result
			s.metrics.check(reqs[i].Algorithm, r.route, r.Result)
		}
		if err == nil {
			s.metrics.forwarded(forwardOK, len(idx))
		}
	}
	var wg sync.WaitGroup
	n := 0
	for owner, idx := range remote {
		n++
		// Items over the in-flight bound are refused, with one error and
		// one count for the lot; the others go.
		got := s.acquire(len(idx))
		if refused := idx[got:]; len(refused) > 0 {
			r := s.overloaded(ctx, owner, len(refused))
			for _, i := range refused {
				out[i] = r
				s.metrics.check(reqs[i].Algorithm, routeForwarded, r)
			}
		}
		switch idx = idx[:got]; {
		case got == 0:
		case n == len(remote):
			// The last owner's call goes out on this goroutine, whose
			// stack is already grown (as in internal/batch and the client).
			forwardTo(owner, idx)
		default:
			wg.Go(func() { forwardTo(owner, idx) })
		}
	}
	wg.Wait()
	return out, nil
}

// DecideLocal decides checks forwarded by another node, here, whatever
// this node's ring says: a forwarded check is never forwarded again.
func (s *Service) DecideLocal(reqs []limiter.Request) []Result {
	now := s.cfg.Now()
	out := make([]Result, len(reqs))
	for i, r := range reqs {
		out[i] = s.decide(now, r)
		s.metrics.peerCheck(r.Algorithm, out[i])
	}
	return out
}

// MaxBatch is the largest batch CheckBatch accepts.
func (s *Service) MaxBatch() int { return s.cfg.MaxBatch }

// Store is the node's limiter state.
func (s *Service) Store() *limiter.Store { return s.store }

// NodeID is this node's id.
func (s *Service) NodeID() string { return s.cfg.NodeID }

func (s *Service) decide(now time.Time, req limiter.Request) Result {
	d, err := s.store.Check(now, req)
	if err != nil {
		return Result{Err: err}
	}
	return Result{Decision: d, Owner: s.cfg.NodeID}
}

// fallback answers a check whose owner could not be asked. A caller that
// gave up is told so; anything else is the owner's unavailability, which
// the policy answers, marked Degraded. AP: the caller always gets an
// answer, never a silent one.
func (s *Service) fallback(ctx context.Context, owner Route, req limiter.Request, cause error) routed {
	if err := callerGone(ctx); err != nil {
		return routed{Result{Err: err}, routeForwarded}
	}
	s.metrics.forwarded(forwardFailed, 1)
	s.metrics.unreachable(s.cfg.Fallback)
	if s.unreachableLog.allow() {
		s.log.Warn("owner unreachable; answering by fallback policy", append([]any{"owner", owner.ID, "addr", owner.Addr,
			"policy", s.cfg.Fallback.String(), "err", cause}, idAttrs(ctx, CallID(cause))...)...)
	}
	var res Result
	switch s.cfg.Fallback {
	case FallbackAllow:
		res = Result{Decision: limiter.Decision{Allowed: true, Limit: req.Limit, Remaining: max(req.Limit-req.Hits, 0)}, Owner: s.cfg.NodeID}
	case FallbackDeny:
		res = Result{Decision: limiter.Decision{Allowed: false, Limit: req.Limit, RetryAfter: time.Second}, Owner: s.cfg.NodeID}
	default:
		res = s.decide(s.cfg.Now(), req)
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

// NewRequest builds a limiter request from the public API's fields, which
// both the gRPC and the JSON API share; hits nil means 1. The store
// validates every field, in its order, so the first bad field is named
// whichever API it came through.
func NewRequest(key string, limit, windowMS int64, algo limiter.Algorithm, hits *int64) (limiter.Request, error) {
	// Clamp before converting: the multiplication would wrap, and a
	// negative window could wrap into a valid positive one. A clamped
	// window is still out of range, so the store rejects it.
	const maxMS = math.MaxInt64 / int64(time.Millisecond)
	windowMS = min(max(windowMS, -maxMS), maxMS)
	r := limiter.Request{Key: key, Limit: limit, Window: time.Duration(windowMS) * time.Millisecond, Algorithm: algo, Hits: 1}
	if hits != nil {
		r.Hits = *hits
	}
	return r, nil
}
