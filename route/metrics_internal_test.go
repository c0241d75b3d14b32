package route

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Every algorithm is counted under its own name, GCRA and CONCURRENCY
// included, and a value past the last is skipped, not a panic.
func TestMetricsCountEveryAlgorithm(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	for i, a := range algorithms {
		require.Equal(t, limiter.Algorithm(i), a, "algorithms is indexed by value")
	}
	for a := limiter.SlidingWindowCounter; a <= limiter.Concurrency; a++ {
		m.check(a, routeLocal, peer.Result{Decision: limiter.Decision{Allowed: true}})
		m.peerCheck(a, peer.Result{Err: errors.New("x")})
		assert.Equal(t, 1.0, metrictest.Value(t, reg, "peerlimit_checks_total", "algorithm", a.String(), "route", "local", "outcome", "allowed"), a.String())
		assert.Equal(t, 1.0, metrictest.Value(t, reg, "peerlimit_peer_checks_total", "algorithm", a.String(), "outcome", "error"), a.String())
	}
	m.check(limiter.Concurrency+1, routeLocal, peer.Result{})
	m.peerCheck(255, peer.Result{})
}
