package node

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/route"
)

// storeCollector reads the store's running totals at scrape time (one
// lock per shard, no walk of the keys), so the hot path pays nothing for
// these metrics.
type storeCollector struct {
	store                          *limiter.Store
	keys, entries, slots, bytes    *prometheus.Desc
	evictions, rejections, expired *prometheus.Desc
	calendarOverCap                *prometheus.Desc
	// Reservations, refunds and debt (limiter.ReservationStats).
	resvOpen, resvClosed, resvHits *prometheus.Desc
	resvUnknown                    *prometheus.Desc
}

func newStoreCollector(s *limiter.Store) *storeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("peerlimit_"+name, help, labels, nil)
	}
	return &storeCollector{
		store:   s,
		keys:    d("keys", "Keys held by this node, by algorithm (a key under two windows counts twice); --max-keys bounds their sum.", "algorithm"),
		entries: d("log_entries", "Hits held by all sliding window logs (4 bytes each)."),
		slots:   d("log_slots", "Entries allocated by all sliding window logs, room to grow included; --max-log-entries bounds it."),
		bytes: d("state_bytes", "Estimated heap taken by the keys' state: per key (map slot, key string) and per log slot, "+
			"calibrated with BenchmarkMemoryPerKey. An estimate: maps hold up to twice their live size between sweeps."),
		evictions: d("evictions_total", "Live keys dropped to make room, by the cap that was reached (keys: --max-keys, a new key; "+
			"log_entries: --max-log-entries, a growing log) under --overflow=evict: each such key restarts from zero.", "cap"),
		rejections: d("rejections_total", "Checks refused with RESOURCE_EXHAUSTED because a cap was reached (keys: a new key at --max-keys; "+
			"log_entries: a log at --max-log-entries), under --overflow=reject or when eviction found no room.", "cap"),
		expired: d("expired_keys_total", "Keys freed because their state had expired."),
		calendarOverCap: d("calendar_keys_over_cap_total", "Calendar quotas a restore from the data directory, a handoff or a promotion brought into a partition "+
			"already at its share of --max-keys, kept past it: a spent quota is never dropped for room. Each is a key the member that sent it (or this node, before its restart) held."),
		resvOpen: d("reservations", "Reservations this node remembers as their owner: open ones and settled ones kept until their expiry so that a retried settle counts once; --max-reservations bounds it."),
		resvUnknown: d("reservations_unknown_settled", "Settles of reservations this node had no record of (SETTLED_UNKNOWN: the key changed owner) that it remembers "+
			"so that their retries count once; apart from --max-reservations, at most 65,536, the oldest forgotten first."),
		resvClosed: d("reservations_total", "Reservations (RESERVE and HOLD) by outcome: reserved, denied, settled, released, retried (a settle repeated: applied once), "+
			"unknown (settled from its token on an owner that had no record: the key changed owner), expired (reached its expiry unsettled: as used, a hold as released).", "outcome"),
		resvHits: d("adjusted_hits_total", "Hits given back (refunded: refunds, settles below a reservation, releases, expired holds) "+
			"and counted after the work (charged: charges and settles above a reservation, debt included).", "direction"),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.store.Stats()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	n := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g(c.keys, float64(st.CounterKeys), limiter.SlidingWindowCounter.String())
	g(c.keys, float64(st.LogKeys-st.ConcurrencyKeys), limiter.SlidingWindowLog.String())
	g(c.keys, float64(st.GCRAKeys), limiter.GCRA.String())
	g(c.keys, float64(st.ConcurrencyKeys), limiter.Concurrency.String())
	g(c.entries, float64(st.LogEntries))
	g(c.slots, float64(st.LogSlots))
	g(c.bytes, float64(st.Bytes))
	n(c.evictions, st.Evictions, capKeys)
	n(c.evictions, st.LogEvictions, capLogEntries)
	n(c.rejections, st.Rejections, capKeys)
	n(c.rejections, st.LogRejections, capLogEntries)
	n(c.expired, st.Expired)
	n(c.calendarOverCap, st.CalendarOverCap)
	rs := c.store.Reservations().Stats()
	g(c.resvOpen, float64(rs.Remembered))
	g(c.resvUnknown, float64(rs.RememberedUnknown))
	for outcome, v := range map[string]uint64{"reserved": rs.Reserved, "denied": rs.Denied, "settled": rs.Settled,
		"released": rs.Released, "retried": rs.Retried, "unknown": rs.Unknown, "expired": rs.Expired} {
		n(c.resvClosed, v, outcome)
	}
	n(c.resvHits, rs.RefundedHits, "refunded")
	n(c.resvHits, rs.ChargedHits, "charged")
}

// The cap label's values.
const (
	capKeys             = "keys"
	capLogEntries       = "log_entries"
	capInflightForwards = "inflight_forwards"
)

// registerCapacity exposes the configured caps, so that alerts can say
// how near a node is to one (peerlimit_keys / peerlimit_capacity), and
// the forwarded checks in flight.
func registerCapacity(reg prometheus.Registerer, cfg Config, svc *route.Service, leases *lease.Book) error {
	lc := svc.Store().Config()
	caps := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "capacity",
		Help: "The configured caps: keys (--max-keys), log_entries (--max-log-entries), inflight_forwards (--max-inflight-forwards)."},
		[]string{"cap"})
	caps.WithLabelValues(capKeys).Set(float64(lc.MaxKeys))
	caps.WithLabelValues(capLogEntries).Set(float64(lc.MaxLogEntries))
	caps.WithLabelValues(capInflightForwards).Set(float64(cfg.Route.MaxInflightForwards))
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "forwards_inflight",
		Help: "Forwarded checks waiting for their owners' answers now; --max-inflight-forwards bounds it."},
		func() float64 { return float64(svc.InflightForwards()) })
	held := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "leases_held",
		Help: "Budget leases this node holds now: part of a hot key's limit its owner lent it, admitted here without a hop."},
		func() float64 { return float64(leasesOf(leases, (*lease.Book).Held)) })
	lent := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "leases_lent",
		Help: "Budget leases this node, as their keys' owner, has lent and not yet seen settled or expired."},
		func() float64 { return float64(leasesOf(leases, (*lease.Book).Lent)) })
	for _, c := range []prometheus.Collector{caps, inflight, held, lent} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// leasesOf is count of b, or 0 with leases off.
func leasesOf(b *lease.Book, count func(*lease.Book) int) int {
	if b == nil {
		return 0
	}
	return count(b)
}

// capacityReport logs, once per sweep, what the caps cost since the last
// sweep: keys evicted (their counts restart) and checks refused. One line
// per interval however many keys a flood drops, and none while nothing
// hits a cap. Only the sweeper calls report.
type capacityReport struct {
	log  *slog.Logger
	cfg  limiter.Config
	last limiter.Stats
}

func (r *capacityReport) report(st limiter.Stats) {
	ev, rej := st.Evictions-r.last.Evictions, st.Rejections-r.last.Rejections
	logEv, logRej := st.LogEvictions-r.last.LogEvictions, st.LogRejections-r.last.LogRejections
	over := st.CalendarOverCap - r.last.CalendarOverCap
	r.last = st
	if ev+rej+logEv+logRej+over == 0 {
		return
	}
	msg := "store at capacity: evicted live keys, whose counts restart from zero"
	switch {
	case ev+rej+logEv+logRej == 0:
		msg = "store at capacity: kept calendar quotas that arrived (restore, handoff, promotion) past --max-keys"
	case r.cfg.Overflow == limiter.OverflowReject || ev+logEv == 0:
		msg = "store at capacity: refused checks with RESOURCE_EXHAUSTED"
	}
	r.log.Warn(msg, "evicted_keys", ev, "rejected_keys", rej, "evicted_logs", logEv, "rejected_logs", logRej,
		"calendar_keys_over_cap", over, "keys", st.CounterKeys+st.LogKeys+st.GCRAKeys, "max_keys", r.cfg.MaxKeys,
		"log_slots", st.LogSlots, "max_log_entries", r.cfg.MaxLogEntries, "overflow", r.cfg.Overflow.String())
}

// registerMembers exposes the members this node sees. Ring changes are
// the Core's; the configurations', package configs'.
func registerMembers(reg prometheus.Registerer, n *Node) error {
	members := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "members",
		Help: "Live members in this node's view, itself included."}, func() float64 {
		if c := n.joined.Load(); c != nil {
			return float64(len(c.Members()))
		}
		return 0
	})
	return reg.Register(members)
}
