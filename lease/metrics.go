package lease

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts budget leases, on both sides. A nil *Metrics counts
// nothing.
type Metrics struct {
	events [6]prometheus.Counter // by event
	hitsC  [2]prometheus.Counter // [lent, returned]
}

// Lease events (peerlimit_leases_total{event}).
const (
	eventAsked        = iota // this node asked an owner for a lease
	eventReceived            // and got one
	eventGranted             // this node, an owner, lent one
	eventSettled             // its holder settled it
	eventExpired             // it expired unsettled: counted as all used
	eventSettleFailed        // this node's settlement call failed
)

// Lease hits (peerlimit_lease_hits_total{direction}).
const (
	hitsLent     = iota // hits lent, taken from their keys at the grant
	hitsReturned        // hits given back unused at settlement
)

var eventNames = [...]string{"asked", "received", "granted", "settled", "expired", "settle_failed"}

// NewMetrics registers the budget leases' metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	events := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "leases_total",
		Help: "Budget leases of hot and warm keys, by event: asked, received (this node, forwarding a key often enough for a lease of --lease-min-hits checks, asked its owner " +
			"and got one), granted, settled, expired (this node, the owner, lent one; its holder settled it; or it was never settled " +
			"and counted as all used), settle_failed (this node's settlement did not reach the owner).",
	}, []string{"event"})
	hits := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "lease_hits_total",
		Help:      "Hits this node, an owner, lent in budget leases (taken from their keys at the grant), and returned: lent but not used, given back at settlement.",
	}, []string{"direction"})
	for _, c := range []prometheus.Collector{events, hits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m := &Metrics{}
	for e, name := range eventNames {
		m.events[e] = events.WithLabelValues(name)
	}
	m.hitsC[hitsLent], m.hitsC[hitsReturned] = hits.WithLabelValues("lent"), hits.WithLabelValues("returned")
	return m, nil
}

func (m *Metrics) event(e int) {
	if m != nil {
		m.events[e].Inc()
	}
}

func (m *Metrics) hits(direction int, n int64) {
	if m != nil && n > 0 {
		m.hitsC[direction].Add(float64(n))
	}
}
