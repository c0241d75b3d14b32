package envoyrls

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

// FuzzParseConfig: whatever the file holds, Parse returns, and either
// every error is an *Error naming the file, or every rule it accepts is
// one the node can serve and matching any descriptor is safe.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		upstreamExamples,
		matchConfig,
		"domain: a\ndescriptors: [{key: k, value: 'v*', rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 7}}]\n",
		"domain: a\ndescriptors: [{key: k, rate_limit: {unlimited: true}}]\n---\ndomain: b\n",
		"domain: a\nx: &x [{key: k, descriptors: *x}]\n",
		"domain: a\ndescriptors: [{key: k, rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 4294967295}}]\n",
		"domain: a\ndescriptors: [{key: k, algorithm: SLIDING_WINDOW_LOG, rate_limit: {unit: month, requests_per_unit: 10001}}]\n",
		"domain: a\nall_or_nothing: true\ncharge_over_limit: true\ndescriptors: [{key: k, charge_over_limit: false, rate_limit: {unit: minute, requests_per_unit: 5}}, {key: j, rate_limit: {unit: hour, requests_per_unit: 9}}]\n",
		"domain: a\ncharge_over_limit: maybe\ndescriptors: [{key: k, all_or_nothing: true, charge_over_limit: true}]\n",
		"domain: [a]\n",
		// calendar: true, our extension, and what it is refused with.
		"domain: a\ndescriptors: [{key: k, rate_limit: {unit: month, requests_per_unit: 5, calendar: true, time_zone: Europe/Paris}}, {key: j, rate_limit: {unit: week, requests_per_unit: 1, calendar: true}}]\n",
		"domain: a\ndescriptors: [{key: k, algorithm: SLIDING_WINDOW_LOG, rate_limit: {unit: second, unit_multiplier: 2, requests_per_unit: 5, calendar: true, time_zone: Nowhere}}]\n",
		"domain: a\ndescriptors: [{key: k, rate_limit: {unlimited: true, calendar: true, time_zone: UTC}}, {key: j, rate_limit: {unit: day, requests_per_unit: 1, time_zone: UTC}}]\n",
		// algorithm: GCRA with burst, our extension; CONCURRENCY, refused.
		"domain: a\ndescriptors: [{key: k, algorithm: GCRA, rate_limit: {unit: second, requests_per_unit: 10, burst: 50}}, {key: j, algorithm: GCRA, rate_limit: {unit: hour, requests_per_unit: 3}}]\n",
		"domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, burst: 0}}, {key: j, algorithm: CONCURRENCY, rate_limit: {unit: minute, requests_per_unit: 2, burst: 4294967295}}]\n",
		"domain: a\ndescriptors: [{key: k, algorithm: GCRA, rate_limit: {unit: year, requests_per_unit: 1, burst: 99, calendar: true}}, {key: j, rate_limit: {unlimited: true, burst: 1}}]\n",
		"\xff",
		"",
	} {
		f.Add([]byte(s))
	}
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.yaml", data, LoadOptions{Check: store.Validate})
		if err != nil {
			require.Nil(t, cfg)
			for _, e := range unjoin(err) {
				var pe *Error
				require.True(t, errors.As(e, &pe), "not an *envoyrls.Error: %v", e)
				require.True(t, strings.HasPrefix(e.Error(), "f.yaml"), e.Error())
			}
			return
		}
		require.NotEmpty(t, cfg.Domains())
		for _, r := range cfg.Rules() {
			if r.Unlimited {
				continue
			}
			require.NoError(t, store.Validate(limiter.Request{Key: "k", Limit: int64(max(r.RequestsPerUnit, 1)), Window: r.Window, Algorithm: r.Algorithm,
				Calendar: r.Calendar, Hits: 1}))
			require.Positive(t, r.span())
			require.NotNil(t, r.current)
			require.NotEmpty(t, r.header)
		}
		for _, d := range cfg.Domains() {
			Match(d, entries("k=v,k=,a=b"))
			Match(d, entries(string(data)))
		}
	})
}

// FuzzShouldRateLimit: whatever a client sends, the service answers with
// one status per descriptor, or refuses with a client-side code; it never
// panics or fails as the server's fault.
func FuzzShouldRateLimit(f *testing.F) {
	seed := func(m *rlspb.RateLimitRequest) {
		b, err := proto.Marshal(m)
		require.NoError(f, err)
		f.Add(b)
	}
	seed(&rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*rlscommon.RateLimitDescriptor{desc("message_type=marketing", "to_number=1"), desc("to_number=1")}})
	seed(&rlspb.RateLimitRequest{Domain: "edge", HitsAddend: 7, Descriptors: []*rlscommon.RateLimitDescriptor{desc("remote_address=50.0.0.5"), desc("ldap=x"), desc("burst=b")}})
	over := desc("remote_address=1")
	over.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typepb.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(9)}
	over.HitsAddend = wrapperspb.UInt64(5)
	seed(&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{over}})
	seed(&rlspb.RateLimitRequest{Domain: "example7", Descriptors: []*rlscommon.RateLimitDescriptor{desc("key_1=value_1", "user=bkthomps"), desc("key_2=value_2", "user=bkthomps")}})
	seed(&rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlscommon.RateLimitDescriptor{{}}})
	seed(&rlspb.RateLimitRequest{Domain: "upstream", Descriptors: []*rlscommon.RateLimitDescriptor{desc("service=service_1"), desc("unspec=u"), desc("route=r", "method=GET")}})
	// The extensions (opsConfig): refunds, charges, all or nothing.
	seed(&rlspb.RateLimitRequest{Domain: "usage", Descriptors: []*rlscommon.RateLimitDescriptor{refundOf(desc("tokens=u"), 5), hitsOf(desc("tokens=u"), 500), hitsOf(desc("exact=e"), 0)}})
	seed(&rlspb.RateLimitRequest{Domain: "bundle", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{desc("user=u"), desc("org=o"),
		hitsOf(desc("tokens=t"), 0), desc("shadow=s"), desc("quota=q"), hitsOf(desc("spent=s"), 300), refundOf(desc("user=u"), 1), desc("free=f")}})
	h := newHarnessFor(f, serviceConfig+"---\n"+opsConfig, func(c *serverOpts) {
		c.Headers, c.ResponseMetadata, c.MaxKeyBytes = true, true, 64
		c.Logger = slog.New(slog.DiscardHandler) // t.Log is not allowed in a fuzz target
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rlspb.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		resp, err := h.srv.ShouldRateLimit(context.Background(), &req)
		if err != nil {
			require.Nil(t, resp)
			code := status.Code(err)
			require.Contains(t, []codes.Code{codes.InvalidArgument, codes.ResourceExhausted}, code, "%v", err)
			return
		}
		require.Len(t, resp.GetStatuses(), len(req.GetDescriptors()))
		for _, st := range resp.GetStatuses() {
			require.NotEqual(t, rlspb.RateLimitResponse_UNKNOWN, st.GetCode())
		}
		require.NotEqual(t, rlspb.RateLimitResponse_UNKNOWN, resp.GetOverallCode())
		_, err = proto.Marshal(resp)
		require.NoError(t, err)
	})
}
