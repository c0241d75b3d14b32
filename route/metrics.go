package route

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Metrics counts the request path. Every series is resolved once, in
// NewMetrics, so observing costs an array index and an atomic add, never a
// label lookup; histograms are observed once per call, not per check. A
// nil *Metrics observes nothing. Labels never carry keys or ids: their
// values are the fixed sets below.
type Metrics struct {
	checks      [len(algorithms)][4][3]prometheus.Counter // [algorithm][route][outcome]
	peerChecks  [len(algorithms)][3]prometheus.Counter    // [algorithm][outcome]
	forwards    [3]prometheus.Counter                     // [ok, failed, refused]
	fallbacks   [4]prometheus.Counter                     // by FallbackPolicy
	rescues     [2]prometheus.Counter                     // answered by the owner through a relay, by its heir
	fwdDuration [2]prometheus.Observer                    // [ok, error]
	fwdSize     prometheus.Observer
	batchSize   prometheus.Observer
	all         [2]prometheus.Counter // all-or-nothing batches: [refused, admitted]
}

// Outcomes of a check.
const (
	outcomeAllowed = iota
	outcomeDenied
	outcomeError
)

// Routes of a check: who answered it.
const (
	routeLocal     = iota // this node owns the key
	routeForwarded        // another node owns it (answered, or the error of trying)
	routeFallback         // its owner was unreachable; the fallback policy answered
	routeLeased           // admitted here from a budget lease its owner lent this node
)

// Results of forwarding one check.
const (
	forwardOK      = iota // the owner answered
	forwardFailed         // the owner could not be asked: the fallback answered
	forwardRefused        // never sent: MaxInflightForwards checks were waiting already
)

var (
	outcomeNames = [...]string{"allowed", "denied", "error"}
	routeNames   = [...]string{"local", "forwarded", "fallback", "leased"}
	forwardNames = [...]string{"ok", "failed", "refused"}
	// algorithms are every algorithm, indexed by value: an algorithm
	// missing here would go uncounted (check and peerCheck skip it).
	algorithms = [...]limiter.Algorithm{limiter.SlidingWindowCounter, limiter.SlidingWindowLog, limiter.GCRA, limiter.Concurrency}
)

// NewMetrics registers the request path's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	checks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "checks_total",
		Help: "Checks clients sent to this node, counted once, here, by algorithm, route (local: this node owns the key; " +
			"forwarded: another node owns it; fallback: its owner was unreachable and the fallback policy answered, degraded; " +
			"leased: another node owns it and lent this node part of its limit, which admitted it here, exact) " +
			"and outcome (allowed, denied, error).",
	}, []string{"algorithm", "route", "outcome"})
	peer := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "peer_checks_total",
		Help:      "Checks other nodes forwarded to this node and it decided as their owner, by algorithm and outcome.",
	}, []string{"algorithm", "outcome"})
	fwd := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "forwards_total",
		Help: "Checks forwarded to their owner, by result: ok (the owner answered), failed (it could not be asked), " +
			"refused (not sent: --max-inflight-forwards checks were already waiting).",
	}, []string{"result"})
	unr := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "owner_unreachable_total",
		Help:      "Checks whose owner could not be reached: answered by the owner through another member (relay), by the owner's heir from its replica (heir), or by the fallback policy (local, allow, deny); all but relay are marked degraded.",
	}, []string{"policy"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "peerlimit",
		Name:      "forward_duration_seconds",
		Help:      "Duration of each Forward call to an owner (one call carries a batch of checks), by result: ok or error.",
		Buckets:   prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs to 1.6s
	}, []string{"result"})
	size := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "peerlimit",
		Name:      "forward_batch_size",
		Help:      "Checks carried by each Forward call to an owner.",
		Buckets:   prometheus.ExponentialBuckets(1, 2, 11), // 1 to 1024
	})
	batch := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "peerlimit",
		Name:      "check_batch_size",
		Help:      "Checks in each CheckBatch call (gRPC or HTTP) this node received, not counting items that failed to parse.",
		Buckets:   prometheus.ExponentialBuckets(1, 2, 11),
	})
	all := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "peerlimit",
		Name:      "all_or_nothing_total",
		Help:      "All-or-nothing batches this node coordinated, by outcome: admitted (every check held, then committed) or refused (one was denied or failed; every hold released).",
	}, []string{"outcome"})
	for _, c := range []prometheus.Collector{checks, peer, fwd, unr, dur, size, batch, all} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m := &Metrics{fwdSize: size, batchSize: batch,
		all: [2]prometheus.Counter{all.WithLabelValues("refused"), all.WithLabelValues("admitted")}}
	for _, a := range algorithms {
		for o, outcome := range outcomeNames {
			for r, route := range routeNames {
				m.checks[a][r][o] = checks.WithLabelValues(a.String(), route, outcome)
			}
			m.peerChecks[a][o] = peer.WithLabelValues(a.String(), outcome)
		}
	}
	for r, name := range forwardNames {
		m.forwards[r] = fwd.WithLabelValues(name)
	}
	for p := FallbackLocal; p <= FallbackShare; p++ {
		m.fallbacks[p] = unr.WithLabelValues(p.String())
	}
	m.rescues[0], m.rescues[1] = unr.WithLabelValues("relay"), unr.WithLabelValues("heir")
	m.fwdDuration[0], m.fwdDuration[1] = dur.WithLabelValues("ok"), dur.WithLabelValues("error")
	return m, nil
}

func outcome(res peer.Result) int {
	switch {
	case res.Err != nil:
		return outcomeError
	case res.Decision.Allowed:
		return outcomeAllowed
	}
	return outcomeDenied
}

// check counts a check answered to a client.
func (m *Metrics) check(a limiter.Algorithm, route int, res peer.Result) {
	if m == nil || int(a) >= len(m.checks) {
		return
	}
	m.checks[a][route][outcome(res)].Inc()
}

// peerCheck counts a check decided here for another node.
func (m *Metrics) peerCheck(a limiter.Algorithm, res peer.Result) {
	if m == nil || int(a) >= len(m.peerChecks) {
		return
	}
	m.peerChecks[a][outcome(res)].Inc()
}

func (m *Metrics) forwarded(result int, n int) {
	if m != nil {
		m.forwards[result].Add(float64(n))
	}
}

// rescued counts a check whose owner this node could not reach, answered
// by the owner through a relay, or by its heir (degraded).
func (m *Metrics) rescued(byHeir bool) {
	if m == nil {
		return
	}
	if byHeir {
		m.rescues[1].Inc()
	} else {
		m.rescues[0].Inc()
	}
}

func (m *Metrics) unreachable(p FallbackPolicy) {
	if m != nil && int(p) < len(m.fallbacks) {
		m.fallbacks[p].Inc()
	}
}

// ForwardCall records one call that carried checks to their owner: how
// long it took and how many it carried. Peers implementations call it.
func (m *Metrics) ForwardCall(start time.Time, checks int, err error) {
	if m == nil {
		return
	}
	r := 0
	if err != nil {
		r = 1
	}
	m.fwdDuration[r].Observe(time.Since(start).Seconds())
	m.fwdSize.Observe(float64(checks))
}

func (m *Metrics) allOrNothing(admitted bool) {
	if m != nil {
		i := 0
		if admitted {
			i = 1
		}
		m.all[i].Inc()
	}
}

func (m *Metrics) checkBatch(n int) {
	if m != nil {
		m.batchSize.Observe(float64(n))
	}
}
