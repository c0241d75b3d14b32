package console_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/console"
)

// fakeNodeMetrics registers the series the sampler reads, under the
// node's names and labels.
type fakeNodeMetrics struct {
	checks, peer, unreachable, handoff *prometheus.CounterVec
	forward                            *prometheus.HistogramVec
	lag                                prometheus.Histogram
}

func newFakeNodeMetrics(t *testing.T, reg *prometheus.Registry) *fakeNodeMetrics {
	m := &fakeNodeMetrics{
		checks:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "peerlimit_checks_total"}, []string{"algorithm", "route", "outcome"}),
		peer:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "peerlimit_peer_checks_total"}, []string{"algorithm", "outcome"}),
		unreachable: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "peerlimit_owner_unreachable_total"}, []string{"policy"}),
		handoff:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "peerlimit_handoff_keys_total"}, []string{"direction"}),
		forward: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "peerlimit_forward_duration_seconds",
			Buckets: []float64{0.001, 0.002, 0.004}}, []string{"result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "peerlimit_replication_lag_seconds", Buckets: []float64{.01, .025}}),
	}
	for _, c := range []prometheus.Collector{m.checks, m.peer, m.unreachable, m.handoff, m.forward, m.lag} {
		require.NoError(t, reg.Register(c))
	}
	return m
}

func TestSamplerTurnsCountersIntoRatesPerSecond(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newFakeNodeMetrics(t, reg)
	s, err := console.NewSampler(reg, 3)
	require.NoError(t, err)
	t0 := time.UnixMilli(1_700_000_000_000)
	m.checks.WithLabelValues("SLIDING_WINDOW_COUNTER", "local", "allowed").Add(1000) // before the baseline: not counted
	require.NoError(t, s.Sample(t0))
	assert.Empty(t, s.Since(time.Time{}), "the first read is the baseline")

	m.checks.WithLabelValues("SLIDING_WINDOW_COUNTER", "local", "allowed").Add(20)
	m.checks.WithLabelValues("SLIDING_WINDOW_LOG", "local", "allowed").Add(10)
	m.checks.WithLabelValues("SLIDING_WINDOW_COUNTER", "forwarded", "denied").Add(4)
	m.checks.WithLabelValues("SLIDING_WINDOW_COUNTER", "fallback", "allowed").Add(2)
	m.checks.WithLabelValues("SLIDING_WINDOW_COUNTER", "forwarded", "error").Add(6)
	m.peer.WithLabelValues("SLIDING_WINDOW_COUNTER", "allowed").Add(8)
	m.unreachable.WithLabelValues("relay").Add(100) // the owner's answer: not degraded
	m.unreachable.WithLabelValues("heir").Add(2)
	m.unreachable.WithLabelValues("local").Add(2)
	m.handoff.WithLabelValues("sent").Add(40)
	m.handoff.WithLabelValues("received").Add(1000)
	for range 99 {
		m.forward.WithLabelValues("ok").Observe(0.0005)
	}
	m.forward.WithLabelValues("ok").Observe(0.003)
	m.forward.WithLabelValues("error").Observe(10)
	require.NoError(t, s.Sample(t0.Add(2*time.Second)))

	got := s.Since(time.Time{})
	require.Len(t, got, 1)
	smp := got[0]
	assert.Equal(t, t0.Add(2*time.Second), smp.Time)
	assert.InDelta(t, 15, smp.LocalAllowed, 1e-9, "30 over 2 s, both algorithms")
	assert.InDelta(t, 2, smp.ForwardedDenied, 1e-9)
	assert.InDelta(t, 1, smp.FallbackAllowed, 1e-9)
	assert.InDelta(t, 3, smp.Errors, 1e-9)
	assert.InDelta(t, 4, smp.PeerChecks, 1e-9)
	assert.InDelta(t, 2, smp.Degraded, 1e-9)
	assert.InDelta(t, 20, smp.HandoffKeys, 1e-9)
	// 99 of 100 calls in the first bucket: the 99th percentile is its top.
	assert.Equal(t, time.Millisecond, smp.ForwardP99)
	assert.Negative(t, smp.ReplicationLagP99, "nothing observed")
}

func TestSamplerKeepsTheNewestAndAnswersSince(t *testing.T) {
	reg := prometheus.NewRegistry()
	newFakeNodeMetrics(t, reg)
	s, err := console.NewSampler(reg, 3)
	require.NoError(t, err)
	t0 := time.UnixMilli(1_700_000_000_000)
	for i := range 6 {
		require.NoError(t, s.Sample(t0.Add(time.Duration(i)*time.Second)))
	}
	all := s.Since(time.Time{})
	require.Len(t, all, 3)
	assert.Equal(t, t0.Add(3*time.Second), all[0].Time)
	assert.Len(t, s.Since(t0.Add(4*time.Second)), 1)
	assert.Empty(t, s.Since(t0.Add(5*time.Second)))
	_, err = console.NewSampler(reg, 0)
	assert.Error(t, err)
}
