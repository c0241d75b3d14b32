package envoyrls

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the service's calls and descriptors, in two sets.
//
// peerlimit's own (peerlimit_envoy_rls_*) have labels from the
// configuration only (domain names and descriptor paths), never from what
// a request carries, so their number stays bounded: calls for a domain
// the configuration does not define count under domain "(unknown)".
//
// envoyproxy/ratelimit's (ratelimit_service_*, stats.go: per call, per
// configuration load, per descriptor) are named, typed and labelled as
// its Prometheus exporter names them, so that dashboards and alerts port;
// the descriptors' keys can come from request values (detailed_metric,
// value_to_metric), and MaxStatsKeys bounds those.
//
// The counters of a configuration are resolved once, when it is first
// used, so counting a descriptor whose key comes from the configuration
// costs atomic adds, not label lookups. A nil *Metrics counts nothing.
type Metrics struct {
	requests     *prometheus.CounterVec
	descriptors  *prometheus.CounterVec
	degraded     *prometheus.CounterVec
	globalShadow *prometheus.CounterVec
	stats        *upstreamStats
	upstream     *upstreamCalls

	mu    sync.Mutex // serialises bind's rebuilds
	bound atomic.Pointer[boundMetrics]
}

// unknownDomain labels the calls for domains the configuration lacks.
const unknownDomain = "(unknown)"

// Call codes (the code label of peerlimit_envoy_rls_requests_total).
const (
	codeOK = iota
	codeOverLimit
	codeError
	numCodes
)

var codeNames = [numCodes]string{"OK", "OVER_LIMIT", "ERROR"}

// Descriptor outcomes (the outcome label of
// peerlimit_envoy_rls_descriptors_total).
const (
	outcomeOK         = iota // checked, under the limit
	outcomeOverLimit         // checked, over the limit: answered OVER_LIMIT
	outcomeShadowMode        // over the limit, answered OK by shadow_mode
	outcomeUnlimited         // unlimited: true, answered without a check
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "over_limit", "shadow_mode", "unlimited"}

// NewMetrics registers the service's metrics with reg; s gives the
// near-limit ratio and the bound on statistics keys from request values.
func NewMetrics(reg prometheus.Registerer, s Config) (*Metrics, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("envoyrls: %w", err)
	}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_requests_total",
			Help: "ShouldRateLimit calls, by domain and overall code (OK, OVER_LIMIT, or ERROR for a call answered with a gRPC error)."},
			[]string{"domain", "code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_descriptors_total",
			Help: "Descriptors that matched a rate limit, by domain, descriptor path (\"override\" for a request's own limit) and outcome: ok, over_limit, shadow_mode (over the limit, answered OK), unlimited."},
			[]string{"domain", "rule", "outcome"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_degraded_total",
			Help: "ShouldRateLimit calls with at least one descriptor answered by the fallback policy because its owner was unreachable."},
			[]string{"domain"}),
		globalShadow: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "envoy_rls_global_shadow_mode_total",
			Help: "ShouldRateLimit calls answered OK by --envoy-rls-shadow-mode that would have been OVER_LIMIT (upstream's ratelimit.service.global_shadow_mode)."},
			[]string{"domain"}),
	}
	m.stats = newUpstreamStats(s)
	m.upstream = newUpstreamCalls(s)
	cs := append([]prometheus.Collector{m.requests, m.descriptors, m.degraded, m.globalShadow}, m.upstream.collectors()...)
	for _, c := range append(cs, m.stats.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// boundMetrics are the counters of one configuration, by index.
type boundMetrics struct {
	m       *Metrics
	cfg     *RuleSet
	domains []*domainCounters
	rules   [][numOutcomes]prometheus.Counter
	// ruleStats are each rule's upstream statistics under its configured
	// key; nil for an unlimited rule, which has none.
	ruleStats []*statCounters
	unknown   *domainCounters
}

type domainCounters struct {
	name     string
	upstream *upstreamCalls // the same for every domain
	requests [numCodes]prometheus.Counter
	degraded prometheus.Counter
	shadowed prometheus.Counter // by the global shadow mode
	override [numOutcomes]prometheus.Counter
	// overrideStats count the requests' own limits whose statistics key
	// is past MaxStatsKeys: under "<domain>.override".
	overrideStats *statCounters
}

// bind returns cfg's counters, resolving them on first use.
func (m *Metrics) bind(cfg *RuleSet) *boundMetrics {
	if m == nil {
		return nil
	}
	if b := m.bound.Load(); b != nil && b.cfg == cfg {
		return b
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.bound.Load(); b != nil && b.cfg == cfg {
		return b
	}
	b := &boundMetrics{m: m, cfg: cfg, unknown: m.domainCounters(unknownDomain)}
	for _, d := range cfg.domains {
		b.domains = append(b.domains, m.domainCounters(d.Name))
	}
	b.rules = make([][numOutcomes]prometheus.Counter, len(cfg.rules))
	b.ruleStats = make([]*statCounters, len(cfg.rules))
	for i, r := range cfg.rules {
		for o := range numOutcomes {
			if (o == outcomeUnlimited) == r.Unlimited {
				b.rules[i][o] = m.descriptors.WithLabelValues(r.Domain, r.Path, outcomeNames[o])
			}
		}
		if !r.Unlimited {
			b.ruleStats[i] = m.stats.counters(r.Domain + "." + r.Path)
		}
	}
	m.bound.Store(b)
	return b
}

func (m *Metrics) domainCounters(name string) *domainCounters {
	c := &domainCounters{name: name, upstream: m.upstream, degraded: m.degraded.WithLabelValues(name), shadowed: m.globalShadow.WithLabelValues(name),
		overrideStats: m.stats.counters(name + ".override")}
	for i := range numCodes {
		c.requests[i] = m.requests.WithLabelValues(name, codeNames[i])
	}
	for o := range numOutcomes {
		if o != outcomeUnlimited {
			c.override[o] = m.descriptors.WithLabelValues(name, "override", outcomeNames[o])
		}
	}
	return c
}

// domain returns d's counters (d nil: the unknown domains').
func (b *boundMetrics) domain(d *Domain) *domainCounters {
	switch {
	case b == nil:
		return nil
	case d == nil:
		return b.unknown
	}
	return b.domains[d.index]
}

// descriptor counts one descriptor's outcome under rule r, or, for an
// override (index -1), under domain dc's "override".
func (b *boundMetrics) descriptor(dc *domainCounters, r *Rule, outcome int) {
	if b == nil {
		return
	}
	var c prometheus.Counter
	if r.index >= 0 {
		c = b.rules[r.index][outcome]
	} else if dc != nil {
		c = dc.override[outcome]
	}
	if c != nil {
		c.Inc()
	}
}

// globalShadow counts a call turned OK by the global shadow mode.
func (dc *domainCounters) globalShadow() {
	if dc != nil {
		dc.shadowed.Inc()
	}
}

// call counts a call's answer: code, and whether a fallback decided any
// of its descriptors.
func (dc *domainCounters) call(code int, degraded bool) {
	if dc == nil {
		return
	}
	dc.upstream.call(code == codeError)
	dc.requests[code].Inc()
	if degraded {
		dc.degraded.Inc()
	}
}

// responseTime observes a call that started at start.
func (m *Metrics) responseTime(start time.Time) {
	if m != nil {
		m.upstream.responseTime(time.Since(start))
	}
}

// Unanswered counts a ShouldRateLimit call answered with an error before
// a Server saw it (the node's gate, while it awaits a control plane's
// first configuration) in total_requests and as a service_error, as
// upstream counts a call before its first configuration ("no rate limit
// configuration loaded"), and its time since start in the response time,
// which covers every call.
func (m *Metrics) Unanswered(start time.Time) {
	if m != nil {
		m.upstream.call(true)
		m.upstream.responseTime(time.Since(start))
	}
}

// ConfigLoaded counts an attempt to load the configuration, from files or
// from a control plane, in ratelimit_service_config_load_success or, when
// err is not nil, ratelimit_service_config_load_error: every attempt, as
// upstream counts every update it is sent, even one that changes nothing.
func (m *Metrics) ConfigLoaded(err error) {
	if m != nil {
		m.upstream.configLoaded(err)
	}
}
