package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/internal/latency"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// BenchmarkCluster measures a 3-node cluster on loopback: in-process nodes,
// real gossip, real gRPC, the load client in the same process. Every call
// goes to a node picked at random, independently of its key, so about 2/3
// of the checks are forwarded to their owner (the fwd-% metric says how
// many were). Each workload also runs against one node alone (one-node):
// compare the cluster with that baseline of the same run, not with numbers
// from another day; the machine is shared and noisy. See
// docs/cluster-benchmarks.md.
//
//	single/*    unary Check, 64 concurrent callers; p50/p99 per call
//	batch100/*  CheckBatch of 100 checks, 8 concurrent callers; ns/op and
//	            checks/s per check, p50/p99 per batch call
//	idle        one caller, every check sent to a node that does not own
//	            its key: the latency of a forwarded check on an idle
//	            cluster (target: p99 under 1 ms)
//
// batching=off sets every node's Peers.BatchLimit to 1: each forwarded check
// is its own Forward RPC. batching=on keeps the defaults: forwarded checks
// go in batches on one ForwardStream per pair of nodes, those of unary
// Checks and of CheckBatch calls alike. persist=on is batching=on with a
// data directory per node (docs/benchmarks.md, "Persistence").
//
// Run: go test ./node -run '^$' -bench Cluster -benchtime 3s -count 3
func BenchmarkCluster(b *testing.B) {
	setups := []clusterSetup{
		{name: "one-node", nodes: 1, batching: true},
		{name: "batching=on", nodes: 3, batching: true},
		{name: "batching=off", nodes: 3, batching: false},
		{name: "persist=on", nodes: 3, batching: true, persist: true},
	}
	b.Run("single", func(b *testing.B) {
		for _, s := range setups {
			b.Run(s.name, func(b *testing.B) { benchClusterSingle(b, s) })
		}
	})
	b.Run("batch100", func(b *testing.B) {
		for _, s := range setups {
			b.Run(s.name, func(b *testing.B) { benchClusterBatch(b, s, 100) })
		}
	})
	b.Run("idle", func(b *testing.B) { benchClusterIdle(b, setups[1]) })
}

const (
	clusterBenchKeys  = 10_000
	clusterBenchLimit = 1 << 40 // never reached: every check is allowed
)

// The keys are formatted once, so the load client spends its share of the
// two cores on calls, not on Sprintf.
var clusterBenchKeyList = sync.OnceValue(func() []string {
	keys := make([]string, clusterBenchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:7:user:%d", i)
	}
	return keys
})

type clusterSetup struct {
	name     string
	nodes    int
	batching bool
	// persist gives every node a data directory (--data-dir) in the
	// test's temporary directory: what persistence adds to a check is
	// batching=on's ns/op against this one's, in the same run.
	persist bool
}

// clusterEnv is a running cluster and one client connection per node.
type clusterEnv struct {
	c       *testcluster.Cluster
	clients []pb.RateLimiterClient
	ids     []string // ids[i] is the node clients[i] talks to
	warns   *testlog.WarnCounter
	// Forward RPCs between nodes and the checks they carried, counted by
	// a client interceptor on the peer connections.
	fwdRPCs, fwdChecks atomic.Int64
}

// startClusterEnv starts the cluster, waits for it to converge and warms
// every path up; all of it before the caller's ResetTimer. The harness's
// Cleanup kills the nodes; the connections close before that.
func startClusterEnv(b *testing.B, s clusterSetup) *clusterEnv {
	b.Helper()
	env := &clusterEnv{warns: testlog.NewWarnCounter()}
	env.c = testcluster.New(b, s.nodes, func(cfg *node.Config) {
		// Quiet: count warnings and errors instead of logging each one
		// (benchmark output always shows b.Log lines).
		cfg.Logger = slog.New(env.warns)
		if !s.batching {
			cfg.Peers.BatchLimit = 1
		}
		if s.persist {
			cfg.Persist.Dir, cfg.ClusterName = b.TempDir(), "bench"
		}
		cfg.PeerDialOptions = append(cfg.PeerDialOptions, grpc.WithChainUnaryInterceptor(env.countForwards),
			grpc.WithChainStreamInterceptor(env.countStreamForwards))
	})
	for _, n := range env.c.Live() {
		conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		env.clients = append(env.clients, pb.NewRateLimiterClient(conn))
		env.ids = append(env.ids, n.ID())
	}
	// Warm-up: connect the client, and send every node's checks over its
	// peer connections once.
	keys := clusterBenchKeyList()
	for i, c := range env.clients {
		for j := range 100 {
			req := &pb.CheckRequest{Key: keys[(i*100+j)%len(keys)], Limit: clusterBenchLimit, WindowMs: 60_000}
			if _, err := c.Check(context.Background(), req); err != nil {
				b.Fatalf("warm-up check on %s: %v", env.ids[i], err)
			}
		}
	}
	env.warns.Reset() // the joins' warnings, if any, are not the run's
	env.fwdRPCs.Store(0)
	env.fwdChecks.Store(0)
	return env
}

// countForwards counts the Forward calls a node makes and their checks:
// checks/fwd-rpc is the batch size the forwarding path achieved.
func (env *clusterEnv) countForwards(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if fr, ok := req.(*pb.ForwardRequest); ok {
		env.fwdRPCs.Add(1)
		env.fwdChecks.Add(int64(len(fr.GetChecks())))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// countStreamForwards counts the batches a node sends on its
// ForwardStreams, as countForwards counts Forward calls.
func (env *clusterEnv) countStreamForwards(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countingStream{ClientStream: s, env: env}, nil
}

type countingStream struct {
	grpc.ClientStream
	env *clusterEnv
}

func (s *countingStream) SendMsg(m any) error {
	if fr, ok := m.(*pb.ForwardRequest); ok {
		s.env.fwdRPCs.Add(1)
		s.env.fwdChecks.Add(int64(len(fr.GetChecks())))
	}
	return s.ClientStream.SendMsg(m)
}

// after adds checks/fwd-rpc to the benchmark's line, and logs what went
// wrong in the timed run without failing it: a warning (a suspected member,
// an unreachable owner) or a degraded answer means the run measured
// something else than the normal path.
func (env *clusterEnv) after(b *testing.B, degraded int64) {
	if n := env.fwdRPCs.Load(); n > 0 {
		b.ReportMetric(float64(env.fwdChecks.Load())/float64(n), "checks/fwd-rpc")
	}
	if n, first := env.warns.Count(); n > 0 {
		b.Logf("%d warnings/errors logged during the run; first: %s", n, first)
	}
	if degraded > 0 {
		b.Logf("%d degraded answers (owner unreachable, fallback answered)", degraded)
	}
	for _, n := range env.c.Live() {
		if got := len(n.Members()); got != len(env.ids) {
			b.Logf("after the run %s sees %d members, want %d", n.ID(), got, len(env.ids))
		}
	}
}

// Unary checks, 64 concurrent callers sharing one connection per node, each
// call to a random node with a random key. Latency is per call.
func benchClusterSingle(b *testing.B, s clusterSetup) {
	env := startClusterEnv(b, s)
	keys := clusterBenchKeyList()
	procs := runtime.GOMAXPROCS(0)
	par := max(1, 64/procs) // × GOMAXPROCS (2) = 64 callers
	b.SetParallelism(par)
	rec := newLatencyRecorder(par*procs, 2*b.N/(par*procs)+64)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(p *testing.PB) {
		w := rec.worker()
		defer rec.done(w)
		req := &pb.CheckRequest{Limit: clusterBenchLimit, WindowMs: 60_000, Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER}
		for p.Next() {
			ni := rand.IntN(len(env.clients))
			req.Key = keys[rand.IntN(len(keys))]
			t0 := time.Now()
			resp, err := env.clients[ni].Check(context.Background(), req)
			w.lat = append(w.lat, time.Since(t0))
			if err != nil {
				b.Error(err)
				return
			}
			w.checks++
			if resp.GetOwner() != env.ids[ni] {
				w.forwarded++
			}
			if resp.GetDegraded() {
				w.degraded++
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	rec.report(b, elapsed)
	env.after(b, rec.degraded)
}

// Batches of size checks to a random node, 8 concurrent callers; each
// iteration is one check (a batch goes out every size iterations), so ns/op
// and checks/s are per check. Latency is per batch call of size checks.
func benchClusterBatch(b *testing.B, s clusterSetup, size int) {
	env := startClusterEnv(b, s)
	keys := clusterBenchKeyList()
	procs := runtime.GOMAXPROCS(0)
	par := max(1, 8/procs) // × GOMAXPROCS (2) = 8 callers
	b.SetParallelism(par)
	rec := newLatencyRecorder(par*procs, 2*b.N/(size*par*procs)+64)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(p *testing.PB) {
		w := rec.worker()
		defer rec.done(w)
		req := &pb.CheckBatchRequest{Checks: make([]*pb.CheckRequest, size)}
		for j := range req.Checks {
			req.Checks[j] = &pb.CheckRequest{Limit: clusterBenchLimit, WindowMs: 60_000, Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER}
		}
		// send sends the first n checks to a random node; a full batch's
		// latency is recorded.
		send := func(n int) bool {
			batch := req
			if n < size {
				batch = &pb.CheckBatchRequest{Checks: req.Checks[:n]}
			}
			for _, r := range batch.Checks {
				r.Key = keys[rand.IntN(len(keys))]
			}
			ni := rand.IntN(len(env.clients))
			t0 := time.Now()
			resp, err := env.clients[ni].CheckBatch(context.Background(), batch)
			if n == size {
				w.lat = append(w.lat, time.Since(t0))
			}
			if err != nil {
				b.Error(err)
				return false
			}
			for _, r := range resp.GetResults() {
				if e := r.GetError(); e != nil {
					b.Errorf("batch item: code %d: %s", e.GetCode(), e.GetMessage())
					return false
				}
				w.checks++
				if r.GetResponse().GetOwner() != env.ids[ni] {
					w.forwarded++
				}
				if r.GetResponse().GetDegraded() {
					w.degraded++
				}
			}
			return true
		}
		n := 0
		for p.Next() {
			if n++; n < size {
				continue
			}
			n = 0
			if !send(size) {
				return
			}
		}
		// The iterations left over make a smaller last batch, so every
		// iteration is a check even for a small b.N (-benchtime 100x).
		if n > 0 {
			send(n)
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	rec.report(b, elapsed)
	env.after(b, rec.degraded)
}

// One caller, each check to a node that does not own its key: what a
// forwarded check costs in latency when nothing else is going on.
func benchClusterIdle(b *testing.B, s clusterSetup) {
	env := startClusterEnv(b, s)
	keys := clusterBenchKeyList()
	nodes := env.c.Live()
	// Each key goes to the first node that is not its owner.
	via := make([]int, len(keys))
	for k, key := range keys {
		owner := nodes[0].Ring().Owner(key).ID
		for via[k] = 0; env.ids[via[k]] == owner; via[k]++ {
		}
	}
	rec := newLatencyRecorder(1, b.N+1)
	w := rec.worker()
	req := &pb.CheckRequest{Limit: clusterBenchLimit, WindowMs: 60_000}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		k := i % len(keys)
		req.Key = keys[k]
		t0 := time.Now()
		resp, err := env.clients[via[k]].Check(context.Background(), req)
		w.lat = append(w.lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		w.checks++
		if resp.GetOwner() != env.ids[via[k]] {
			w.forwarded++
		}
		if resp.GetDegraded() {
			w.degraded++
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	rec.done(w)
	rec.report(b, elapsed)
	env.after(b, rec.degraded)
}

// latencyRecorder gives every caller goroutine its own slice and counters,
// allocated before the timer starts, and merges them once the goroutine is
// done: the timed loop shares nothing but the connections.
type latencyRecorder struct {
	workers []*latencyWorker
	next    atomic.Int64

	mu                          sync.Mutex
	lat                         []time.Duration
	checks, forwarded, degraded int64
}

type latencyWorker struct {
	lat                         []time.Duration
	checks, forwarded, degraded int64
}

// newLatencyRecorder prepares goroutines workers with room for perWorker
// samples each (append grows a slice that gets more than its share).
func newLatencyRecorder(goroutines, perWorker int) *latencyRecorder {
	r := &latencyRecorder{workers: make([]*latencyWorker, goroutines)}
	for i := range r.workers {
		r.workers[i] = &latencyWorker{lat: make([]time.Duration, 0, perWorker)}
	}
	return r
}

func (r *latencyRecorder) worker() *latencyWorker {
	if i := r.next.Add(1) - 1; int(i) < len(r.workers) {
		return r.workers[i]
	}
	return &latencyWorker{} // RunParallel started more goroutines than expected
}

func (r *latencyRecorder) done(w *latencyWorker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat = append(r.lat, w.lat...)
	r.checks += w.checks
	r.forwarded += w.forwarded
	r.degraded += w.degraded
}

// report adds checks/s, p50-µs, p99-µs and fwd-% (the share of checks the
// receiving node forwarded) to the benchmark's line.
func (r *latencyRecorder) report(b *testing.B, elapsed time.Duration) {
	b.ReportMetric(float64(r.checks)/elapsed.Seconds(), "checks/s")
	if len(r.lat) > 0 {
		slices.Sort(r.lat)
		b.ReportMetric(float64(latency.Percentile(r.lat, 50))/1e3, "p50-µs")
		b.ReportMetric(float64(latency.Percentile(r.lat, 99))/1e3, "p99-µs")
	}
	if r.checks > 0 {
		b.ReportMetric(100*float64(r.forwarded)/float64(r.checks), "fwd-%")
	}
}
