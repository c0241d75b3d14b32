package envoyrls

import (
	"context"
	"strconv"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// opsConfig has the peerlimit extensions: charge_over_limit on a domain
// and on descriptors, and all_or_nothing.
const opsConfig = `domain: usage
descriptors:
  - key: tokens
    charge_over_limit: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: exact
    charge_over_limit: true
    algorithm: SLIDING_WINDOW_LOG
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
---
domain: ai
charge_over_limit: true
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: free
    charge_over_limit: false
    rate_limit: {unit: minute, requests_per_unit: 10}
---
domain: bundle
all_or_nothing: true
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: org
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: spent
    charge_over_limit: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
`

// hitsOf is d with hits_addend n.
func hitsOf(d *rlscommon.RateLimitDescriptor, n uint64) *rlscommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// refundOf is d refunding n hits (is_negative_hits).
func refundOf(d *rlscommon.RateLimitDescriptor, n uint64) *rlscommon.RateLimitDescriptor {
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(n), true
	return d
}

// answerOf is the answer's overall code and each status's code and
// remaining, as "OK: OK/7 OVER_LIMIT/0".
func answerOf(resp *rlspb.RateLimitResponse) string {
	s := resp.GetOverallCode().String() + ":"
	for _, st := range resp.GetStatuses() {
		s += " " + st.GetCode().String() + "/" + strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)
	}
	return s
}

// toMinute moves c to the start of the next minute, plus offset.
func toMinute(c interface {
	Now() time.Time
	Advance(time.Duration)
}, offset time.Duration) {
	now := c.Now()
	c.Advance(now.Truncate(time.Minute).Add(time.Minute + offset).Sub(now))
}

// charge_over_limit: usage reported after the fact (a stream's tokens) is
// counted whole, past the limit: a debt that keeps the key OVER_LIMIT
// until the window has absorbed it. A peek stays a peek.
func TestChargeOverLimitIsDebt(t *testing.T) {
	h := newHarnessFor(t, opsConfig, nil)
	toMinute(h.clk, 0)
	peek := func() *rlscommon.RateLimitDescriptor { return hitsOf(desc("tokens=u1"), 0) }
	used := func(n uint64) *rlscommon.RateLimitDescriptor { return hitsOf(desc("tokens=u1"), n) }
	assert.Equal(t, "OK: OK/100", answerOf(h.call(t, "usage", peek())))
	assert.Equal(t, "OK: OK/30", answerOf(h.call(t, "usage", used(70))))
	assert.Equal(t, "OK: OK/30", answerOf(h.call(t, "usage", peek())))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "usage", used(70))), "charged, and over: 140 of 100")
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "usage", peek())))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "usage", used(1))), "a charge is counted whatever")
	// Statistics: 70 within, then of the 70 charged from 70, 20 near
	// (80 to 100) and 40 over; then 1 over.
	stat := func(name string) float64 {
		return h.metric(t, "ratelimit_service_rate_limit_"+name, "domain", "usage", "key1", "tokens", "key2", "")
	}
	assert.Equal(t, 141.0, stat("total_hits"))
	assert.Equal(t, 41.0, stat("over_limit"))
	assert.Equal(t, 20.0, stat("near_limit"))

	// The window absorbs the debt: 141 in the last minute weigh 141 ×
	// (60 − e)/60 e seconds into the next, under 100 from e = 18 s.
	h.clk.Advance(time.Minute + 10*time.Second)
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "usage", peek())), "117 still weigh")
	h.clk.Advance(20 * time.Second)
	resp := h.call(t, "usage", peek())
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode(), "70 weigh: %s", answerOf(resp))
	assert.InDelta(t, 30, resp.GetStatuses()[0].GetLimitRemaining(), 1)

	// The exact log keeps the debt as entries (up to twice the limit):
	// 8 charged at once leave the window together.
	exact := func(n uint64) *rlscommon.RateLimitDescriptor { return hitsOf(desc("exact=e"), n) }
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "usage", exact(8))))
	h.clk.Advance(59 * time.Second)
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "usage", exact(0))))
	h.clk.Advance(time.Second)
	assert.Equal(t, "OK: OK/4", answerOf(h.call(t, "usage", exact(1))))

	// Without the extension a refused request counts nothing but the
	// room it found (the count stops at the limit).
	plain := func(n uint64) *rlscommon.RateLimitDescriptor { return hitsOf(desc("plain=p"), n) }
	assert.Equal(t, "OK: OK/1", answerOf(h.call(t, "usage", plain(9))))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "usage", plain(2))))
	assert.Equal(t, "OK: OK/1", answerOf(h.call(t, "usage", refundOf(desc("plain=p"), 1))), "10 counted, not 11")
}

// A domain's charge_over_limit charges every descriptor of it, a
// request's own limit included, but one that says false.
func TestChargeOverLimitOnADomain(t *testing.T) {
	h := newHarnessFor(t, opsConfig, nil)
	toMinute(h.clk, 0)
	assert.Equal(t, "OK: OK/1", answerOf(h.call(t, "ai", hitsOf(desc("tokens=t"), 9))))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "ai", hitsOf(desc("tokens=t"), 2))))
	assert.Equal(t, "OK: OK/0", answerOf(h.call(t, "ai", refundOf(desc("tokens=t"), 1))), "11 were counted: 10 after a refund of 1")
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "ai", hitsOf(desc("tokens=t2"), 25))), "more than the limit: charged all the same")
	assert.Equal(t, "OK: OK/0", answerOf(h.call(t, "ai", refundOf(desc("tokens=t2"), 15))))

	assert.Equal(t, "OK: OK/1", answerOf(h.call(t, "ai", hitsOf(desc("free=f"), 9))))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "ai", hitsOf(desc("free=f"), 2))))
	assert.Equal(t, "OK: OK/1", answerOf(h.call(t, "ai", refundOf(desc("free=f"), 1))), "charge_over_limit: false: 10 counted, not 11")

	own := hitsOf(desc("tokens=o"), 7)
	own.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typepb.RateLimitUnit_HOUR}
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, "ai", own)))
	back := refundOf(desc("tokens=o"), 2)
	back.Limit = own.Limit
	assert.Equal(t, "OK: OK/0", answerOf(h.call(t, "ai", back)), "7 were counted: 5 after a refund of 2")
}

// countAll counts the calls of CheckAll.
type countAll struct {
	Checker
	all int
}

func (c *countAll) CheckAll(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error) {
	c.all++
	return c.Checker.CheckAll(ctx, reqs)
}

// all_or_nothing: a request's checks count all or none; none when any
// one is over, or when the answer is OVER_LIMIT for another descriptor.
func TestAllOrNothing(t *testing.T) {
	h := newHarnessFor(t, opsConfig, nil)
	cc := &countAll{Checker: h.srv.d.Checker}
	h.srv.d.Checker = cc
	toMinute(h.clk, 0)
	const b = "bundle"
	peek := func(kv string) string { return answerOf(h.call(t, b, hitsOf(desc(kv), 0))) }
	for i := range 3 {
		assert.Equal(t, "OK", h.call(t, b, desc("user=u1"), desc("org=o1")).GetOverallCode().String(), "request %d", i+1)
	}
	assert.Equal(t, 3, cc.all, "two checks: CheckAll")
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0 OVER_LIMIT/0", answerOf(h.call(t, b, desc("user=u1"), desc("org=o1"))),
		"the user is over, so the org's hit is refused too")
	assert.Equal(t, "OK: OK/2", peek("org=o1"), "3 counted, not 4")

	// Refused by a peek with nothing left: the admitted checks are given back.
	h.call(t, b, hitsOf(desc("tokens=t"), 100))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0 OVER_LIMIT/0 OVER_LIMIT/0",
		answerOf(h.call(t, b, desc("user=u2"), desc("org=o2"), hitsOf(desc("tokens=t"), 0))))
	assert.Equal(t, "OK: OK/3", peek("user=u2"))
	assert.Equal(t, "OK: OK/5", peek("org=o2"))

	// Refused for more hits than a limit, or by requests_per_unit 0:
	// nothing counted, nothing saturated.
	h.call(t, b, desc("user=u3"), hitsOf(desc("org=o3"), 6))
	assert.Equal(t, "OK: OK/3", peek("user=u3"))
	assert.Equal(t, "OK: OK/5", peek("org=o3"), "not saturated")
	h.call(t, b, desc("user=u4"), desc("blocked=x"))
	assert.Equal(t, "OK: OK/3", peek("user=u4"))

	// One check alone is all or nothing by itself: refused, it takes no
	// room (elsewhere it would saturate).
	n := cc.all
	h.call(t, b, hitsOf(desc("user=u5"), 2))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0", answerOf(h.call(t, b, hitsOf(desc("user=u5"), 2))))
	assert.Equal(t, "OK: OK/1", peek("user=u5"))
	assert.Equal(t, n, cc.all, "one check: no CheckAll")

	// Shadow mode never refuses: the checks count.
	h.call(t, b, desc("shadow=s"))
	assert.Equal(t, "OK: OK/2 OK/0", answerOf(h.call(t, b, desc("user=u6"), desc("shadow=s"))))
	assert.Equal(t, "OK: OK/2", peek("user=u6"))

	// Quota mode: refused when every quota-mode descriptor is over.
	h.call(t, b, desc("quota=q"))
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0 OVER_LIMIT/0", answerOf(h.call(t, b, desc("user=u7"), desc("quota=q"))))
	assert.Equal(t, "OK: OK/3", peek("user=u7"))

	// A charge is counted whatever; when it goes over, the answer is
	// OVER_LIMIT and the checks are given back. Unlimited descriptors
	// change nothing.
	assert.Equal(t, "OVER_LIMIT: OVER_LIMIT/0 OVER_LIMIT/0 OK/4294967295",
		answerOf(h.call(t, b, desc("user=u8"), hitsOf(desc("spent=x"), 150), desc("free=f"))))
	assert.Equal(t, "OK: OK/3", peek("user=u8"))
	assert.Equal(t, "OK: OK/0", answerOf(h.call(t, b, refundOf(desc("spent=x"), 50))), "150 charged")
	assert.Equal(t, "OK: OK/2 OK/4294967295", answerOf(h.call(t, b, desc("user=u9"), desc("free=f"))))

	// A refund in the domain is applied, whatever the checks beside it.
	assert.Equal(t, "OK: OK/2", peek("user=u9"))
	assert.Equal(t, "OK: OK/3", answerOf(h.call(t, b, refundOf(desc("user=u9"), 1))))
}
