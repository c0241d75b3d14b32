package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/latency"
	"github.com/peerlimit/peerlimit/internal/proccpu"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// BenchmarkClient measures the Go client against a 3-node cluster on
// loopback: in-process nodes, real gossip, real gRPC, the callers in the
// same process. One cluster serves every case of one invocation of
// BenchmarkClient (so each -count is a fresh cluster); every case makes
// its own client or connections, warms them up, and only then starts the
// timer. The raw-grpc cases are the baselines of the same run: the same
// load sent with pb.RateLimiterClient on plain grpc.ClientConns, without
// the client library. Compare ratios within a run, not numbers from
// another day; the machine is shared and noisy. See
// docs/client-benchmarks.md.
//
//	routing=owner|plain/coalesce=on|off
//	            Client.Check, 64 concurrent callers; p50/p99 per call.
//	            plain is DisableOwnerRouting (each call to a random node,
//	            which forwards the checks it does not own); off is
//	            DisableCoalescing (each Check its own unary call).
//	raw-grpc/to=node0|random|owner
//	            unary Check without the library, 64 concurrent callers:
//	            every call to node 0; to a random node; to the key's owner.
//	batch100/routing=owner|plain, batch100/raw-grpc/to=node0|random
//	            Client.CheckBatch (or a raw CheckBatch to node 0, or to a
//	            random node) of 100 checks, 8 concurrent callers; one op is
//	            one check, so ns/op and checks/s are per check; p50/p99 per
//	            batch call.
//
// fwd-% is the nodes' peerlimit_forwards_total{result="ok"} over the timed
// region (summed over the nodes, read from /metrics) per check: the share
// of checks that took the extra node-to-node hop. checks/rpc is the mean
// number of checks per client-to-node call (the coalesced batch size);
// checks/fwd-rpc the same for node-to-node Forward calls. B/op and
// allocs/op are the whole process's (callers, client and nodes) per check.
//
// Run: go test ./client -run '^$' -bench Client -benchtime 3s -count 3
func BenchmarkClient(b *testing.B) {
	env := startClientBenchEnv(b)
	keys := clientBenchKeyList()
	for _, routing := range []string{"owner", "plain"} {
		b.Run("routing="+routing, func(b *testing.B) {
			for _, coalesce := range []string{"on", "off"} {
				b.Run("coalesce="+coalesce, func(b *testing.B) {
					cl := env.newClient(b, client.Config{
						DisableOwnerRouting: routing == "plain",
						DisableCoalescing:   coalesce == "off",
					})
					benchClientSingle(b, env, func(ctx context.Context, k int) (client.Decision, error) {
						return cl.Check(ctx, keys[k], clientBenchLimit)
					})
				})
			}
		})
	}
	// The baselines: unary Check without the library, on connections of
	// their own. node0 is the reference baseline: every call to node 0,
	// which forwards the checks it does not own. random sends each call to
	// a node picked at random (the same topology as routing=plain), owner
	// to the key's owner, looked up beforehand in a table (the same
	// topology as routing=owner, at no routing cost): with them, the
	// library's own cost is the difference with the routing=* /
	// coalesce=off cases.
	b.Run("raw-grpc", func(b *testing.B) {
		for _, to := range []string{"node0", "random", "owner"} {
			b.Run("to="+to, func(b *testing.B) {
				raw := env.rawClients(b)
				l := clientBenchLimit
				benchClientSingle(b, env, func(ctx context.Context, k int) (client.Decision, error) {
					var ni int
					switch to {
					case "random":
						ni = rand.IntN(len(raw))
					case "owner":
						ni = env.owner[k]
					}
					// The request is built per call, as a caller without
					// the library would.
					resp, err := raw[ni].Check(ctx, &pb.CheckRequest{Key: keys[k], Limit: l.Limit,
						WindowMs: l.Window.Milliseconds(), Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER})
					if err != nil {
						return client.Decision{}, err
					}
					return client.Decision{Allowed: resp.GetAllowed(), Owner: resp.GetOwner(), Degraded: resp.GetDegraded()}, nil
				})
			})
		}
	})
	b.Run("batch100", func(b *testing.B) {
		for _, routing := range []string{"owner", "plain"} {
			b.Run("routing="+routing, func(b *testing.B) {
				cl := env.newClient(b, client.Config{DisableOwnerRouting: routing == "plain"})
				benchClientBatch(b, env, 100, cl.CheckBatch)
			})
		}
		for _, to := range []string{"node0", "random"} {
			b.Run("raw-grpc/to="+to, func(b *testing.B) {
				raw := env.rawClients(b)
				benchClientBatch(b, env, 100, func(ctx context.Context, reqs []client.Request) ([]client.Result, error) {
					breq := &pb.CheckBatchRequest{Checks: make([]*pb.CheckRequest, len(reqs))}
					for i, r := range reqs {
						breq.Checks[i] = &pb.CheckRequest{Key: r.Key, Limit: r.Limit.Limit,
							WindowMs: r.Limit.Window.Milliseconds(), Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER}
					}
					ni := 0
					if to == "random" {
						ni = rand.IntN(len(raw))
					}
					resp, err := raw[ni].CheckBatch(ctx, breq)
					if err != nil {
						return nil, err
					}
					out := make([]client.Result, len(resp.GetResults()))
					for i, r := range resp.GetResults() {
						if e := r.GetError(); e != nil {
							out[i].Err = fmt.Errorf("code %d: %s", e.GetCode(), e.GetMessage())
							continue
						}
						out[i].Allowed, out[i].Degraded = r.GetResponse().GetAllowed(), r.GetResponse().GetDegraded()
					}
					return out, nil
				})
			})
		}
	})
}

const clientBenchKeys = 10_000

// clientBenchLimit is never reached: every check is allowed, so the
// benchmark measures the path, not denials.
var clientBenchLimit = client.Limit{Limit: 1 << 40, Window: time.Minute, Algorithm: client.SlidingWindowCounter}

// The keys are formatted once, so the callers spend their share of the two
// cores on calls, not on Sprintf.
var clientBenchKeyList = sync.OnceValue(func() []string {
	keys := make([]string, clientBenchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant:7:user:%d", i)
	}
	return keys
})

// clientBenchEnv is a running 3-node cluster and the counters the cases
// read around their timed regions.
type clientBenchEnv struct {
	c     *testcluster.Cluster
	nodes []*node.Node
	owner []int // owner[k] indexes nodes: the owner of key k
	warns *testlog.WarnCounter
	http  *http.Client
	// Client-to-node calls carrying checks (Check, CheckBatch) and the
	// checks they carried, counted by an interceptor on the client's (and
	// the raw baseline's) connections.
	rpcs, rpcChecks atomic.Int64
	// The same for node-to-node Forward calls, on the peer connections.
	fwdRPCs, fwdChecks atomic.Int64
}

// startClientBenchEnv starts the cluster, waits for it to converge and
// touches every key once; the harness's Cleanup kills the nodes when the
// benchmark (all its cases) is done.
func startClientBenchEnv(b *testing.B) *clientBenchEnv {
	b.Helper()
	env := &clientBenchEnv{warns: testlog.NewWarnCounter(),
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}}
	// The harness's configuration; only the logger is replaced, by a
	// counter of warnings (benchmark output shows every b.Log line), and
	// the peer connections get the Forward-counting interceptor.
	env.c = testcluster.New(b, 3, func(cfg *node.Config) {
		cfg.Logger = slog.New(env.warns)
		cfg.PeerDialOptions = append(cfg.PeerDialOptions, grpc.WithChainUnaryInterceptor(env.countForwards))
	})
	env.nodes = env.c.Live()
	keys := clientBenchKeyList()
	r := env.nodes[0].Ring()
	env.owner = make([]int, len(keys))
	for k, key := range keys {
		env.owner[k] = slices.IndexFunc(env.nodes, func(n *node.Node) bool { return n.ID() == r.Owner(key).ID })
		if env.owner[k] < 0 {
			b.Fatalf("%s's owner %s is not a node", key, r.Owner(key).ID)
		}
	}
	// Every key exists on its owner before the first case, so no case pays
	// for creating them.
	raw := env.rawClients(b)[0]
	for i := 0; i < len(keys); i += 100 {
		req := &pb.CheckBatchRequest{}
		for _, k := range keys[i:min(i+100, len(keys))] {
			req.Checks = append(req.Checks, &pb.CheckRequest{Key: k, Limit: clientBenchLimit.Limit, WindowMs: clientBenchLimit.Window.Milliseconds()})
		}
		if _, err := raw.CheckBatch(context.Background(), req); err != nil {
			b.Fatalf("touching the keys: %v", err)
		}
	}
	return env
}

// newClient returns a client of the cluster (every node as an endpoint),
// warmed up with concurrent checks so that its connections and batchers
// are up; it is closed when the case's invocation ends.
func (env *clientBenchEnv) newClient(b *testing.B, cfg client.Config) *client.Client {
	b.Helper()
	for _, n := range env.nodes {
		cfg.Endpoints = append(cfg.Endpoints, n.GRPCAddr())
	}
	cfg.Logger = slog.New(env.warns)
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithChainUnaryInterceptor(env.countRPCs))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := client.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	keys := clientBenchKeyList()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 5 {
				if _, err := cl.Check(ctx, keys[(g*5+i)%len(keys)], clientBenchLimit); err != nil {
					b.Errorf("warm-up check: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return cl
}

// rawClients returns plain gRPC clients, one per node on a connection of
// its own (index as env.nodes), warmed up, closed when the case's
// invocation ends.
func (env *clientBenchEnv) rawClients(b *testing.B) []pb.RateLimiterClient {
	b.Helper()
	var out []pb.RateLimiterClient
	for _, n := range env.nodes {
		conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithChainUnaryInterceptor(env.countRPCs))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		out = append(out, pb.NewRateLimiterClient(conn))
	}
	keys := clientBenchKeyList()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 5 {
				req := &pb.CheckRequest{Key: keys[(g*5+i)%len(keys)], Limit: clientBenchLimit.Limit, WindowMs: clientBenchLimit.Window.Milliseconds()}
				if _, err := out[(g+i)%len(out)].Check(context.Background(), req); err != nil {
					b.Errorf("warm-up check: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return out
}

func (env *clientBenchEnv) countRPCs(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch r := req.(type) {
	case *pb.CheckRequest:
		env.rpcs.Add(1)
		env.rpcChecks.Add(1)
	case *pb.CheckBatchRequest:
		env.rpcs.Add(1)
		env.rpcChecks.Add(int64(len(r.GetChecks())))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (env *clientBenchEnv) countForwards(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if fr, ok := req.(*pb.ForwardRequest); ok {
		env.fwdRPCs.Add(1)
		env.fwdChecks.Add(int64(len(fr.GetChecks())))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// The value is a float in the text format: past a million it is written
// as 1.234567e+06.
var forwardsOK = regexp.MustCompile(`(?m)^peerlimit_forwards_total\{result="ok"\} (\S+)`)

// forwarded sums peerlimit_forwards_total{result="ok"} over the nodes.
func (env *clientBenchEnv) forwarded(b *testing.B) float64 {
	b.Helper()
	var total float64
	for _, n := range env.nodes {
		resp, err := env.http.Get("http://" + n.HTTPAddr() + "/metrics")
		if err != nil {
			b.Fatalf("reading %s's metrics: %v", n.ID(), err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatalf("reading %s's metrics: %v", n.ID(), err)
		}
		if m := forwardsOK.FindSubmatch(body); m != nil {
			v, err := strconv.ParseFloat(string(m[1]), 64)
			if err != nil {
				b.Fatalf("%s's peerlimit_forwards_total: %v", n.ID(), err)
			}
			total += v
		}
	}
	return total
}

// measure runs timed (b.RunParallel inside) between the counters'
// readings, all of them outside the timed region, and reports.
func (env *clientBenchEnv) measure(b *testing.B, rec *benchRecorder, timed func()) {
	env.warns.Reset()
	fwdBefore := env.forwarded(b)
	env.rpcs.Store(0)
	env.rpcChecks.Store(0)
	env.fwdRPCs.Store(0)
	env.fwdChecks.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	timed()
	elapsed := time.Since(start)
	b.StopTimer()
	rpcs, rpcChecks := env.rpcs.Load(), env.rpcChecks.Load()
	fwdRPCs, fwdChecks := env.fwdRPCs.Load(), env.fwdChecks.Load()
	fwd := env.forwarded(b) - fwdBefore

	rec.merge()
	rec.report(b, elapsed)
	if rec.checks > 0 {
		b.ReportMetric(100*fwd/float64(rec.checks), "fwd-%")
	}
	if rpcs > 0 {
		b.ReportMetric(float64(rpcChecks)/float64(rpcs), "checks/rpc")
	}
	if fwdRPCs > 0 {
		b.ReportMetric(float64(fwdChecks)/float64(fwdRPCs), "checks/fwd-rpc")
	}
	// What went wrong in the timed run is logged, not failed: a warning or
	// a degraded answer means the run measured something else than the
	// normal path.
	if n, first := env.warns.Count(); n > 0 {
		b.Logf("%d warnings/errors logged during the run; first: %s", n, first)
	}
	if rec.degraded > 0 {
		b.Logf("%d degraded answers (owner unreachable, fallback answered)", rec.degraded)
	}
}

// Single checks, 64 concurrent callers, each check a random key (check
// gets its index in clientBenchKeyList). Latency is per call.
func benchClientSingle(b *testing.B, env *clientBenchEnv, check func(ctx context.Context, k int) (client.Decision, error)) {
	n := len(clientBenchKeyList())
	procs := runtime.GOMAXPROCS(0)
	par := max(1, 64/procs) // × GOMAXPROCS (2) = 64 callers
	b.SetParallelism(par)
	rec := newBenchRecorder(par*procs, 2*b.N/(par*procs)+64)
	env.measure(b, rec, func() {
		b.RunParallel(func(p *testing.PB) {
			w := rec.worker()
			ctx := context.Background()
			for p.Next() {
				k := rand.IntN(n)
				t0 := time.Now()
				d, err := check(ctx, k)
				w.lat = append(w.lat, time.Since(t0))
				if err != nil {
					b.Error(err)
					return
				}
				w.checks++
				if d.Degraded {
					w.degraded++
				}
			}
		})
	})
}

// Batches of size checks, 8 concurrent callers; each iteration is one
// check (a batch goes out every size iterations), so ns/op and checks/s
// are per check. Latency is per batch call of size checks.
func benchClientBatch(b *testing.B, env *clientBenchEnv, size int, checkBatch func(context.Context, []client.Request) ([]client.Result, error)) {
	keys := clientBenchKeyList()
	procs := runtime.GOMAXPROCS(0)
	par := max(1, 8/procs) // × GOMAXPROCS (2) = 8 callers
	b.SetParallelism(par)
	rec := newBenchRecorder(par*procs, 2*b.N/(size*par*procs)+64)
	env.measure(b, rec, func() {
		b.RunParallel(func(p *testing.PB) {
			w := rec.worker()
			ctx := context.Background()
			reqs := make([]client.Request, size)
			for i := range reqs {
				reqs[i].Limit = clientBenchLimit
			}
			// send sends the first n requests; a full batch's latency is
			// recorded.
			send := func(n int) bool {
				batch := reqs[:n]
				for i := range batch {
					batch[i].Key = keys[rand.IntN(len(keys))]
				}
				t0 := time.Now()
				res, err := checkBatch(ctx, batch)
				if n == size {
					w.lat = append(w.lat, time.Since(t0))
				}
				if err == nil && len(res) != n {
					err = fmt.Errorf("%d results for %d checks", len(res), n)
				}
				if err != nil {
					b.Error(err)
					return false
				}
				for _, r := range res {
					if r.Err != nil {
						b.Errorf("batch item: %v", r.Err)
						return false
					}
					w.checks++
					if r.Degraded {
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
	})
}

// benchRecorder gives every caller goroutine its own latency slice and
// counters, allocated before the timer starts; they are merged in report,
// after the timer stops: the timed loop shares nothing but the client.
type benchRecorder struct {
	workers []*benchWorker
	next    atomic.Int64

	mu               sync.Mutex
	extra            []*benchWorker // past the preallocated ones
	lat              []time.Duration
	checks, degraded int64
}

type benchWorker struct {
	lat              []time.Duration
	checks, degraded int64
}

// newBenchRecorder prepares goroutines workers with room for perWorker
// samples each (append grows a slice that gets more than its share).
func newBenchRecorder(goroutines, perWorker int) *benchRecorder {
	r := &benchRecorder{workers: make([]*benchWorker, goroutines)}
	for i := range r.workers {
		r.workers[i] = &benchWorker{lat: make([]time.Duration, 0, perWorker)}
	}
	return r
}

func (r *benchRecorder) worker() *benchWorker {
	if i := r.next.Add(1) - 1; int(i) < len(r.workers) {
		return r.workers[i]
	}
	// RunParallel started more goroutines than expected.
	w := &benchWorker{}
	r.mu.Lock()
	r.extra = append(r.extra, w)
	r.mu.Unlock()
	return w
}

// merge gathers the workers' samples and counts; call it once RunParallel
// has returned.
func (r *benchRecorder) merge() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range append(r.workers, r.extra...) {
		r.lat = append(r.lat, w.lat...)
		r.checks += w.checks
		r.degraded += w.degraded
	}
}

// report adds checks/s, p50-µs and p99-µs to the benchmark's line.
func (r *benchRecorder) report(b *testing.B, elapsed time.Duration) {
	b.ReportMetric(float64(r.checks)/elapsed.Seconds(), "checks/s")
	if len(r.lat) > 0 {
		slices.Sort(r.lat)
		b.ReportMetric(float64(latency.Percentile(r.lat, 50))/1e3, "p50-µs")
		b.ReportMetric(float64(latency.Percentile(r.lat, 99))/1e3, "p99-µs")
	}
}

// BenchmarkClientReserveSettle is what a token budget pays against a
// check, through the library as an application calls it (owner routing,
// coalescing on; 64 concurrent callers, the 3-node cluster of
// BenchmarkClient): check is Client.CheckN of 100; reserve+settle is
// Client.Reserve of 100 then Client.Settle at 63, two round trips. One op
// is one check, or one reservation reserved and settled. cpu-ns/op is the
// process's CPU time (callers, client and the three nodes) per op:
// compare the two cases of one run.
//
// Run: go test ./client -run '^$' -bench ClientReserveSettle -benchtime 3s -count 5
func BenchmarkClientReserveSettle(b *testing.B) {
	env := startClientBenchEnv(b)
	keys := clientBenchKeyList()
	cl := env.newClient(b, client.Config{})
	b.Run("check", func(b *testing.B) {
		withCPU(b, func() {
			benchClientSingle(b, env, func(ctx context.Context, k int) (client.Decision, error) {
				return cl.CheckN(ctx, keys[k], clientBenchLimit, 100)
			})
		})
	})
	b.Run("reserve+settle", func(b *testing.B) {
		withCPU(b, func() {
			benchClientSingle(b, env, func(ctx context.Context, k int) (client.Decision, error) {
				r, err := cl.Reserve(ctx, keys[k], clientBenchLimit, 100, 0)
				if err != nil || !r.Allowed {
					return r.Decision, err
				}
				s, err := cl.Settle(ctx, r, 63)
				return s.Decision, err
			})
		})
	})
}

// withCPU runs f and reports the process's CPU time per op.
func withCPU(b *testing.B, f func()) {
	cpu0 := processCPU(b)
	f()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func processCPU(b *testing.B) time.Duration {
	cpu, ok := proccpu.Self()
	if !ok {
		b.Skip("this system does not report the process's CPU time")
	}
	return cpu
}
