package replica

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts replication, sent and held. A nil *Metrics counts
// nothing.
type Metrics struct {
	keys     *prometheus.CounterVec // sent: by result
	lag      prometheus.Histogram
	heldKeys prometheus.Gauge
	refused  prometheus.Counter
	promoted prometheus.Counter
}

// NewMetrics registers replication's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "replication_keys_total",
			Help: "Key states this node sent its partitions' backups, by result (sent; failed: their partitions go whole next round)."},
			[]string{"result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "peerlimit", Name: "replication_lag_seconds",
			Help:    "Per delivered round, the bound on how old the changes it carried were: what a crash of this node can lose.",
			Buckets: []float64{.01, .025, .05, .1, .15, .2, .3, .5, 1, 2.5, 5}}),
		heldKeys: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "replica_keys",
			Help: "Key states this node holds as the backup of other members' partitions."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "peerlimit", Name: "replica_refused_total",
			Help: "Replicated key states this node refused: it held --replica-max-keys already."}),
		promoted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "peerlimit", Name: "replica_promoted_keys_total",
			Help: "Replicated key states this node merged into its own state when their owner failed or could not be reached."}),
	}
	for _, r := range []string{"sent", "failed"} {
		m.keys.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.keys, m.lag, m.heldKeys, m.refused, m.promoted} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) sent(ok, failed int, lag time.Duration) {
	if m == nil {
		return
	}
	m.keys.WithLabelValues("sent").Add(float64(ok))
	m.keys.WithLabelValues("failed").Add(float64(failed))
	if failed == 0 {
		m.lag.Observe(lag.Seconds())
	}
}

func (m *Metrics) held(n, refused int) {
	if m == nil {
		return
	}
	m.heldKeys.Set(float64(n))
	m.refused.Add(float64(refused))
}

// Promoted counts states merged into this node's own on a failover.
func (m *Metrics) Promoted(n int) {
	if m != nil {
		m.promoted.Add(float64(n))
	}
}
