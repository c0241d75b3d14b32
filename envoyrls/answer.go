package envoyrls

import (
	"fmt"
	"math"
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/peerlimit/peerlimit/internal/ratelimitheader"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// assemble folds the decisions into resp: each limited descriptor's
// status and its counts in the metrics, the overall code, the headers of
// the most restrictive descriptor and the dynamic metadata. It reports
// whether a fallback decided any descriptor.
func (s *Server) assemble(resp *rlspb.RateLimitResponse, req *rlspb.RateLimitRequest, plans []plan, results []peer.Result, b *boundMetrics, dc *domainCounters) bool {
	degraded := s.statuses(resp, req, plans, results, b, dc)
	s.overallCode(resp, plans, dc)
	if s.cfg.Headers {
		s.headers(resp, plans)
	}
	s.addMetadata(resp, req, plans, degraded)
	return degraded
}

// statuses fills each limited descriptor's status from its decision and
// counts it, and reports whether a fallback decided any.
func (s *Server) statuses(resp *rlspb.RateLimitResponse, req *rlspb.RateLimitRequest, plans []plan, results []peer.Result, b *boundMetrics, dc *domainCounters) bool {
	degraded := false
	var durs []durationpb.Duration // one per descriptor, allocated at the first limited one
	for i := range plans {
		p := &plans[i]
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
		deg := p.decide(results)
		degraded = degraded || deg
		if durs == nil {
			durs = make([]durationpb.Duration, len(plans))
		}
		outcome := fillStatus(st, p, &durs[i])
		b.descriptor(dc, r, outcome)
		b.stats(dc, p, req.GetDescriptors()[i].GetEntries(), outcome != outcomeOK)
	}
	return degraded
}

// decide sets p.d, the decision for planned descriptor p, a limited one,
// and reports whether a fallback made it.
func (p *plan) decide(results []peer.Result) (degraded bool) {
	var d limiter.Decision
	if p.check >= 0 {
		res := results[p.check]
		d, degraded = res.Decision, res.Degraded
	} else { // requests_per_unit 0: refused without a check
		d = limiter.Decision{RetryAfter: p.rule.span(), ResetAfter: p.rule.span()}
	}
	switch {
	case p.tooMany:
		// Never allowed, however long one waits: say a window rather
		// than the peek's "now".
		d.RetryAfter = max(d.RetryAfter, p.rule.span())
	case p.peekOver(d):
		d.RetryAfter = max(d.RetryAfter, p.untilReset(d))
	}
	p.d = d
	return degraded
}

// peekOver reports whether p, a peek (hits 0), finds its limit used up.
// A peek is refused when not one hit is left: envoyproxy/ratelimit
// refuses it only once its count is past the limit, which only its
// counting of refused hits reaches; peerlimit's count stops at the limit
// (saturate), so "used up" is the same state. A quota of N checked by
// peeks and spent after the fact then passes N requests where upstream
// passes N+1.
func (p *plan) peekOver(d limiter.Decision) bool {
	return p.hits == 0 && !p.refund && d.Remaining == 0
}

// over reports whether p, decided, is over its limit, shadow mode or
// not: refused, asking for more than the limit, a peek with nothing left
// or a charge that went past the limit. A refund never is.
func (p *plan) over() bool {
	return (!p.d.Allowed || p.tooMany || p.peekOver(p.d)) && !p.refund
}

// untilReset is duration_until_reset for decision d: the time until the
// hits counted start to leave the window (limiter.Decision.RefillAfter),
// which runs down as the window passes, as upstream's fixed-window
// reset does; the whole window when nothing is counted or the owner did
// not say (an older node).
func (p *plan) untilReset(d limiter.Decision) time.Duration {
	if d.RefillAfter <= 0 || d.RefillAfter > p.rule.span() {
		return p.rule.span()
	}
	return d.RefillAfter
}

// fillStatus fills st, planned and decided as p, with dur as its
// duration until reset, and returns the outcome to count: OVER_LIMIT
// when over and not in shadow mode.
func fillStatus(st *rlspb.RateLimitResponse_DescriptorStatus, p *plan, dur *durationpb.Duration) int {
	r, d := p.rule, p.d
	over := p.over()
	remaining := d.Remaining
	if over {
		remaining = 0
	}
	reset := p.untilReset(d)
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

// overallCode sets the answer's code as envoyproxy/ratelimit does:
// OVER_LIMIT when a descriptor not in quota mode is over, or when the
// request has quota-mode descriptors and every one is over; then, in
// global shadow mode, OK whatever it was (the statuses keep theirs).
func (s *Server) overallCode(resp *rlspb.RateLimitResponse, plans []plan, dc *domainCounters) {
	failed, quota, quotaFailed := 0, 0, 0
	for i, p := range plans {
		if p.rule != nil && p.rule.Unlimited {
			continue
		}
		over := resp.Statuses[i].Code == rlspb.RateLimitResponse_OVER_LIMIT
		switch {
		case s.cfg.QuotaMode || (p.rule != nil && p.rule.QuotaMode):
			quota++
			if over {
				quotaFailed++
			}
		case over:
			failed++
		}
	}
	if failed == 0 && (quota == 0 || quotaFailed < quota) {
		return
	}
	if s.cfg.ShadowMode {
		dc.globalShadow()
		return
	}
	resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
}

// headers adds the fields of the most restrictive descriptor: among
// those over the limit the one that frees last, else the one with the
// least remaining (unlimited and unmatched descriptors never count).
func (s *Server) headers(resp *rlspb.RateLimitResponse, plans []plan) {
	hdr := headerPick{i: -1}
	for i, p := range plans {
		if p.rule != nil && !p.rule.Unlimited {
			hdr.consider(resp.Statuses, i, p.d, p.rule.span())
		}
	}
	if hdr.i >= 0 {
		addHeaders(resp, plans[hdr.i].rule, resp.Statuses[hdr.i], hdr.t)
	}
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

// addMetadata sets the answer's dynamic metadata: the request's, laid out
// as upstream's RESPONSE_DYNAMIC_METADATA, when Config.ResponseMetadata
// asks for it, and peerlimit.degraded when a fallback decided a
// descriptor. Envoy's filter emits it in its namespace,
// envoy.filters.http.ratelimit.
func (s *Server) addMetadata(resp *rlspb.RateLimitResponse, req *rlspb.RateLimitRequest, plans []plan, degraded bool) {
	if !s.cfg.ResponseMetadata && !degraded {
		return
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if s.cfg.ResponseMetadata {
		requestMetadata(md, req, passedMetadata(resp, plans))
	}
	if degraded {
		md.Fields[DegradedKey] = structpb.NewBoolValue(true)
	}
	resp.DynamicMetadata = md
}

// passedMetadata merges, in the request's order, the metadata of the
// rules of the descriptors that passed: not over the limit (a shadow
// mode one that is over passes), not unlimited. Nil when none has any.
func passedMetadata(resp *rlspb.RateLimitResponse, plans []plan) *structpb.Struct {
	var merged *structpb.Struct
	for i, p := range plans {
		r := p.rule
		if r == nil || r.Unlimited || r.Metadata == nil || resp.Statuses[i].Code == rlspb.RateLimitResponse_OVER_LIMIT {
			continue
		}
		if merged == nil {
			merged = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		mergeMetadata(merged, r.Metadata)
	}
	return merged
}

// requestMetadata fills md as upstream does: the domain; per descriptor
// its entries ("key=value"), its own limit and its hits_addend when set;
// the request's hits_addend when not 0; the passing descriptors' merged
// metadata when there is any.
func requestMetadata(md *structpb.Struct, req *rlspb.RateLimitRequest, merged *structpb.Struct) {
	md.Fields["domain"] = structpb.NewStringValue(req.GetDomain())
	descs := make([]*structpb.Value, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		f := map[string]*structpb.Value{}
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			entries[j] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
		if l := d.GetLimit(); l != nil {
			// Upstream sends the override's protobuf text, whose spacing
			// protobuf-go varies on purpose; this is that text, stable.
			f["limit"] = structpb.NewStringValue(fmt.Sprintf("requests_per_unit:%d unit:%s", l.GetRequestsPerUnit(), l.GetUnit()))
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs[i] = structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	md.Fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		md.Fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if merged != nil {
		md.Fields["metadata"] = structpb.NewStructValue(merged)
	}
}
