package envoyrls

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

const serviceConfig = `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        algorithm: SLIDING_WINDOW_LOG
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
---
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: burst
    algorithm: SLIDING_WINDOW_LOG
    rate_limit: {unit: second, requests_per_unit: 3, unit_multiplier: 30}
  - key: service
    descriptors:
      - key: user
        value: user-a
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: user
        value: user-b
        rate_limit: {unit: second, requests_per_unit: 2}
---
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
---
domain: upstream
descriptors:
  - key: service
    value: service_*
    quota_mode: true
    share_threshold: true
    value_to_metric: true
    metadata: {service_with_quota: {name: any}}
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: unspec
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: route
    value_to_metric: true
    descriptors:
      - key: m*
        rate_limit: {unit: minute, requests_per_unit: 3}
`

type harness struct {
	srv   *Server
	clk   *fakeclock.Clock
	store *limiter.Store
	reg   *prometheus.Registry
}

// serverOpts are a Server's config and deps, in one struct tests edit.
type serverOpts struct {
	Config
	ServerDeps
}

func newHarness(t testing.TB, edit func(*serverOpts)) *harness {
	t.Helper()
	return newHarnessFor(t, serviceConfig, edit)
}

// newHarnessFor is newHarness serving the configuration yml.
func newHarnessFor(t testing.TB, yml string, edit func(*serverOpts)) *harness {
	t.Helper()
	cfg, err := Parse("rls.yaml", []byte(yml), storeCheck(t))
	require.NoError(t, err)
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	clk := fakeclock.AtMilli(1_700_000_000_000)
	svc, err := route.NewService(route.DefaultConfig(), route.Deps{NodeID: "n1", Store: store, Now: clk.Now})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, DefaultConfig())
	require.NoError(t, err)
	o := serverOpts{DefaultConfig(), ServerDeps{Rules: StaticRegistry(cfg), Checker: svc, Validate: store.Validate, MaxKeyBytes: 1024, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), nil))}}
	if edit != nil {
		edit(&o)
	}
	srv, err := NewServer(o.Config, o.ServerDeps)
	require.NoError(t, err)
	return &harness{srv: srv, clk: clk, store: store, reg: reg}
}

// desc builds a descriptor from "k=v" entries.
func desc(kvs ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func (h *harness) call(t testing.TB, domain string, ds ...*rlscommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := h.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds})
	require.NoError(t, err)
	require.Len(t, resp.GetStatuses(), len(ds))
	return resp
}

func (h *harness) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return metrictest.Value(t, h.reg, name, labels...)
}

func limitOf(rpu uint32, unit Unit) *rlspb.RateLimitResponse_RateLimit {
	return &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit}
}

// The README's messaging example: one request, two descriptors, a nested
// one on a log and the wildcard one on the counter; each descriptor's
// status, and the overall code once the nested one is over.
func TestNestedDescriptorsAndOverallCode(t *testing.T) {
	h := newHarness(t, nil)
	marketing := desc("message_type=marketing", "to_number=2061111111")
	anyMsg := desc("to_number=2061111111")
	for i := range 5 {
		resp := h.call(t, "messaging", marketing, anyMsg)
		require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode(), "call %d", i)
		s0, s1 := resp.GetStatuses()[0], resp.GetStatuses()[1]
		assert.Equal(t, rlspb.RateLimitResponse_OK, s0.GetCode())
		assert.Equal(t, uint32(4-i), s0.GetLimitRemaining())
		assert.True(t, sameLimit(t, limitOf(5, rlspb.RateLimitResponse_RateLimit_DAY), s0.GetCurrentLimit()))
		assert.Equal(t, uint32(99-i), s1.GetLimitRemaining())
		assert.True(t, sameLimit(t, limitOf(100, rlspb.RateLimitResponse_RateLimit_DAY), s1.GetCurrentLimit()))
		// The log's first hit leaves the window a day after it came.
		assert.Equal(t, 24*time.Hour-time.Duration(i)*time.Second, s0.GetDurationUntilReset().AsDuration())
		h.clk.Advance(time.Second)
	}
	resp := h.call(t, "messaging", marketing, anyMsg)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetStatuses()[0].GetCode())
	assert.Zero(t, resp.GetStatuses()[0].GetLimitRemaining())
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetStatuses()[1].GetCode())
	assert.Equal(t, uint32(94), resp.GetStatuses()[1].GetLimitRemaining(), "a descriptor under its limit consumes its hit even when another is over, as upstream")

	// Another number is another counter; a descriptor that matches
	// nothing is OK without a limit.
	resp = h.call(t, "messaging", desc("message_type=marketing", "to_number=2062222222"), desc("message_type=transactional", "to_number=1"))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	assert.Equal(t, uint32(4), resp.GetStatuses()[0].GetLimitRemaining())
	assert.Equal(t, &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}, resp.GetStatuses()[1])

	assert.Equal(t, 6.0, h.metric(t, "peerlimit_envoy_rls_requests_total", "domain", "messaging", "code", "OK"))
	assert.Equal(t, 1.0, h.metric(t, "peerlimit_envoy_rls_requests_total", "domain", "messaging", "code", "OVER_LIMIT"))
	assert.Equal(t, 1.0, h.metric(t, "peerlimit_envoy_rls_descriptors_total", "domain", "messaging", "rule", "message_type_marketing.to_number", "outcome", "over_limit"))
	assert.Equal(t, 6.0, h.metric(t, "peerlimit_envoy_rls_descriptors_total", "domain", "messaging", "rule", "message_type_marketing.to_number", "outcome", "ok"))
}

func sameLimit(t testing.TB, want, got *rlspb.RateLimitResponse_RateLimit) bool {
	t.Helper()
	return assert.Equal(t, want.String(), got.String())
}

// A log over 30 s (unit_multiplier) is exact and slides: the 4th hit in
// the window is refused, and one comes back when the first hit leaves it.
func TestUnitMultiplierWindowSlides(t *testing.T) {
	h := newHarness(t, nil)
	burst := desc("burst=client-1")
	for range 3 {
		assert.Equal(t, rlspb.RateLimitResponse_OK, h.call(t, "edge", burst).GetOverallCode())
		h.clk.Advance(10 * time.Second)
	}
	resp := h.call(t, "edge", burst) // t=30s: the first hit (t=0) is out at t=30s exactly: (T−W, T]
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	resp = h.call(t, "edge", burst)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
	st := resp.GetStatuses()[0]
	assert.Equal(t, uint32(30), st.GetCurrentLimit().GetUnitMultiplier().GetValue())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_SECOND, st.GetCurrentLimit().GetUnit())
	assert.Equal(t, uint32(3), st.GetCurrentLimit().GetRequestsPerUnit())
	h.clk.Advance(10 * time.Second)
	assert.Equal(t, rlspb.RateLimitResponse_OK, h.call(t, "edge", burst).GetOverallCode())
}

func TestHitsAddend(t *testing.T) {
	h := newHarness(t, nil)
	call := func(reqHits uint32, d *rlscommon.RateLimitDescriptor) *rlspb.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := h.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d}, HitsAddend: reqHits})
		require.NoError(t, err)
		return resp.GetStatuses()[0]
	}
	ip := func() *rlscommon.RateLimitDescriptor { return desc("remote_address=1.2.3.4") }
	assert.Equal(t, uint32(9), call(0, ip()).GetLimitRemaining(), "0 is unset: one hit")
	assert.Equal(t, uint32(6), call(3, ip()).GetLimitRemaining(), "the request's hits_addend")
	d := ip()
	d.HitsAddend = wrapperspb.UInt64(2)
	assert.Equal(t, uint32(4), call(3, d).GetLimitRemaining(), "the descriptor's beats the request's")
	d.HitsAddend = wrapperspb.UInt64(0)
	st := call(3, d)
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode())
	assert.Equal(t, uint32(4), st.GetLimitRemaining(), "a descriptor's explicit 0 peeks")

	// More than the limit can never pass: OVER_LIMIT, and what was left
	// is used up, as upstream, which counts every hit.
	d.HitsAddend = wrapperspb.UInt64(11)
	st = call(0, d)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, st.GetCode())
	assert.Zero(t, st.GetLimitRemaining())
	d.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(0, d).GetCode())
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(0, ip()).GetCode(), "the refused hits took what was left")
	d.HitsAddend = wrapperspb.UInt64(0)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(0, d).GetCode(), "a peek finds nothing left")

	// is_negative_hits refunds its hits (never below what the window
	// holds, never credit), and is never refused; with hits 0, a peek.
	other := func() *rlscommon.RateLimitDescriptor { return desc("remote_address=5.6.7.8") }
	refund := func(n uint64) *rlscommon.RateLimitDescriptor {
		d := other()
		d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(n), true
		return d
	}
	st = call(0, refund(3))
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode())
	assert.Equal(t, uint32(10), st.GetLimitRemaining(), "nothing counted: nothing to give back, and no credit")
	assert.Equal(t, uint32(1), call(9, other()).GetLimitRemaining())
	st = call(0, refund(3))
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode())
	assert.Equal(t, uint32(4), st.GetLimitRemaining(), "3 of the 9 given back")
	assert.Equal(t, uint32(0), call(4, other()).GetLimitRemaining(), "and used again")
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(1, other()).GetCode())
	st = call(0, refund(0))
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode(), "a refund of nothing peeks, and is never refused")
	assert.Equal(t, uint32(0), st.GetLimitRemaining(), "and gives back nothing")
	noHits := other()
	noHits.IsNegativeHits = true
	assert.Equal(t, uint32(1), call(0, noHits).GetLimitRemaining(), "hits_addend unset: one hit, given back")
	total := func() float64 {
		return h.metric(t, "ratelimit_service_rate_limit_total_hits", "domain", "edge", "key1", "remote_address", "key2", "")
	}
	before := total()
	st = call(0, refund(math.MaxUint64))
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode())
	assert.Equal(t, uint32(10), st.GetLimitRemaining(), "everything given back, and no more")
	assert.Equal(t, before, total(), "a refund adds no hits to the statistics")
	assert.Equal(t, uint32(0), call(10, other()).GetLimitRemaining(), "no credit: 10 fit, not 11")
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, call(1, other()).GetCode())
}

// A single hit refused consumes nothing: a client retrying while refused
// is not locked out longer. (The log makes it exact: one hit leaving
// frees exactly one.)
func TestRefusedHitsAreNotCounted(t *testing.T) {
	h := newHarness(t, nil)
	burst := desc("burst=client-2") // a log, 3 per 30 s
	for range 3 {
		assert.Equal(t, rlspb.RateLimitResponse_OK, h.call(t, "edge", burst).GetOverallCode())
	}
	h.clk.Advance(time.Second)
	for range 20 {
		assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, h.call(t, "edge", burst).GetOverallCode())
	}
	h.clk.Advance(29 * time.Second) // the three hits leave at t=30 s
	for range 3 {
		assert.Equal(t, rlspb.RateLimitResponse_OK, h.call(t, "edge", burst).GetOverallCode())
	}
}

// A request's own limit replaces the configuration's, shadow mode
// included, keyed by the descriptor so that overrides of one window share
// the count and another window is another count.
func TestLimitOverride(t *testing.T) {
	h := newHarness(t, nil)
	over := func(rpu uint32, unit typepb.RateLimitUnit, mult uint32) *rlscommon.RateLimitDescriptor {
		d := desc("remote_address=9.9.9.9")
		d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		if mult > 0 {
			d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		return d
	}
	st := h.call(t, "edge", over(2, typepb.RateLimitUnit_MINUTE, 0)).GetStatuses()[0]
	assert.True(t, sameLimit(t, limitOf(2, rlspb.RateLimitResponse_RateLimit_MINUTE), st.GetCurrentLimit()))
	assert.Equal(t, uint32(1), st.GetLimitRemaining())
	assert.Equal(t, uint32(2), h.call(t, "edge", over(4, typepb.RateLimitUnit_MINUTE, 0)).GetStatuses()[0].GetLimitRemaining(),
		"same window: the same count, under the new limit")
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, h.call(t, "edge", over(2, typepb.RateLimitUnit_MINUTE, 0)).GetOverallCode())
	st = h.call(t, "edge", over(2, typepb.RateLimitUnit_HOUR, 0)).GetStatuses()[0]
	assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode(), "another window is another count")
	st = h.call(t, "edge", over(2, typepb.RateLimitUnit_MINUTE, 5)).GetStatuses()[0]
	assert.Equal(t, uint32(5), st.GetCurrentLimit().GetUnitMultiplier().GetValue())
	assert.Equal(t, uint32(1), st.GetLimitRemaining())

	// The configured rule (10/s) was never touched.
	assert.Equal(t, uint32(9), h.call(t, "edge", desc("remote_address=9.9.9.9")).GetStatuses()[0].GetLimitRemaining())
	// A shadow-mode rule overridden is enforced.
	d := desc("service=s", "user=user-a")
	d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_HOUR}
	h.call(t, "edge", d)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, h.call(t, "edge", d).GetOverallCode())
	// An override needs no matching rule; 0 refuses.
	d = desc("not_configured=x")
	d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: typepb.RateLimitUnit_SECOND}
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, h.call(t, "edge", d).GetOverallCode())
	assert.Equal(t, 3.0, h.metric(t, "peerlimit_envoy_rls_descriptors_total", "domain", "edge", "rule", "override", "outcome", "over_limit"))
}

func TestShadowModeReportsWithoutDenying(t *testing.T) {
	h := newHarness(t, nil)
	a, b := desc("service=s", "user=user-a"), desc("service=s", "user=user-b")
	for range 2 {
		assert.Equal(t, rlspb.RateLimitResponse_OK, h.call(t, "edge", a, b).GetOverallCode())
	}
	for range 3 {
		resp := h.call(t, "edge", a)
		assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode(), "shadow mode never denies")
		st := resp.GetStatuses()[0]
		assert.Equal(t, rlspb.RateLimitResponse_OK, st.GetCode())
		assert.Zero(t, st.GetLimitRemaining(), "but reports the limit as spent")
		assert.Equal(t, uint32(2), st.GetCurrentLimit().GetRequestsPerUnit())
	}
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, h.call(t, "edge", b).GetOverallCode(), "user-b is enforced")
	assert.Equal(t, 3.0, h.metric(t, "peerlimit_envoy_rls_descriptors_total", "domain", "edge", "rule", "service.user_user-a", "outcome", "shadow_mode"))
	assert.Equal(t, 1.0, h.metric(t, "peerlimit_envoy_rls_descriptors_total", "domain", "edge", "rule", "service.user_user-b", "outcome", "over_limit"))
	// The shadowed count stays at the limit: once enforced, the key is
	// limited as it would have been.
	assert.Equal(t, int64(2), h.peek(t, "edge", a, 2, time.Second).CurrentCount)
}

// peek reads a descriptor's state straight from the store.
func (h *harness) peek(t testing.TB, domain string, d *rlscommon.RateLimitDescriptor, limit int64, window time.Duration) limiter.Decision {
	t.Helper()
	dec, err := h.store.Check(h.clk.Now(), limiter.Request{Key: Key(domain, d.GetEntries(), 1024), Limit: limit, Window: window})
	require.NoError(t, err)
	return dec
}

func TestUnlimitedBlockedReplacedAndUnknown(t *testing.T) {
	h := newHarness(t, nil)
	resp := h.call(t, "edge", desc("ldap=x"))
	assert.Equal(t, &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}, resp.GetStatuses()[0])
	assert.Equal(t, 1.0, h.metric(t, "peerlimit_envoy_rls_descriptors_total", "rule", "ldap", "outcome", "unlimited"))

	// requests_per_unit 0 refuses everything, and stores nothing.
	for range 2 {
		resp = h.call(t, "edge", desc("remote_address=50.0.0.5"))
		assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
		assert.Equal(t, uint32(0), resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
		assert.Equal(t, time.Second, resp.GetStatuses()[0].GetDurationUntilReset().AsDuration())
	}
	assert.Zero(t, h.store.Stats().CounterKeys+h.store.Stats().LogKeys, "unlimited and blocked descriptors keep no state")

	// Example 7: with both rules matched, the named one is replaced.
	k1, k2 := desc("key_1=value_1", "user=bkthomps"), desc("key_2=value_2", "user=bkthomps")
	resp = h.call(t, "example7", k1, k2)
	assert.Equal(t, &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}, resp.GetStatuses()[0], "replaced: no limit")
	assert.Equal(t, uint32(9), resp.GetStatuses()[1].GetLimitRemaining())
	assert.Equal(t, uint32(4), h.call(t, "example7", k1).GetStatuses()[0].GetLimitRemaining(), "alone, it applies")

	// A domain without configuration limits nothing (as upstream).
	resp = h.call(t, "nope", desc("remote_address=50.0.0.5"))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	assert.Nil(t, resp.GetStatuses()[0].GetCurrentLimit())
	assert.Equal(t, 1.0, h.metric(t, "peerlimit_envoy_rls_requests_total", "domain", "(unknown)", "code", "OK"))
}

func TestInvalidRequests(t *testing.T) {
	h := newHarness(t, func(c *serverOpts) { c.Checker = smallBatch{c.Checker, 3} })
	d := desc("remote_address=1")
	badUnit := desc("remote_address=1")
	badUnit.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	zeroMult := desc("remote_address=1")
	zeroMult.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0)}
	tooLong := desc("remote_address=1")
	tooLong.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typepb.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(2)}
	for _, c := range []struct {
		req   *rlspb.RateLimitRequest
		code  codes.Code
		field string
	}{
		{&rlspb.RateLimitRequest{Descriptors: []*rlscommon.RateLimitDescriptor{d}}, codes.InvalidArgument, "domain"},
		{&rlspb.RateLimitRequest{Domain: "edge"}, codes.InvalidArgument, "descriptors"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d, {}}}, codes.InvalidArgument, "descriptors[1].entries"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("=v")}}, codes.InvalidArgument, "descriptors[0].entries[0].key"},
		{&rlspb.RateLimitRequest{Domain: "nope", Descriptors: []*rlscommon.RateLimitDescriptor{desc("a=b", "=v")}}, codes.InvalidArgument, "descriptors[0].entries[1].key"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d, d, d, d}}, codes.ResourceExhausted, ""},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{badUnit}}, codes.InvalidArgument, "descriptors[0].limit.unit"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{d, zeroMult}}, codes.InvalidArgument, "descriptors[1].limit.unit_multiplier"},
		{&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{tooLong}}, codes.InvalidArgument, "descriptors[0]"},
	} {
		resp, err := h.srv.ShouldRateLimit(context.Background(), c.req)
		assert.Nil(t, resp)
		st := status.Convert(err)
		assert.Equal(t, c.code, st.Code(), "%v: %v", c.req, err)
		if c.field != "" {
			require.Len(t, st.Details(), 1, "%v", err)
			br := st.Details()[0].(*errdetails.BadRequest)
			assert.Equal(t, c.field, br.GetFieldViolations()[0].GetField(), "%v", err)
			assert.Contains(t, st.Message(), "invalid "+c.field)
		}
	}
	assert.Zero(t, h.store.Stats().CounterKeys, "nothing was counted")
	assert.Equal(t, 9.0, h.metric(t, "peerlimit_envoy_rls_requests_total", "code", "ERROR", "domain", "edge")+
		h.metric(t, "peerlimit_envoy_rls_requests_total", "code", "ERROR", "domain", "(unknown)"))
}

type smallBatch struct {
	Checker
	n int
}

// BatchTooLarge is a route.Service's with MaxBatch n.
func (s smallBatch) BatchTooLarge(what string, n int) error {
	if n <= s.n {
		return nil
	}
	return fmt.Errorf("%s: %d items; the maximum is %d: %w", what, n, s.n, route.ErrBatchTooLarge)
}

// A check that fails (here: the store is full) fails the call, naming the
// descriptor, with the check's code.
func TestCheckErrorFailsTheCall(t *testing.T) {
	h := newHarness(t, nil)
	cfg := limiter.DefaultConfig()
	cfg.MaxKeys, cfg.Overflow = 1, limiter.OverflowReject
	full, err := limiter.New(cfg, 1)
	require.NoError(t, err)
	svc, err := route.NewService(route.DefaultConfig(), route.Deps{NodeID: "n1", Store: full, Now: h.clk.Now})
	require.NoError(t, err)
	srv, err := NewServer(DefaultConfig(), ServerDeps{Rules: h.srv.d.Rules, Checker: svc, MaxKeyBytes: 1024})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = srv.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("remote_address=1")}})
	require.NoError(t, err)
	_, err = srv.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("ldap=x"), desc("remote_address=2")}})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "descriptors[1]: ")
}

func headers(resp *rlspb.RateLimitResponse) map[string]string {
	out := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		out[h.GetKey()] = h.GetValue()
	}
	return out
}

func TestHeaders(t *testing.T) {
	h := newHarness(t, func(c *serverOpts) { c.Headers = true })
	ip, burst := desc("remote_address=1.2.3.4"), desc("burst=c")
	resp := h.call(t, "edge", ip, burst)
	// The most restrictive: burst has 2 of 3 left, the address 9 of 10.
	assert.Equal(t, map[string]string{"RateLimit-Policy": `"burst";q=3;w=30`, "RateLimit": `"burst";r=2;t=30`}, headers(resp))
	h.clk.Advance(10 * time.Second)
	h.call(t, "edge", burst)
	h.clk.Advance(5 * time.Second)
	h.call(t, "edge", burst)
	resp = h.call(t, "edge", ip, burst)
	// Over: the burst log frees a hit 15 s from now (the first at t=0).
	assert.Equal(t, map[string]string{"RateLimit-Policy": `"burst";q=3;w=30`, "RateLimit": `"burst";r=0;t=15`, "Retry-After": "15"}, headers(resp))

	// More hits than the limit never pass: a window, not "now".
	tooMany := desc("remote_address=9.9.9.9")
	tooMany.HitsAddend = wrapperspb.UInt64(11)
	assert.Equal(t, "1", headers(h.call(t, "edge", tooMany))["Retry-After"], "the address's window is 1 s")
	tooMany = desc("burst=other")
	tooMany.HitsAddend = wrapperspb.UInt64(4)
	assert.Equal(t, "30", headers(h.call(t, "edge", tooMany))["Retry-After"])

	// Unlimited and unmatched descriptors never make headers.
	assert.Empty(t, headers(h.call(t, "edge", desc("ldap=x"), desc("nothing=here"))))
	// Two over: the longer wait wins.
	blocked := desc("remote_address=50.0.0.5")
	resp = h.call(t, "edge", blocked)
	assert.Equal(t, `"remote_address_50.0.0.5";r=0;t=1`, headers(resp)["RateLimit"], "the blocked address: a 1 s window")
	resp = h.call(t, "edge", blocked, burst)
	assert.Equal(t, `"burst";r=0;t=15`, headers(resp)["RateLimit"], "over twice: the longer wait")
	assert.Equal(t, "15", headers(resp)["Retry-After"])
	h.clk.Advance(14 * time.Second)
	resp = h.call(t, "edge", burst, blocked)
	assert.Equal(t, "1", headers(resp)["Retry-After"])

	// Off: nothing.
	off := newHarness(t, nil)
	assert.Empty(t, off.call(t, "edge", ip).GetResponseHeadersToAdd())
}

func TestHeaderValuesAreEnvoyHeaderValues(t *testing.T) {
	h := newHarness(t, func(c *serverOpts) { c.Headers = true })
	resp := h.call(t, "edge", desc("remote_address=1.2.3.4"))
	for _, hv := range resp.GetResponseHeadersToAdd() {
		require.NoError(t, (&corepb.HeaderValue{Key: hv.GetKey(), Value: hv.GetValue()}).Validate(), "Envoy's own validation")
	}
}

// The counters of a configuration are resolved once: counting allocates
// nothing and looks nothing up.
func TestMetricsBindOncePerConfig(t *testing.T) {
	h := newHarness(t, nil)
	cfg := h.srv.d.Rules.Current()
	b1 := h.srv.d.Metrics.bind(cfg)
	assert.Same(t, b1, h.srv.d.Metrics.bind(cfg))
	other, err := Parse("o.yaml", []byte("domain: edge\ndescriptors: []\n"), LoadOptions{})
	require.NoError(t, err)
	b2 := h.srv.d.Metrics.bind(other)
	assert.NotSame(t, b1, b2)
	assert.NotNil(t, b2.domain(other.Domain("edge")))
	assert.Same(t, b2.unknown, b2.domain(nil))
	var nilM *Metrics
	assert.Nil(t, nilM.bind(cfg))
}

type degradeAll struct{ Checker }

func (d degradeAll) CheckBatch(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error) {
	res, err := d.Checker.CheckBatch(ctx, reqs)
	for i := range res {
		res[i].Degraded = true
	}
	return res, err
}

// An answer the fallback policy gave is flagged in the dynamic metadata
// and counted; others carry no metadata at all.
func TestDegradedAnswersAreFlagged(t *testing.T) {
	h := newHarness(t, nil)
	assert.Nil(t, h.call(t, "edge", desc("remote_address=1")).GetDynamicMetadata())
	h.srv.d.Checker = degradeAll{h.srv.d.Checker}
	resp := h.call(t, "edge", desc("remote_address=1"))
	assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	assert.True(t, resp.GetDynamicMetadata().GetFields()[DegradedKey].GetBoolValue())
	assert.Nil(t, h.call(t, "edge", desc("ldap=1")).GetDynamicMetadata(), "nothing was checked")
	assert.Equal(t, 1.0, h.metric(t, "peerlimit_envoy_rls_degraded_total", "domain", "edge"))
}

// idOf records the request id the checks of a call carry.
type idOf struct {
	Checker
	got string
}

func (c *idOf) CheckBatch(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error) {
	c.got = peer.RequestIDFrom(ctx)
	return c.Checker.CheckBatch(ctx, reqs)
}

// Envoy's x-request-id goes with the call's checks, so that the nodes'
// log lines about them (a forward, the owner's refusal) name it.
func TestEnvoyRequestIDReachesTheChecks(t *testing.T) {
	h := newHarness(t, nil)
	ids := &idOf{Checker: h.srv.d.Checker}
	h.srv.d.Checker = ids
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "envoy-7"))
	_, err := h.srv.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{desc("remote_address=1")}})
	require.NoError(t, err)
	assert.Equal(t, "envoy-7", ids.got)
}
