package console

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/peer"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sampler turns a node's metrics into the console's samples: once a
// second (Sample, called by the node's loop) it reads the registry and
// keeps the rates since the previous read, up to Keep samples. Reading the
// registry, not hooks in the request path, keeps one source of truth: the
// page shows what Prometheus scrapes, and the check path pays nothing.
// Safe for concurrent use.
type Sampler struct {
	g    prometheus.Gatherer
	keep int

	mu      sync.Mutex
	prev    totals
	prevAt  time.Time
	samples []peer.Sample // oldest first, at most keep
}

// DefaultKeep is five minutes of one-second samples.
const DefaultKeep = 300

// NewSampler samples g, keeping the last keep samples.
func NewSampler(g prometheus.Gatherer, keep int) (*Sampler, error) {
	if keep < 1 {
		return nil, fmt.Errorf("console: keep must be ≥ 1, got %d", keep)
	}
	return &Sampler{g: g, keep: keep}, nil
}

// totals are the cumulative values a sample is the difference of.
type totals struct {
	checks      [3][2]float64 // [route][allowed, denied]: local, forwarded, fallback
	errors      float64
	peerChecks  float64
	degraded    float64
	handoffKeys float64
	forward     histogram // peerlimit_forward_duration_seconds{result="ok"}
	replLag     histogram // peerlimit_replication_lag_seconds
}

type histogram struct {
	bounds []float64 // upper bounds, ascending, +Inf excluded
	counts []float64 // cumulative count at each bound
	total  float64
}

// Sample reads the registry at now and records the rates since the
// previous call. The first call only sets the baseline.
func (s *Sampler) Sample(now time.Time) error {
	mfs, err := s.g.Gather()
	if err != nil {
		return fmt.Errorf("console: gathering metrics: %w", err)
	}
	cur := read(mfs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.prevAt.IsZero() && now.After(s.prevAt) {
		s.samples = append(s.samples, diff(s.prev, cur, now, now.Sub(s.prevAt).Seconds()))
		if over := len(s.samples) - s.keep; over > 0 {
			s.samples = append(s.samples[:0], s.samples[over:]...)
		}
	}
	s.prev, s.prevAt = cur, now
	return nil
}

// Since returns the samples newer than t, oldest first (a copy).
func (s *Sampler) Since(t time.Time) []peer.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.samples), func(i int) bool { return s.samples[i].Time.After(t) })
	return append([]peer.Sample(nil), s.samples[i:]...)
}

// routeIndex maps checks_total's routes to the sample's: a check admitted
// from a budget lease was decided here, without a hop, so it is local.
var routeIndex = map[string]int{"local": 0, "leased": 0, "forwarded": 1, "fallback": 2}

// The metrics the console reads, by name: other packages register them
// (route, handoff, replica).
const (
	checksMetric      = "peerlimit_checks_total"
	peerChecksMetric  = "peerlimit_peer_checks_total"
	unreachableMetric = "peerlimit_owner_unreachable_total"
	handoffMetric     = "peerlimit_handoff_keys_total"
	forwardMetric     = "peerlimit_forward_duration_seconds"
	replLagMetric     = "peerlimit_replication_lag_seconds"
)

// Series is a metric the console reads: its name and, if it selects on
// one, a label and the values of it that it reads.
type Series struct {
	Name   string
	Label  string
	Values []string
}

// Reads lists every series read picks, by name and label value. A node
// registers them all; node's TestConsoleReadsRegisteredSeries checks it,
// so that a metric renamed elsewhere fails a test instead of blanking a
// chart of the page in silence.
var Reads = []Series{
	{checksMetric, "route", []string{"local", "leased", "forwarded", "fallback"}},
	{checksMetric, "outcome", []string{"allowed", "denied", "error"}},
	{Name: peerChecksMetric},
	{unreachableMetric, "policy", []string{"relay"}},
	{handoffMetric, "direction", []string{"sent"}},
	{forwardMetric, "result", []string{"ok"}},
	{Name: replLagMetric},
}

// read picks the series the console shows out of a gathered registry.
func read(mfs []*dto.MetricFamily) totals {
	var t totals
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case checksMetric:
				addCheck(&t, label(m, "route"), label(m, "outcome"), m.GetCounter().GetValue())
			case peerChecksMetric:
				t.peerChecks += m.GetCounter().GetValue()
			case unreachableMetric:
				if label(m, "policy") != "relay" { // a relay is the owner's own answer; the rest are degraded
					t.degraded += m.GetCounter().GetValue()
				}
			case handoffMetric:
				if label(m, "direction") == "sent" {
					t.handoffKeys += m.GetCounter().GetValue()
				}
			case forwardMetric:
				if label(m, "result") == "ok" {
					t.forward = readHistogram(m.GetHistogram())
				}
			case replLagMetric:
				t.replLag = readHistogram(m.GetHistogram())
			}
		}
	}
	return t
}

func addCheck(t *totals, route, outcome string, v float64) {
	r, ok := routeIndex[route]
	switch {
	case outcome == "error":
		t.errors += v
	case !ok:
	case outcome == "allowed":
		t.checks[r][0] += v
	case outcome == "denied":
		t.checks[r][1] += v
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func readHistogram(h *dto.Histogram) histogram {
	out := histogram{total: float64(h.GetSampleCount())}
	for _, b := range h.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			out.bounds = append(out.bounds, b.GetUpperBound())
			out.counts = append(out.counts, float64(b.GetCumulativeCount()))
		}
	}
	return out
}

// diff is the sample between two reads dt seconds apart. A counter that
// went down (a registry that restarted) counts from zero.
func diff(a, b totals, now time.Time, dt float64) peer.Sample {
	rate := func(x, y float64) float64 {
		if y < x {
			x = 0
		}
		return (y - x) / dt
	}
	return peer.Sample{
		Time:         now,
		LocalAllowed: rate(a.checks[0][0], b.checks[0][0]), LocalDenied: rate(a.checks[0][1], b.checks[0][1]),
		ForwardedAllowed: rate(a.checks[1][0], b.checks[1][0]), ForwardedDenied: rate(a.checks[1][1], b.checks[1][1]),
		FallbackAllowed: rate(a.checks[2][0], b.checks[2][0]), FallbackDenied: rate(a.checks[2][1], b.checks[2][1]),
		Errors: rate(a.errors, b.errors), PeerChecks: rate(a.peerChecks, b.peerChecks), Degraded: rate(a.degraded, b.degraded),
		HandoffKeys:       rate(a.handoffKeys, b.handoffKeys),
		ForwardP99:        quantile(a.forward, b.forward, 0.99),
		ReplicationLagP99: quantile(a.replLag, b.replLag, 0.99),
	}
}

// quantile estimates the q-quantile of the observations between two reads
// of a histogram as Prometheus's histogram_quantile does: linear
// interpolation within the bucket that holds it; the largest finite bound
// if it lies beyond. Negative: nothing was observed.
func quantile(a, b histogram, q float64) time.Duration {
	n := b.total - a.total
	if n <= 0 || len(b.bounds) == 0 {
		return -1
	}
	rank := q * n
	lower, below := 0.0, 0.0
	for i, ub := range b.bounds {
		c := b.counts[i]
		if i < len(a.counts) && len(a.counts) == len(b.counts) {
			c -= a.counts[i]
		}
		if c >= rank {
			in := c - below
			v := ub
			if in > 0 {
				v = lower + (ub-lower)*(rank-below)/in
			}
			return time.Duration(v * float64(time.Second))
		}
		lower, below = ub, c
	}
	return time.Duration(b.bounds[len(b.bounds)-1] * float64(time.Second))
}
