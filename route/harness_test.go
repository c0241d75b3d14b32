package route_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is a whole number of seconds since the epoch, so 1000 ms windows
// start exactly at t0.
const t0 = 1_700_000_000_000

// member is one node of a test cluster: a route.Service with its own
// store, logs and metrics, on the cluster's in-memory network.
type member struct {
	id     string
	svc    *route.Service
	store  *limiter.Store
	peers  *memnet.Peers
	leases *lease.Book // nil unless the cluster has leases on
	logs   *testlog.Capture
	reg    *prometheus.Registry
}

// cluster is route.Services on a memnet.Network, sharing one ring and one
// clock: the request path of a cluster, with no gossip and no gRPC, and
// faults injected through net.
type cluster struct {
	net     *memnet.Network
	ring    *ring.Ring
	clock   *fakeclock.Clock
	members map[string]*member
}

// clusterOpts adjust a test cluster.
type clusterOpts struct {
	seed    uint64
	timeout time.Duration // of every call between members
	route   func(id string, c *route.Config)
	leases  bool // budget leases on, with the defaults
	// share, if set, is every member's count of live and known members
	// (route.Cluster.Share); nil: all members of the ring, all live.
	share   func() (live, known int)
	limiter func(id string, c *limiter.Config)
	// view, if set, replaces member id's view of the cluster (base: the
	// ring every member shares).
	view func(id string, base route.Cluster) route.Cluster
	// tracer, if set, is every member's Deps.Tracer.
	tracer trace.Tracer
}

// newCluster starts members ids on a fresh network. The network's seed
// is random unless given, and printed if the test fails.
func newCluster(t testing.TB, ids []string, opts ...func(*clusterOpts)) *cluster {
	t.Helper()
	o := clusterOpts{seed: rand.Uint64(), timeout: 500 * time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("memnet seed: %d", o.seed)
		}
	})
	c := &cluster{net: memnet.New(o.seed, o.timeout), ring: testring.New(t, ids...), clock: fakeclock.AtMilli(t0), members: map[string]*member{}}
	t.Cleanup(c.net.Close)
	for _, id := range ids {
		c.members[id] = c.start(t, id, o)
	}
	return c
}

func (c *cluster) start(t testing.TB, id string, o clusterOpts) *member {
	t.Helper()
	lcfg := limiter.DefaultConfig()
	if o.limiter != nil {
		o.limiter(id, &lcfg)
	}
	store, err := limiter.New(lcfg, partition.DefaultCount)
	require.NoError(t, err)
	m := &member{id: id, store: store, peers: c.net.Join(id), logs: testlog.NewCapture(), reg: prometheus.NewRegistry()}
	metrics, err := route.NewMetrics(m.reg)
	require.NoError(t, err)
	rcfg := route.DefaultConfig()
	if o.route != nil {
		o.route(id, &rcfg)
	}
	var view route.Cluster = route.FixedCluster(c.ring)
	if o.share != nil {
		view = sharing{view, o.share}
	}
	if o.view != nil {
		view = o.view(id, view)
	}
	deps := route.Deps{NodeID: id, Store: store, Now: c.clock.Now, Cluster: view,
		Peers: m.peers, Metrics: metrics, Logger: slog.New(m.logs), Tracer: o.tracer}
	// Leases off unless a test turns them on: at the harness's frozen
	// clock any key checked 3 times from one member would be leased, and
	// most tests are about what forwarding does.
	if o.leases {
		lm, err := lease.NewMetrics(m.reg)
		require.NoError(t, err)
		m.leases, err = lease.New(lease.DefaultConfig(), lease.Deps{Store: store, Peers: m.peers, Metrics: lm, Logger: slog.New(m.logs)})
		require.NoError(t, err)
		deps.Leases = m.leases
	}
	m.svc, err = route.NewService(rcfg, deps)
	require.NoError(t, err)
	m.peers.Serve(m.svc.Peer)
	return m
}

// sharing is a route.Cluster whose Share is the test's.
type sharing struct {
	route.Cluster
	share func() (live, known int)
}

func (s sharing) Share() (live, known int) { return s.share() }

// key returns the first key "<prefix>:<i>" the ring gives to owner.
func (c *cluster) key(t testing.TB, owner, prefix string) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("%s:%d", prefix, i); c.ring.Owner(k).ID == owner {
			return k
		}
	}
	t.Fatalf("no key of %s's", owner)
	return ""
}

// logReq is a request on the log algorithm, which never over-admits.
func logReq(key string, limit int64, window time.Duration) limiter.Request {
	return limiter.Request{Key: key, Limit: limit, Window: window, Algorithm: limiter.SlidingWindowLog, Hits: 1}
}

// counterReq is a request on the counter algorithm.
func counterReq(key string, limit int64, window time.Duration) limiter.Request {
	return limiter.Request{Key: key, Limit: limit, Window: window, Algorithm: limiter.SlidingWindowCounter, Hits: 1}
}

// held returns what m's own store counts for req's key and limit now, by
// peeking at it.
func (m *member) held(t testing.TB, now time.Time, req limiter.Request) int64 {
	t.Helper()
	req.Hits = 0
	d, err := m.store.Check(now, req)
	require.NoError(t, err)
	return d.CurrentCount
}

var bg = context.Background()

// metric reads one series of reg.
func metric(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	return metrictest.Value(t, reg, name, labels...)
}
