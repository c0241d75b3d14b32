package rpc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/limiter"
)

// Metrics counts the Service's decisions. The counters are resolved once, so
// observing costs an atomic add, not a label lookup. A nil *Metrics observes
// nothing.
type Metrics struct {
	checks [2][3]prometheus.Counter // [algorithm][allowed, denied, error]
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
	m := &Metrics{}
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
