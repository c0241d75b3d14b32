package envoyrls

import (
	"math"
	"regexp"
	"strings"
	"sync"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/limiter"
)

// upstreamCalls are envoyproxy/ratelimit's statistics of its calls and
// configuration loads, as its Prometheus mapping names them (upstream's
// statsd name on the right):
//
//	ratelimit_service_total_requests{grpc_method}         ratelimit_server.ShouldRateLimit.total_requests
//	ratelimit_service_should_rate_limit_error{err_type}   ratelimit.service.call.should_rate_limit.<err_type>
//	ratelimit_service_response_time_seconds{grpc_method}  ratelimit_server.ShouldRateLimit.response_time
//	ratelimit_service_config_load_success                 ratelimit.service.config_load_success
//	ratelimit_service_config_load_error                   ratelimit.service.config_load_error
//
// ShouldRateLimit is the only method. err_type is service_error for every
// call answered with an error: upstream's other, redis_error, is its
// cache's, and peerlimit has none.
type upstreamCalls struct {
	total        prometheus.Counter
	serviceError prometheus.Counter
	responses    prometheus.Histogram
	loadOK       prometheus.Counter
	loadError    prometheus.Counter
	collect      []prometheus.Collector
	// unit is the response time's: a second, or a millisecond
	// (Config.ResponseTimeMilliseconds).
	unit time.Duration
}

// grpcMethod labels the per-call statistics, as upstream's interceptor
// names the method.
var grpcMethod = prometheus.Labels{"grpc_method": "ShouldRateLimit"}

func newUpstreamCalls(s Config) *upstreamCalls {
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_should_rate_limit_error",
		Help: "ShouldRateLimit calls answered with an error, by err_type: service_error (upstream's redis_error never: no cache)."},
		[]string{"err_type"})
	u := &upstreamCalls{
		total: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_total_requests", ConstLabels: grpcMethod,
			Help: "ShouldRateLimit calls, answered or failed."}),
		serviceError: errs.WithLabelValues("service_error"),
		loadOK: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_success",
			Help: "Configurations loaded and put in force, or found the same as the one in force: at start, on SIGHUP, by the watcher, from the control plane."}),
		loadError: prometheus.NewCounter(prometheus.CounterOpts{Name: "ratelimit_service_config_load_error",
			Help: "Configurations that failed to load (the one in force was kept): on SIGHUP, by the watcher, from the control plane."}),
		unit: time.Second,
	}
	if s.ResponseTimeMilliseconds {
		u.unit = time.Millisecond
	}
	u.responses = newResponseTime(u.unit)
	u.collect = []prometheus.Collector{u.total, errs, u.responses, u.loadOK, u.loadError}
	return u
}

func (u *upstreamCalls) collectors() []prometheus.Collector { return u.collect }

// call counts one ShouldRateLimit call, failed: answered with an error.
func (u *upstreamCalls) call(failed bool) {
	u.total.Inc()
	if failed {
		u.serviceError.Inc()
	}
}

func (u *upstreamCalls) responseTime(d time.Duration) {
	u.responses.Observe(float64(d) / float64(u.unit))
}

func (u *upstreamCalls) configLoaded(err error) {
	if err != nil {
		u.loadError.Inc()
		return
	}
	u.loadOK.Inc()
}

// responseTimeBuckets, in microseconds, suit a service that answers in
// tens of microseconds on its owner and a forward's round trip beyond
// it, up to the peer timeout: upstream's statsd_exporter mapping uses
// Prometheus's defaults (5 ms to 10 s), which would put nearly every call
// in the first bucket. histogram_quantile works over either. Whole
// numbers, so that a bound divided into seconds or milliseconds is the
// double its decimal reads as (0.05, not 0.049999999999999996).
var responseTimeBuckets = []float64{50, 100, 250, 500, 1e3, 2.5e3, 5e3, 10e3, 25e3, 50e3, 100e3, 250e3, 500e3, 1e6}

// newResponseTime is upstream's ratelimit_server.ShouldRateLimit.response_time
// timer as its Prometheus mapping names it, observed in unit (a second,
// or a millisecond as upstream's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
// has it), its buckets' bounds too; the name says seconds either way.
func newResponseTime(unit time.Duration) prometheus.Histogram {
	name := "seconds"
	if unit == time.Millisecond {
		name = "milliseconds (--envoy-rls-response-time-milliseconds: upstream's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)"
	}
	buckets := make([]float64, len(responseTimeBuckets))
	for i, b := range responseTimeBuckets {
		buckets[i] = b / float64(unit/time.Microsecond)
	}
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ratelimit_service_response_time_seconds",
		Help:        "Time ShouldRateLimit took to answer, from the call's arrival at the service to its answer (or error), in " + name + ".",
		ConstLabels: grpcMethod, Buckets: buckets})
}

// envoyproxy/ratelimit's statistics of each descriptor that has a limit,
// as its Prometheus exporter names them:
// ratelimit_service_rate_limit_<stat>{domain, key1, key2}.
const (
	statTotalHits = iota
	statOverLimit
	statNearLimit
	statWithinLimit
	statShadowMode
	numStats
)

var statNames = [numStats]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

var statHelp = [numStats]string{
	"Hits of the descriptors with a limit (not unlimited, not replaced), whatever the outcome.",
	"Hits over the limit: all of a refused descriptor's hits but those that still fitted.",
	"Hits that landed above floor(limit × --envoy-rls-near-limit-ratio) and at or under the limit.",
	"Hits of the descriptors answered OK under their limit.",
	"Hits over the limit of a shadow_mode rule, answered OK.",
}

// statCounters are one statistics key's counters.
type statCounters [numStats]prometheus.Counter

// upstreamStats are the statistics and the keys they have.
type upstreamStats struct {
	vecs      [numStats]*prometheus.CounterVec
	nearRatio float32 // upstream computes the threshold in float32
	maxKeys   int
	overflow  prometheus.Counter

	mu       sync.RWMutex
	perValue map[string]*statCounters // by statistics key, for keys from request values
}

func newUpstreamStats(s Config) *upstreamStats {
	u := &upstreamStats{nearRatio: float32(s.NearLimitRatio), maxKeys: s.MaxStatsKeys, perValue: map[string]*statCounters{},
		overflow: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_stats_keys_overflow_total",
			Help: "Descriptors whose ratelimit_service_rate_limit_* key came from request values (detailed_metric, value_to_metric, a request's own limit) past --envoy-rls-max-stats-keys keys: counted under their rule's configured key (\"<domain>.override\" for a request's own limit) instead."})}
	for i := range numStats {
		u.vecs[i] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimit_service_rate_limit_" + statNames[i], Help: statHelp[i]},
			[]string{"domain", "key1", "key2"})
	}
	return u
}

func (u *upstreamStats) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{u.overflow}
	for _, v := range u.vecs {
		cs = append(cs, v)
	}
	return cs
}

// counters returns the counters of statistics key (the domain, a dot,
// then the descriptor's key), labelled as upstream's exporter labels it.
func (u *upstreamStats) counters(key string) *statCounters {
	domain, key1, key2 := statLabels(key)
	c := &statCounters{}
	for i := range numStats {
		c[i] = u.vecs[i].WithLabelValues(domain, key1, key2)
	}
	return c
}

// perValueCounters returns the counters of key, a key made from request
// values, or fallback when MaxStatsKeys keys are taken already.
func (u *upstreamStats) perValueCounters(key string, fallback *statCounters) *statCounters {
	u.mu.RLock()
	c := u.perValue[key]
	u.mu.RUnlock()
	if c != nil {
		return c
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if c = u.perValue[key]; c != nil {
		return c
	}
	if len(u.perValue) >= u.maxKeys {
		u.overflow.Inc()
		return fallback
	}
	c = u.counters(key)
	u.perValue[key] = c
	return c
}

// nearThreshold is upstream's: floor(limit × ratio), computed in float32.
func (u *upstreamStats) nearThreshold(limit int64) int64 {
	return int64(math.Floor(float64(float32(limit) * u.nearRatio)))
}

// statLabels splits a statistics key as upstream's default Prometheus
// mapping does, after its statsd name is sanitised: the domain, then the
// first and second dot-separated parts of the key (key2 "" when there is
// one part; a Prometheus label with an empty value is one that is
// absent, as in upstream's one-part series). Deeper parts are dropped, so
// deeper keys add up in their first two parts' series, as upstream's.
func statLabels(key string) (domain, key1, key2 string) {
	parts := strings.SplitN(sanitizeStatName(key), ".", 4)
	domain = parts[0]
	if len(parts) > 1 {
		key1 = parts[1]
	}
	if len(parts) > 2 {
		key2 = parts[2]
	}
	return domain, key1, key2
}

var (
	statReplacer = strings.NewReplacer(":", "_", "|", "_")
	ipv4         = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)
)

// sanitizeStatName is upstream's: ':' and '|' become '_', and so do the
// dots of anything that looks like an IPv4 address, so that an address
// stays one part of the key.
func sanitizeStatName(s string) string {
	return ipv4.ReplaceAllStringFunc(statReplacer.Replace(s), func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}

// count adds one descriptor's hits as upstream's limiter does, from its
// count before and after them (after > limit when over). over says the
// descriptor was refused, shadow that its rule is in shadow mode.
// Upstream counts refused hits, so its split of a refused request
// between near_limit and over_limit is the count that would have been;
// peerlimit's count stops at the limit, which is the same split.
func (c *statCounters) count(hits, before, limit, near int64, over, shadow bool) {
	if hits <= 0 {
		return
	}
	after := before + hits
	c[statTotalHits].Add(float64(hits))
	if over {
		overHits := hits
		if before < limit && after > limit {
			overHits = after - limit
			c.add(statNearLimit, limit-max(near, before))
		}
		c.add(statOverLimit, overHits)
		if shadow {
			c.add(statShadowMode, overHits)
		}
		return
	}
	c.add(statWithinLimit, hits)
	if after > near {
		c.add(statNearLimit, min(hits, after-near))
	}
}

func (c *statCounters) add(stat int, n int64) {
	if n > 0 {
		c[stat].Add(float64(n))
	}
}

// stats counts planned descriptor p, decided, in upstream's statistics.
func (b *boundMetrics) stats(dc *domainCounters, p *plan, entries []*rlscommon.RateLimitDescriptor_Entry, over bool) {
	if b == nil {
		return
	}
	r, u := p.rule, b.m.stats
	var c *statCounters
	switch {
	case r.index < 0:
		c = u.perValueCounters(overrideStatsKey(dc.name, entries), dc.overrideStats)
	case r.perValueStats:
		c = u.perValueCounters(r.Domain+"."+statsKey(r, p.matched, entries), b.ruleStats[r.index])
	default:
		c = b.ruleStats[r.index]
	}
	limit := r.capacity()
	before := limit - max(p.d.Remaining, 0)
	switch {
	case p.op == limiter.OpCharge && p.check >= 0:
		before = p.d.CurrentCount // counted whatever: Remaining stops at 0
	case p.check >= 0 && p.d.Allowed && !p.tooMany:
		before -= p.hits // they were consumed: Remaining is after them
	}
	c.count(p.hits, max(before, 0), limit, u.nearThreshold(limit), over, r.ShadowMode)
}

// statsKey is the statistics key, without the domain, of rule r matched
// as m by entries, when it depends on the request (r.perValueStats), as
// upstream builds it. A level matched through a share_threshold wildcard
// is always its pattern. detailed_metric: every other entry as key_value
// (with the '_' even for an empty value, unless a level is shared, then
// as the key alone). Otherwise
// level by level: the configured composite key, except that a level
// whose descriptor has value_to_metric and matched through a wildcard
// (not a shared one) or as the key's default has the request's value.
func statsKey(r *Rule, m Matched, entries []*rlscommon.RateLimitDescriptor_Entry) string {
	anyShared := false
	for i, n := range r.nodes {
		anyShared = anyShared || (n.share && m.how(i) == byWildcard)
	}
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		n, how := r.nodes[i], m.how(i)
		switch {
		case n.share && how == byWildcard:
			b.WriteString(n.composite)
		case r.DetailedMetric && !anyShared:
			// Always with the '_', an empty value too, as upstream.
			b.WriteString(e.GetKey() + "_" + e.GetValue())
		case r.DetailedMetric:
			b.WriteString(compositeKey(e.GetKey(), e.GetValue()))
		case n.valueToMetric && how != byValue:
			b.WriteString(compositeKey(e.GetKey(), e.GetValue()))
		default:
			b.WriteString(n.composite)
		}
	}
	return b.String()
}

// overrideStatsKey is upstream's statistics key of a request's own limit:
// the domain and each entry, key or key_value.
func overrideStatsKey(domain string, entries []*rlscommon.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteString("." + compositeKey(e.GetKey(), e.GetValue()))
	}
	return b.String()
}
