package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/limiter"
)

// storeCollector reads the store's bookkeeping at scrape time, so the hot
// path pays nothing for these metrics.
type storeCollector struct {
	store                        *limiter.Store
	keys, entries                *prometheus.Desc
	evictions, rejected, expired *prometheus.Desc
}

func newStoreCollector(s *limiter.Store) *storeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("peerlimit_"+name, help, labels, nil)
	}
	return &storeCollector{
		store:     s,
		keys:      d("keys", "Keys held by this node, by algorithm.", "algorithm"),
		entries:   d("log_entries", "Hits held by all sliding window logs (4 bytes each)."),
		evictions: d("evictions_total", "Live keys dropped to make room for new ones (overflow policy evict): each such key restarts from zero."),
		rejected:  d("rejected_keys_total", "New keys refused because the store was full (overflow policy reject)."),
		expired:   d("expired_keys_total", "Keys freed because their state had expired."),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Stats()
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.CounterKeys), limiter.SlidingWindowCounter.String())
	ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(st.LogKeys), limiter.SlidingWindowLog.String())
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.LogEntries))
	ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(st.Rejections))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(st.Expired))
}

// nodeMetrics are the node's own: ring changes, handoffs, members.
type nodeMetrics struct {
	ringChanges prometheus.Counter
	handoffs    *prometheus.CounterVec // by result: sent, failed
	handoffKeys *prometheus.CounterVec // by direction: sent, received, refused
	// policyReloads counts ReloadPolicies by result: ok, error (the
	// policies in force were kept).
	policyReloads *prometheus.CounterVec
}

func newNodeMetrics(reg prometheus.Registerer, n *Node) (*nodeMetrics, error) {
	m := &nodeMetrics{
		ringChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "peerlimit", Name: "ring_changes_total",
			Help: "Times this node's ring was rebuilt because membership changed."}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "handoffs_total",
			Help: "Handoff calls to new owners, by result (sent, failed: state kept and retried)."}, []string{"result"}),
		handoffKeys: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "handoff_keys_total",
			Help: "Key states moved by handoff: sent (merged by the owner), received, refused (by the owner)."}, []string{"direction"}),
	}
	m.policyReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "peerlimit", Name: "policy_reloads_total",
		Help: "Reloads of the policy file (SIGHUP), by result: ok, or error (the policies in force were kept)."}, []string{"result"})
	m.policyReloads.WithLabelValues("ok")
	m.policyReloads.WithLabelValues("error")
	policies := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "policies",
		Help: "Named policies in force (0 without a policy file)."}, func() float64 {
		if set := n.policySet(); set != nil {
			return float64(set.Len())
		}
		return 0
	})
	members := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "members",
		Help: "Live members in this node's view, itself included."}, func() float64 {
		if n.members == nil {
			return 0
		}
		return float64(len(n.members.Members()))
	})
	for _, c := range []prometheus.Collector{m.ringChanges, m.handoffs, m.handoffKeys, members, m.policyReloads, policies} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
