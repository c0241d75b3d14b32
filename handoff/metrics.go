package handoff

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts handoffs, sent and received. A nil *Metrics counts
// nothing.
type Metrics struct {
	calls *prometheus.CounterVec // by result: sent, failed
	keys  *prometheus.CounterVec // by direction: sent, received, refused
}

// NewMetrics registers the handoff metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "handoffs_total",
			Help: "Handoff calls to new owners, by result (sent, failed: state kept and retried)."}, []string{"result"}),
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "handoff_keys_total",
			Help: "Key states moved by handoff: sent (merged by the owner), received, refused (by the owner)."}, []string{"direction"}),
	}
	// Every series from the start, so rate() and alerts work before the
	// first event.
	for _, r := range []string{"sent", "failed"} {
		m.calls.WithLabelValues(r)
	}
	for _, d := range []string{"sent", "received", "refused"} {
		m.keys.WithLabelValues(d)
	}
	for _, c := range []prometheus.Collector{m.calls, m.keys} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) failed() {
	if m != nil {
		m.calls.WithLabelValues("failed").Inc()
	}
}

func (m *Metrics) sent(merged, refused int) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues("sent").Inc()
	m.keys.WithLabelValues("sent").Add(float64(merged))
	m.keys.WithLabelValues("refused").Add(float64(refused))
}

// received counts the states another member handed to this node and it
// merged.
func (m *Metrics) received(merged int) {
	if m != nil {
		m.keys.WithLabelValues("received").Add(float64(merged))
	}
}
