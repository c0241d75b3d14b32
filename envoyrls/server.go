package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/ratelimitheader"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/route"
)

// Checker is the node's request path: *route.Service. CheckBatch sends each
// check to its key's owner, the ones bound for the same owner in one
// call, and answers each on its own.
type Checker interface {
	CheckBatch(ctx context.Context, reqs []limiter.Request) ([]route.Result, error)
	MaxBatch() int
}

var _ Checker = (*route.Service)(nil)

// ServerConfig is what a Server needs.
type ServerConfig struct {
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
	// Headers adds the IETF RateLimit-Policy and RateLimit fields of the
	// most restrictive descriptor to every answer's
	// response_headers_to_add, and Retry-After to OVER_LIMIT answers.
	Headers bool
	// Metrics, if not nil, counts calls and descriptors.
	Metrics *Metrics
	// Logger receives the warnings about unknown domains (at most one a
	// second). Default slog.Default().
	Logger *slog.Logger
}

// Server implements envoy.service.ratelimit.v3.RateLimitService on a
// node's request path. Safe for concurrent use.
type Server struct {
	rlspb.UnimplementedRateLimitServiceServer
	cfg     ServerConfig
	log     *slog.Logger
	lastLog atomic.Int64 // unix ns of the last unknown-domain warning
}

var _ rlspb.RateLimitServiceServer = (*Server)(nil)

// NewServer returns a Server for cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	switch {
	case cfg.Rules == nil || cfg.Rules.Current() == nil:
		return nil, errors.New("envoyrls: no rules")
	case cfg.Checker == nil:
		return nil, errors.New("envoyrls: no checker")
	case cfg.MaxKeyBytes < 1:
		return nil, fmt.Errorf("envoyrls: MaxKeyBytes must be ≥ 1 (the store's), got %d", cfg.MaxKeyBytes)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{cfg: cfg, log: log}, nil
}

// DegradedKey is the dynamic metadata field set (to true) on an answer
// in which some descriptor was decided by the fallback policy because its
// owner was unreachable. Envoy's rate limit filter emits it in its
// namespace: %DYNAMIC_METADATA(envoy.filters.http.ratelimit:peerlimit.degraded)%.
const DegradedKey = "peerlimit.degraded"

// plan is how one request descriptor is answered.
type plan struct {
	rule    *Rule // nil: no limit applies (no match, replaced, unknown domain)
	check   int   // index of its check in the batch; -1: none
	tooMany bool  // hits over the limit: never allowed, checked as a peek
	refund  bool  // is_negative_hits: not supported, checked as a peek, never denied
}

// ShouldRateLimit implements rlspb.RateLimitServiceServer.
//
// Every descriptor is checked on its key's owner, all in one CheckBatch;
// the answer is OVER_LIMIT when any descriptor not in shadow mode is over.
// Descriptors under the limit consume their hits even when another one is
// over, as in envoyproxy/ratelimit. RLS has no per-descriptor error, so a
// bad descriptor (or a check that fails: capacity, the caller gone) fails
// the whole call with the gRPC status naming it.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	cfg := s.cfg.Rules.Current()
	dom := cfg.Domain(req.GetDomain())
	b := s.cfg.Metrics.bind(cfg)
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
	if dom == nil {
		// As in envoyproxy/ratelimit: a domain without configuration
		// limits nothing. Said in the log, since it is often a typo.
		s.warnUnknownDomain(req.GetDomain())
		return resp, false, nil
	}
	// Made here rather than returned by plan, and kept out of any struct
	// that holds resp, so that it does not escape: the compiler can then
	// keep a small one on the stack.
	plans := make([]plan, len(descs))
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
	degraded := s.assemble(resp, plans, results, b, dc)
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
	case len(descs) > s.cfg.Checker.MaxBatch():
		return grpcapi.Status(fmt.Errorf("descriptors: %d; the maximum is %d: %w", len(descs), s.cfg.Checker.MaxBatch(), route.ErrBatchTooLarge)).Err()
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
			plans[i].rule = r
			continue
		}
		if r := Match(dom, d.GetEntries()); r != nil {
			plans[i].rule = r
			replacing = append(replacing, r.Replaces...)
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
// its index in the batch. A request the node cannot serve fails the call
// naming its descriptor.
func (s *Server) checks(plans []plan, req *rlspb.RateLimitRequest, dom *Domain) ([]limiter.Request, error) {
	descs := req.GetDescriptors()
	reqs := make([]limiter.Request, 0, len(descs))
	for i, d := range descs {
		p := &plans[i]
		r := p.rule
		if r == nil || r.Unlimited || r.RequestsPerUnit == 0 {
			continue
		}
		lr := limiter.Request{Key: Key(dom.Name, d.GetEntries(), s.cfg.MaxKeyBytes), Limit: int64(r.RequestsPerUnit),
			Window: r.Window, Algorithm: r.Algorithm, Hits: p.hits(req, d)}
		if s.cfg.Validate != nil {
			if err := s.cfg.Validate(lr); err != nil {
				return nil, descriptorError(i, err)
			}
		}
		p.check = len(reqs)
		reqs = append(reqs, lr)
	}
	return reqs, nil
}

// hits is how many hits descriptor d's check consumes. A refund or more
// hits than the limit consume none: p notes which, and its check is a
// peek.
func (p *plan) hits(req *rlspb.RateLimitRequest, d *rlscommon.RateLimitDescriptor) int64 {
	hits := int64(max(req.GetHitsAddend(), 1)) // 0 is unset: one hit
	if h := d.GetHitsAddend(); h != nil {
		hits = int64(min(h.GetValue(), math.MaxInt64)) // set, even to 0 (a peek)
	}
	if d.GetIsNegativeHits() {
		p.refund, hits = true, 0
	}
	if hits > int64(p.rule.RequestsPerUnit) {
		p.tooMany, hits = true, 0
	}
	return hits
}

// check decides the batch in one CheckBatch. RLS has no per-descriptor
// error, so the first descriptor whose check failed fails the call.
func (s *Server) check(ctx context.Context, reqs []limiter.Request, plans []plan) ([]route.Result, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	results, err := s.cfg.Checker.CheckBatch(ctx, reqs)
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

// assemble folds the decisions into resp: each limited descriptor's
// status and its count in the metrics, the headers of the most
// restrictive one, and the degraded metadata. It reports whether a
// fallback decided any descriptor.
func (s *Server) assemble(resp *rlspb.RateLimitResponse, plans []plan, results []route.Result, b *boundMetrics, dc *domainCounters) bool {
	degraded := false
	hdr := headerPick{i: -1}       // the most restrictive descriptor, for the headers
	var durs []durationpb.Duration // one per descriptor, allocated at the first limited one
	for i, p := range plans {
		r := p.rule
		st := resp.Statuses[i]
		switch {
		case r == nil: // OK, no limit
			continue
		case r.Unlimited:
			st.LimitRemaining = math.MaxUint32
			b.descriptor(dc, r, outcomeUnlimited)
			continue
		}
		d, deg := p.decision(results)
		degraded = degraded || deg
		if durs == nil {
			durs = make([]durationpb.Duration, len(plans))
		}
		outcome := fillStatus(st, p, d, &durs[i])
		if outcome == outcomeOverLimit {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
		b.descriptor(dc, r, outcome)
		if s.cfg.Headers {
			hdr.consider(resp.Statuses, i, d, r.Window)
		}
	}
	if hdr.i >= 0 {
		addHeaders(resp, plans[hdr.i].rule, resp.Statuses[hdr.i], hdr.t)
	}
	if degraded {
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{DegradedKey: structpb.NewBoolValue(true)}}
	}
	return degraded
}

// decision is the decision for planned descriptor p, a limited one, and
// whether a fallback made it.
func (p *plan) decision(results []route.Result) (d limiter.Decision, degraded bool) {
	if p.check >= 0 {
		res := results[p.check]
		d, degraded = res.Decision, res.Degraded
	} else { // requests_per_unit 0: refused without a check
		d = limiter.Decision{RetryAfter: p.rule.Window, ResetAfter: p.rule.Window}
	}
	if p.tooMany {
		// Never allowed, however long one waits: say a window rather
		// than the peek's "now".
		d.RetryAfter = max(d.RetryAfter, p.rule.Window)
	}
	return d, degraded
}

// fillStatus fills st, planned as p, from decision d, with dur as its
// duration until reset, and returns the outcome to count: OVER_LIMIT only
// when over and not in shadow mode.
func fillStatus(st *rlspb.RateLimitResponse_DescriptorStatus, p plan, d limiter.Decision, dur *durationpb.Duration) int {
	r := p.rule
	over := (!d.Allowed || p.tooMany) && !p.refund
	remaining := d.Remaining
	if over {
		remaining = 0
	}
	reset := min(d.ResetAfter, r.Window)
	dur.Seconds, dur.Nanos = int64(reset/time.Second), int32(reset%time.Second)
	st.CurrentLimit, st.DurationUntilReset = r.current, dur
	st.LimitRemaining = uint32(min(max(remaining, 0), math.MaxUint32))
	switch {
	case !over:
		return outcomeOK
	case r.ShadowMode:
		return outcomeShadowMode
	}
	st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	return outcomeOverLimit
}

// headerPick is the descriptor whose limit the headers describe.
type headerPick struct {
	i int   // index of the descriptor; -1: none yet
	t int64 // its ratelimitheader.T
}

// consider makes descriptor i, decided by d, the pick if it is more
// restrictive than the pick so far; sts are the answer's statuses, i's
// already filled.
func (h *headerPick) consider(sts []*rlspb.RateLimitResponse_DescriptorStatus, i int, d limiter.Decision, window time.Duration) {
	// An OVER_LIMIT descriptor wins, the one to wait longest for
	// first (the request passes only when all have room); among
	// the others, the one with the least remaining.
	st := sts[i]
	t := ratelimitheader.T(st.Code == rlspb.RateLimitResponse_OK, d.ResetAfter, d.RetryAfter, window)
	switch {
	case h.i < 0:
		h.i, h.t = i, t
	case st.Code == rlspb.RateLimitResponse_OVER_LIMIT:
		if sts[h.i].Code != rlspb.RateLimitResponse_OVER_LIMIT || t > h.t {
			h.i, h.t = i, t
		}
	case sts[h.i].Code != rlspb.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < sts[h.i].LimitRemaining:
		h.i, h.t = i, t
	}
}

// addHeaders adds the RateLimit-Policy and RateLimit fields of rule r,
// whose descriptor has status st and ratelimitheader.T t, and Retry-After
// when the answer is OVER_LIMIT.
func addHeaders(resp *rlspb.RateLimitResponse, r *Rule, st *rlspb.RateLimitResponse_DescriptorStatus, t int64) {
	resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
		{Key: ratelimitheader.PolicyField, Value: r.policy},
		{Key: ratelimitheader.Field, Value: ratelimitheader.Value(r.header, int64(st.LimitRemaining), t)},
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd,
			&corepb.HeaderValue{Key: ratelimitheader.RetryAfter, Value: strconv.FormatInt(t, 10)})
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
	if now := time.Now().UnixNano(); now-s.lastLog.Load() > int64(time.Second) {
		s.lastLog.Store(now)
		if len(domain) > 64 {
			domain = domain[:64] + "…"
		}
		s.log.Warn("envoy rls: unknown domain; answering OK with no limits", "domain", domain)
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
