package rpc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/limiter"
)

// Metrics counts the Service's decisions. The counters are resolved once, so
// observing costs an atomic add, not a label lookup. A nil *Metrics observes
// nothing.
type Metrics struct {
	checks    [2][3]prometheus.Counter // [algorithm][allowed, denied, error]
	forwards  [2]prometheus.Counter    // [ok, failed]
	fallbacks [3]prometheus.Counter    // by FallbackPolicy
}

const (
	outcomeAllowed = iota
	outcomeDenied
	outcomeError
)

// NewMetrics registers the Service's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "checks_total",
		Help:      "Checks decided by this node, by algorithm and outcome (allowed, denied, error).",
	}, []string{"algorithm", "outcome"})
	if err := reg.Register(vec); err != nil {
		return nil, err
	}
	fwd := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "forwards_total",
		Help:      "Checks forwarded to their owner, by result: ok (the owner answered) or failed (it could not be asked).",
	}, []string{"result"})
	unr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "owner_unreachable_total",
		Help:      "Checks answered by the fallback policy because their owner could not be reached; every such answer is marked degraded.",
	}, []string{"policy"})
	for _, c := range []prometheus.Collector{fwd, unr} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m := &Metrics{}
	m.forwards[0], m.forwards[1] = fwd.WithLabelValues("ok"), fwd.WithLabelValues("failed")
	for p := FallbackLocal; p <= FallbackDeny; p++ {
		m.fallbacks[p] = unr.WithLabelValues(p.String())
	}
	for _, a := range []limiter.Algorithm{limiter.SlidingWindowCounter, limiter.SlidingWindowLog} {
		for o, name := range []string{"allowed", "denied", "error"} {
			m.checks[a][o] = vec.WithLabelValues(a.String(), name)
		}
	}
	return m, nil
}

func (m *Metrics) observe(a limiter.Algorithm, allowed bool, err error) {
	if m == nil || int(a) >= len(m.checks) {
		return
	}
	o := outcomeDenied
	switch {
	case err != nil:
		o = outcomeError
	case allowed:
		o = outcomeAllowed
	}
	m.checks[a][o].Inc()
}

func (m *Metrics) forwarded(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.forwards[0].Inc()
	} else {
		m.forwards[1].Inc()
	}
}

func (m *Metrics) unreachable(p FallbackPolicy) {
	if m != nil && int(p) < len(m.fallbacks) {
		m.fallbacks[p].Inc()
	}
}
