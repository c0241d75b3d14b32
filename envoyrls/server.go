package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/internal/ratelimitheader"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

// Checker is the node's request path: *route.Service. CheckBatch sends each
// check to its key's owner, the ones bound for the same owner in one
// call, and answers each on its own; CheckAll admits and counts checks
// all or nothing (all_or_nothing domains).
type Checker interface {
	CheckBatch(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error)
	CheckAll(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error)
	BatchTooLarge(what string, n int) error
}

var _ Checker = (*route.Service)(nil)

// ServerDeps is what a Server works with.
type ServerDeps struct {
	// Rules holds the configuration in force. Required.
	Rules *Registry
	// Checker decides the checks. Required.
	Checker Checker
	// Validate checks a request against the node's caps before it is sent
	// (the store's Validate), so that a per-request limit the node cannot
	// serve is refused naming the descriptor. Nil: the Checker's answer
	// says so instead.
	Validate func(limiter.Request) error
	// MaxKeyBytes is the node's key size limit: longer descriptor keys are
	// hashed (see Key). Required: the store's (limiter.Config.MaxKeyBytes).
	MaxKeyBytes int
	// Metrics, if not nil, counts calls and descriptors.
	Metrics *Metrics
	// Logger receives the warnings about unknown domains (at most one a
	// second). Default slog.Default().
	Logger *slog.Logger
	// Tracer, if not nil, records a server span for every call (trace.go).
	// Nil: none, at the cost of one comparison.
	Tracer trace.Tracer
	// Propagator reads the caller's trace context from the call's
	// metadata (Envoy sends traceparent or x-b3-*), so that the call's
	// span joins Envoy's trace. Nil: none is read.
	Propagator propagation.TextMapPropagator
}

// Server implements envoy.service.ratelimit.v3.RateLimitService on a
// node's request path. Safe for concurrent use.
type Server struct {
	rlspb.UnimplementedRateLimitServiceServer
	cfg Config
	d   ServerDeps
	log *slog.Logger
	// unknownLog gates the unknown-domain warning: one a second.
	unknownLog logging.Gate
}

var _ rlspb.RateLimitServiceServer = (*Server)(nil)

// NewServer returns a Server answering as cfg says (start from
// DefaultConfig: the zero value has no near-limit ratio) over d.
func NewServer(cfg Config, d ServerDeps) (*Server, error) {
	switch {
	case d.Rules == nil || d.Rules.Current() == nil:
		return nil, errors.New("envoyrls: no rules")
	case d.Checker == nil:
		return nil, errors.New("envoyrls: no checker")
	case d.MaxKeyBytes < 1:
		return nil, fmt.Errorf("envoyrls: MaxKeyBytes must be ≥ 1 (the store's), got %d", d.MaxKeyBytes)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("envoyrls: %w", err)
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{cfg: cfg, d: d, log: log}, nil
}

// DegradedKey is the dynamic metadata field set (to true) on an answer
// in which some descriptor was decided by the fallback policy because its
// owner was unreachable. Envoy's rate limit filter emits it in its
// namespace: %DYNAMIC_METADATA(envoy.filters.http.ratelimit:peerlimit.degraded)%.
const DegradedKey = "peerlimit.degraded"

// plan is how one request descriptor is answered.
type plan struct {
	rule    *Rule      // nil: no limit applies (no match, replaced, unknown domain)
	matched Matched    // how the rule was selected; zero for a request's own limit
	check   int        // index of its check in the batch; -1: none
	op      limiter.Op // its check's: OpCheck, OpRefund (is_negative_hits) or OpCharge (charge_over_limit)
	hits    int64      // the hits it asks to count; 0 for a peek or a refund
	tooMany bool       // hits over the limit, not charged: never allowed, checked as a peek
	refund  bool       // is_negative_hits: never denied; its hits, if any, refunded
	all     bool       // counted all or nothing with the domain's other such checks (Domain.AllOrNothing)
	d       limiter.Decision
}

// ShouldRateLimit implements rlspb.RateLimitServiceServer.
//
// Every descriptor is checked on its key's owner, all in one CheckBatch;
// the answer is OVER_LIMIT when any descriptor neither in shadow mode nor
// in quota mode is over, or when every quota-mode one is. Descriptors
// under the limit consume their hits even when another one is over, as in
// envoyproxy/ratelimit, unless the domain is all_or_nothing
// (allornothing.go). RLS has no per-descriptor error, so a bad
// descriptor (or a check that fails: capacity, the caller gone) fails the
// whole call with the gRPC status naming it.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	var span trace.Span
	if s.d.Tracer != nil {
		ctx, span = s.startSpan(ctx, req)
	}
	cfg := s.d.Rules.Current()
	dom := cfg.Domain(req.GetDomain())
	b := s.d.Metrics.bind(cfg)
	dc := b.domain(dom)
	// Envoy's x-request-id (it sends one with every call) names the
	// checks' forwards in both nodes' logs.
	resp, degraded, err := s.answer(grpcapi.Incoming(ctx), req, dom, b, dc)
	code := codeError
	switch {
	case err != nil:
	case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
		code = codeOverLimit
	default:
		code = codeOK
	}
	dc.call(code, degraded)
	s.d.Metrics.responseTime(start)
	if span != nil {
		endSpan(span, code, degraded, err)
	}
	return resp, err
}

// answer is ShouldRateLimit's work: the response, whether a fallback
// decided any descriptor, or the status that fails the call.
func (s *Server) answer(ctx context.Context, req *rlspb.RateLimitRequest, dom *Domain, b *boundMetrics, dc *domainCounters) (*rlspb.RateLimitResponse, bool, error) {
	if err := s.validate(req); err != nil {
		return nil, false, err
	}
	descs := req.GetDescriptors()
	resp := okResponse(len(descs))
	// Made here rather than returned by plan, and kept out of any struct
	// that holds resp, so that it does not escape: the compiler can then
	// keep a small one on the stack.
	plans := make([]plan, len(descs))
	if dom == nil {
		// As in envoyproxy/ratelimit: a domain without configuration
		// limits nothing. Said in the log, since it is often a typo.
		s.warnUnknownDomain(req.GetDomain())
		s.addMetadata(resp, req, plans, false)
		return resp, false, nil
	}
	if err := s.plan(plans, dom, descs); err != nil {
		return nil, false, err
	}
	reqs, err := s.checks(plans, req, dom)
	if err != nil {
		return nil, false, err
	}
	results, err := s.check(ctx, reqs, plans)
	if err != nil {
		return nil, false, err
	}
	if dom.AllOrNothing {
		s.undoRefused(ctx, plans, reqs, results)
	}
	s.saturate(ctx, plans, reqs, results)
	degraded := s.assemble(resp, req, plans, results, b, dc)
	return resp, degraded, nil
}

// validate refuses a request with no domain, no descriptors or more than
// one batch holds, or a descriptor without entries or with an empty key.
// The status names the field: INVALID_ARGUMENT, or RESOURCE_EXHAUSTED for
// too many descriptors.
func (s *Server) validate(req *rlspb.RateLimitRequest) error {
	descs := req.GetDescriptors()
	switch {
	case req.GetDomain() == "":
		return invalid("domain", "must not be empty")
	case len(descs) == 0:
		return invalid("descriptors", "must not be empty")
	}
	if err := s.d.Checker.BatchTooLarge("descriptors", len(descs)); err != nil {
		return grpcapi.Status(err).Err()
	}
	for i, d := range descs {
		entries := d.GetEntries()
		if len(entries) == 0 {
			return invalid(fmt.Sprintf("descriptors[%d].entries", i), "must not be empty")
		}
		for j, e := range entries {
			if e.GetKey() == "" {
				return invalid(fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), "must not be empty")
			}
		}
	}
	return nil
}

// okResponse is an OK answer for n descriptors, each OK.
func okResponse(n int) *rlspb.RateLimitResponse {
	// The statuses live in one array, filled in place: one allocation
	// instead of one per descriptor.
	sts := make([]rlspb.RateLimitResponse_DescriptorStatus, n)
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK,
		Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, n)}
	for i := range sts {
		sts[i].Code = rlspb.RateLimitResponse_OK
		resp.Statuses[i] = &sts[i]
	}
	return resp
}

// plan fills plans, one per descriptor, with the rule that applies to it:
// its own limit, or the configuration's, unless another descriptor's rule
// replaces it. No check is placed yet.
func (s *Server) plan(plans []plan, dom *Domain, descs []*rlscommon.RateLimitDescriptor) error {
	// Match every descriptor first: a matched rule's replaces can cancel
	// another descriptor's rule.
	var replacing []string
	for i, d := range descs {
		plans[i].check = -1
		if o := d.GetLimit(); o != nil {
			r, err := s.override(i, o, d.GetEntries())
			if err != nil {
				return err
			}
			r.ChargeOverLimit = dom.ChargeOverLimit
			plans[i].rule = r
			continue
		}
		if m := Match(dom, d.GetEntries()); m.Rule != nil {
			plans[i].rule, plans[i].matched = m.Rule, m
			replacing = append(replacing, m.Rule.Replaces...)
		}
	}
	if len(replacing) > 0 {
		dropReplaced(plans, replacing)
	}
	return nil
}

// dropReplaced removes the rules named in replacing from plans: those
// descriptors are then not limited.
func dropReplaced(plans []plan, replacing []string) {
	for i := range plans {
		if r := plans[i].rule; r != nil && r.Name != "" && contains(replacing, r.Name) {
			plans[i].rule = nil
		}
	}
}

// checks is the batch of limiter requests for the planned descriptors
// that need one (a limit neither unlimited nor 0); each such plan learns
// its index in the batch, and whether it is counted all or nothing. A
// request the node cannot serve fails the call naming its descriptor.
func (s *Server) checks(plans []plan, req *rlspb.RateLimitRequest, dom *Domain) ([]limiter.Request, error) {
	descs := req.GetDescriptors()
	reqs := make([]limiter.Request, 0, len(descs))
	for i, d := range descs {
		p := &plans[i]
		r := p.rule
		if r == nil || r.Unlimited || r.RequestsPerUnit == 0 {
			continue
		}
		hits := p.checkHits(req, d)
		p.all = dom.AllOrNothing && p.op == limiter.OpCheck && p.hits > 0 && !r.ShadowMode && !r.QuotaMode && !s.cfg.QuotaMode
		lr := limiter.Request{Key: p.key(dom.Name, d.GetEntries(), s.d.MaxKeyBytes), Limit: int64(r.RequestsPerUnit),
			Window: r.Window, Algorithm: r.Algorithm, Calendar: r.Calendar, Burst: r.Burst, Hits: hits, Op: p.op}
		if s.d.Validate != nil {
			if err := s.d.Validate(lr); err != nil {
				return nil, descriptorError(i, err)
			}
		}
		p.check = len(reqs)
		reqs = append(reqs, lr)
	}
	return reqs, nil
}

// key is the limiter key of the planned descriptor with entries in
// domain: the entries' (Key), except that a level matched through a
// share_threshold wildcard is counted under the wildcard, not the value,
// so that every value it matches shares the count, as upstream.
func (p *plan) key(domain string, entries []*rlscommon.RateLimitDescriptor_Entry, maxBytes int) string {
	r := p.rule
	if r.index < 0 || !r.shares {
		return Key(domain, entries, maxBytes)
	}
	shared := make([]string, len(entries))
	for i, n := range r.nodes {
		if n.share && p.matched.how(i) == byWildcard {
			shared[i] = n.composite
		}
	}
	return sharedKey(domain, entries, shared, maxBytes)
}

// checkHits is the hits descriptor d's check sends, and sets p.op to the
// check's op and p.hits to the hits it asks to count:
//   - is_negative_hits: a refund of its hits (OpRefund), which counts
//     nothing; of 0 hits, a peek;
//   - charge_over_limit: a charge (OpCharge) of its hits, counted even
//     past the limit; of 0 hits, a peek;
//   - otherwise a check (OpCheck), except that more hits than the limit
//     (a GCRA rule's burst) are a peek, noted in p.tooMany: they can
//     never fit.
func (p *plan) checkHits(req *rlspb.RateLimitRequest, d *rlscommon.RateLimitDescriptor) int64 {
	hits := int64(max(req.GetHitsAddend(), 1)) // 0 is unset: one hit
	if h := d.GetHitsAddend(); h != nil {
		hits = int64(min(h.GetValue(), math.MaxInt64)) // set, even to 0 (a peek)
	}
	p.op = limiter.OpCheck
	switch {
	case d.GetIsNegativeHits():
		p.refund = true
		if hits > 0 {
			p.op = limiter.OpRefund
		}
		return hits
	case hits > 0 && p.rule.ChargeOverLimit:
		p.op = limiter.OpCharge
	case hits > p.rule.capacity():
		p.hits, p.tooMany = hits, true
		return 0
	}
	p.hits = hits
	return hits
}

// check decides the batch: in one CheckBatch, but for the checks counted
// all or nothing (send). RLS has no per-descriptor error, so the first
// descriptor whose check failed fails the call.
func (s *Server) check(ctx context.Context, reqs []limiter.Request, plans []plan) ([]peer.Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	results, err := s.send(ctx, reqs, plans)
	if err != nil {
		return nil, grpcapi.Status(err).Err()
	}
	for i, p := range plans {
		if p.check >= 0 && results[p.check].Err != nil {
			return nil, descriptorError(i, results[p.check].Err)
		}
	}
	return results, nil
}

// saturate spends what is left of each limit whose descriptor asked for
// more: its check was refused (or, over the limit itself, only peeked),
// and consumed nothing, but where there was room, the room is taken now.
// The count then stops at the limit, as envoyproxy/ratelimit's counts
// all hits, past the limit: this is what makes Envoy's usage reported
// after the fact (a stream's tokens, sent with apply_on_stream_done as
// one large hits_addend) exhaust a quota that a peek then refuses,
// instead of being dropped whole and letting every later request in. A
// single hit refused has no room to take, so a client retrying while
// refused still consumes nothing. (charge_over_limit counts such usage
// whole, past the limit; all_or_nothing checks take nothing when
// refused.) Best effort, in one more CheckBatch:
// the answer is already OVER_LIMIT whatever it does, so its failure
// fails nothing; the next check sees the count as it is.
func (s *Server) saturate(ctx context.Context, plans []plan, reqs []limiter.Request, results []peer.Result) {
	var fills []limiter.Request
	for _, p := range plans {
		if p.check < 0 || p.hits == 0 || p.op != limiter.OpCheck || p.all {
			continue // nothing asked, counted whatever, or all or nothing
		}
		d := results[p.check].Decision
		if room := d.Remaining; room > 0 && (!d.Allowed || p.tooMany) {
			fill := reqs[p.check]
			fill.Hits = room
			fills = append(fills, fill)
		}
	}
	if len(fills) > 0 {
		_, _ = s.d.Checker.CheckBatch(ctx, fills)
	}
}

// override returns the rule of a descriptor's own limit. As in
// envoyproxy/ratelimit it replaces whatever the configuration says for the
// descriptor, shadow mode included, and its state is the descriptor's
// (Key): overrides with the same window share the count, as upstream,
// where the window is part of the key. It is counted with the sliding
// window counter: constant memory, whatever limit the request sets.
func (s *Server) override(i int, o *rlscommon.RateLimitDescriptor_RateLimitOverride, entries []*rlscommon.RateLimitDescriptor_Entry) (*Rule, error) {
	// Field names are formatted only on error: this runs for every
	// override on every request.
	u := Unit(rlspb.RateLimitResponse_RateLimit_Unit_value[o.GetUnit().String()])
	unit, ok := UnitDuration(u)
	if !ok {
		return nil, invalid(fmt.Sprintf("descriptors[%d].limit.unit", i), fmt.Sprintf("unknown unit %s", o.GetUnit()))
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		if mult = m.GetValue(); mult == 0 {
			return nil, invalid(fmt.Sprintf("descriptors[%d].limit.unit_multiplier", i), "must be at least 1")
		}
	}
	if int64(mult) > math.MaxInt64/int64(unit) {
		return nil, invalid(fmt.Sprintf("descriptors[%d].limit.unit_multiplier", i), fmt.Sprintf("a window of %d %ss is too long", mult, strings.ToLower(u.String())))
	}
	r := &Rule{Path: "override", index: -1, RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u, UnitMultiplier: mult,
		Window: unit * time.Duration(mult), Algorithm: limiter.SlidingWindowCounter}
	r.current = &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: r.RequestsPerUnit, Unit: u}
	if mult != 1 {
		r.current.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	if s.cfg.Headers {
		keys := make([]string, len(entries))
		for j, e := range entries {
			keys[j] = e.GetKey()
		}
		r.header, _ = ratelimitheader.String(ratelimitheader.Sanitize(strings.Join(keys, ".")))
		r.policy = ratelimitheader.Policy(r.header, int64(r.RequestsPerUnit), r.Window)
	}
	return r, nil
}

func (s *Server) warnUnknownDomain(domain string) {
	if s.unknownLog.Allow() {
		s.log.Warn("envoy rls: unknown domain; answering OK with no limits", "domain", logging.Clip(domain))
	}
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// invalid is an INVALID_ARGUMENT status naming field.
func invalid(field, reason string) error {
	return grpcapi.Status(&limiter.ArgumentError{Field: field, Reason: reason}).Err()
}

// descriptorError is the status of a call failed by descriptor i's check.
func descriptorError(i int, err error) error {
	var ae *limiter.ArgumentError
	if errors.As(err, &ae) {
		return invalid(fmt.Sprintf("descriptors[%d]", i), ae.Error())
	}
	st := grpcapi.Status(err)
	return status.Error(st.Code(), fmt.Sprintf("descriptors[%d]: %s", i, st.Message()))
}
