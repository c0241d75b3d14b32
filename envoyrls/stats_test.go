package envoyrls

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
)

const statsConfig = `domain: s
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key2
    value: value2
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: key7
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: limit
            rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wildv
    value: foo*bar*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
          - key: subject_id
            value: detailed
            descriptors:
              - key: x
                detailed_metric: true
                rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: api
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 80}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 60}
`

func descEntries(s string) []*rlscommon.RateLimitDescriptor_Entry {
	var out []*rlscommon.RateLimitDescriptor_Entry
	for _, e := range entries(s) {
		out = append(out, &rlscommon.RateLimitDescriptor_Entry{Key: e.k, Value: e.v})
	}
	return out
}

// The statistics key of each match, as upstream's config tests expect it
// (envoyproxy/ratelimit test/config/config_test.go: TestBasicConfig,
// TestDetailedMetric, TestValueToMetric_*, TestShareThreshold).
func TestStatsKey(t *testing.T) {
	cfg, err := Parse("s.yaml", []byte(statsConfig), storeCheck(t))
	require.NoError(t, err)
	d := cfg.Domain("s")
	for _, c := range []struct{ entries, want string }{
		{"key1=value1,subkey1=something", "key1_value1.subkey1"},
		{"key2=something", "key2"},
		{"key2=value2", "key2_value2"},
		{"key7=unspecified_value", "key7_unspecified_value"},
		{"key7=", "key7_"}, // detailed: always with the '_'
		{"wild=foo1", "wild_foo*"},
		{"wildv=foo123bar456", "wildv_foo123bar456"},
		{"wild=foo1,other=bar,limit=X", "wild_foo*.other_bar.limit"},
		{"route=draw,http_method=GET,subject_id=123", "route_draw.http_method_GET.subject_id"},
		{"route=,http_method=GET,subject_id=123", "route.http_method_GET.subject_id"},
		{"route=draw,http_method=GET,subject_id=detailed,x=1", "route_draw.http_method_GET.subject_id_detailed.x_1"},
		{"user=alice,action=readfile,resource=documents", "user_alice.action_readfile.resource"},
		{"files=files/a.pdf", "files_files/*"},
		{"api=api/v1,method=GET", "api_api/*.method"}, // share beats value_to_metric
		{"service=svc/user,endpoint=get", "service_svc/*.endpoint_get"},
		{"tenant=t1prod,resource=resAv2", "tenant_t*prod.resource_res*v2"},
	} {
		m := Match(d, descEntries(c.entries))
		require.NotNil(t, m.Rule, c.entries)
		got := m.Rule.Path
		if m.Rule.perValueStats {
			got = statsKey(m.Rule, m, descEntries(c.entries))
		}
		assert.Equal(t, c.want, got, c.entries)
	}
}

// upstream's exporter labels: the domain, then the key's first two parts
// after upstream's sanitising.
func TestStatLabels(t *testing.T) {
	for _, c := range []struct{ key, domain, key1, key2 string }{
		{"rl.unspec_unspecified_value", "rl", "unspec_unspecified_value", ""},
		{"test-domain.key1_value1.subkey1", "test-domain", "key1_value1", "subkey1"},
		{"d.a.b.c.d", "d", "a", "b"},
		{"edge.remote_address_10.1.2.3:80", "edge", "remote_address_10_1_2_3_80", ""},
		{"d.a|b", "d", "a_b", ""},
	} {
		dom, k1, k2 := statLabels(c.key)
		assert.Equal(t, [3]string{c.domain, c.key1, c.key2}, [3]string{dom, k1, k2}, c.key)
	}
}

// The counts of one decision, against upstream's own test vectors
// (test/redis/fixed_cache_impl_test.go): limit, hits and the count after
// them give over, near and within.
func TestStatCountsMatchUpstream(t *testing.T) {
	for _, c := range []struct {
		limit, hits, after    int64
		over, near, within    float64
		overLimit, shadowMode bool
	}{
		{limit: 15, hits: 1, after: 11, within: 1},
		{limit: 15, hits: 1, after: 13, near: 1, within: 1},
		{limit: 15, hits: 1, after: 16, over: 1, overLimit: true},
		{limit: 20, hits: 3, after: 5, within: 3},
		{limit: 8, hits: 2, after: 7, near: 1, within: 2},
		{limit: 20, hits: 3, after: 19, near: 3, within: 3},
		{limit: 20, hits: 3, after: 22, over: 2, near: 1, overLimit: true},
		{limit: 20, hits: 7, after: 22, over: 2, near: 4, overLimit: true},
		{limit: 10, hits: 3, after: 30, over: 3, overLimit: true},
		{limit: 10, hits: 3, after: 30, over: 3, overLimit: true, shadowMode: true},
	} {
		reg := prometheus.NewRegistry()
		u := newUpstreamStats(DefaultConfig())
		for _, col := range u.collectors() {
			require.NoError(t, reg.Register(col))
		}
		sc := u.counters("d.k")
		sc.count(c.hits, c.after-c.hits, c.limit, u.nearThreshold(c.limit), c.overLimit, c.shadowMode)
		stat := func(name string) float64 {
			return metrictest.Value(t, reg, "ratelimit_service_rate_limit_"+name, "domain", "d", "key1", "k")
		}
		assert.Equal(t, float64(c.hits), stat("total_hits"), "%+v", c)
		assert.Equal(t, c.over, stat("over_limit"), "%+v", c)
		assert.Equal(t, c.near, stat("near_limit"), "%+v", c)
		assert.Equal(t, c.within, stat("within_limit"), "%+v", c)
		want := 0.0
		if c.shadowMode {
			want = c.over
		}
		assert.Equal(t, want, stat("shadow_mode"), "%+v", c)
	}
}

// Keys from request values stop at MaxStatsKeys: the rest count under
// the fallback, and the overflow is counted.
func TestPerValueStatsKeysAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := DefaultConfig()
	s.MaxStatsKeys = 2
	u := newUpstreamStats(s)
	for _, col := range u.collectors() {
		require.NoError(t, reg.Register(col))
	}
	fallback := u.counters("d.k")
	a := u.perValueCounters("d.k_a", fallback)
	assert.Same(t, a, u.perValueCounters("d.k_a", fallback))
	assert.NotSame(t, fallback, u.perValueCounters("d.k_b", fallback))
	assert.Same(t, fallback, u.perValueCounters("d.k_c", fallback))
	assert.Same(t, a, u.perValueCounters("d.k_a", fallback), "known keys stay")
	assert.Equal(t, 1.0, metrictest.Value(t, reg, "peerlimit_envoy_rls_stats_keys_overflow_total"))
}

func TestNearThresholdIsUpstreams(t *testing.T) {
	u := newUpstreamStats(DefaultConfig())
	for limit, want := range map[int64]int64{15: 12, 20: 16, 10: 8, 5: 4, 0: 0, 1: 0} {
		assert.Equal(t, want, u.nearThreshold(limit), limit)
	}
}

// scraped serves reg as a node serves its /metrics and returns what a
// Prometheus server reads there, by metric name.
func scraped(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	mfs, err := metrictest.Scrape(srv.URL).Gather()
	require.NoError(t, err)
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// upstreamSeries are the per-call and per-load series of upstream's
// Prometheus mapping (src/stats/prom/default_mapper.yaml, and Envoy
// Gateway's statsd_conf.yaml): name, type and labels as it exports them.
var upstreamSeries = []struct {
	name   string
	typ    dto.MetricType
	labels map[string]string
}{
	{"ratelimit_service_total_requests", dto.MetricType_COUNTER, map[string]string{"grpc_method": "ShouldRateLimit"}},
	{"ratelimit_service_should_rate_limit_error", dto.MetricType_COUNTER, map[string]string{"err_type": "service_error"}},
	{"ratelimit_service_response_time_seconds", dto.MetricType_HISTOGRAM, map[string]string{"grpc_method": "ShouldRateLimit"}},
	{"ratelimit_service_config_load_success", dto.MetricType_COUNTER, map[string]string{}},
	{"ratelimit_service_config_load_error", dto.MetricType_COUNTER, map[string]string{}},
}

// Every call counts in total_requests and is timed, answered or not; a
// call answered with an error, by the Server or before it, counts in
// should_rate_limit_error as a service_error; every configuration load
// in config_load_success or config_load_error. peerlimit's own series
// count alongside.
func TestUpstreamCallStatistics(t *testing.T) {
	h := newHarness(t, nil)
	h.call(t, "messaging", desc("to_number=1"))
	h.call(t, "nowhere", desc("k=v"))
	_, err := h.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "edge"})
	require.Error(t, err)
	m := h.srv.d.Metrics
	m.Unanswered(time.Now())
	m.ConfigLoaded(nil)
	m.ConfigLoaded(nil)
	m.ConfigLoaded(errors.New("rls.yaml:2: bad"))

	mfs := scraped(t, h.reg)
	for _, want := range upstreamSeries {
		mf := mfs[want.name]
		require.NotNil(t, mf, "no %s", want.name)
		assert.Equal(t, want.typ, mf.GetType(), want.name)
		require.Len(t, mf.GetMetric(), 1, "%s: one series", want.name)
		got := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		assert.Equal(t, want.labels, got, want.name)
	}
	for _, c := range []struct {
		name string
		want float64
	}{
		{"ratelimit_service_total_requests", 4},
		{"ratelimit_service_should_rate_limit_error", 2},
		{"ratelimit_service_response_time_seconds", 4}, // observations: every call, as total_requests
		{"ratelimit_service_config_load_success", 2},
		{"ratelimit_service_config_load_error", 1},
	} {
		assert.Equal(t, c.want, metrictest.Value(t, h.reg, c.name), c.name)
	}
	assert.Equal(t, 1.0, h.metric(t, "peerlimit_envoy_rls_requests_total", "domain", "edge", "code", "ERROR"), "peerlimit's own still count")
	var nilMetrics *Metrics
	nilMetrics.ConfigLoaded(nil) // counts nothing, fails nothing
	nilMetrics.Unanswered(time.Now())
}

// The response time is in seconds, or, as upstream's
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS has it, in milliseconds, its
// bucket bounds too, under the same name.
func TestResponseTimeUnits(t *testing.T) {
	for _, c := range []struct {
		ms                          bool
		sum, low, high, first, last float64 // of 3 ms, between the buckets low and high
	}{
		{false, 0.003, 0.0025, 0.005, 50e-6, 1},
		{true, 3, 2.5, 5, 0.05, 1000},
	} {
		reg := prometheus.NewRegistry()
		s := DefaultConfig()
		s.ResponseTimeMilliseconds = c.ms
		m, err := NewMetrics(reg, s)
		require.NoError(t, err)
		m.upstream.responseTime(3 * time.Millisecond)

		mf := scraped(t, reg)["ratelimit_service_response_time_seconds"]
		require.NotNil(t, mf)
		hist := mf.GetMetric()[0].GetHistogram()
		assert.InDelta(t, c.sum, hist.GetSampleSum(), c.sum*1e-9, "ms %v", c.ms)
		buckets := hist.GetBucket()
		require.Len(t, buckets, len(responseTimeBuckets))
		assert.Equal(t, c.first, buckets[0].GetUpperBound(), "ms %v: exactly the decimal", c.ms)
		assert.Equal(t, c.last, buckets[len(buckets)-1].GetUpperBound(), "ms %v: 1 s", c.ms)
		counts := map[float64]uint64{}
		for _, b := range buckets {
			counts[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		require.Contains(t, counts, c.low)
		require.Contains(t, counts, c.high)
		assert.Zero(t, counts[c.low], "ms %v: le %v", c.ms, c.low)
		assert.Equal(t, uint64(1), counts[c.high], "ms %v: le %v", c.ms, c.high)
		if c.ms {
			assert.Contains(t, mf.GetHelp(), "in milliseconds")
		}
	}
}
