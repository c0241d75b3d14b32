// Package node assembles a peerlimit node: the limiter store, membership,
// the ring, forwarding and handoff, the gRPC and HTTP APIs, metrics and the
// expiry sweeper, with one Start and one Shutdown. cmd/node is a thin flag
// parser around it, tests start real nodes with it on loopback ports, and
// an application can embed one.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/ownership"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/rpc"
	"github.com/peerlimit/peerlimit/security"
	"github.com/peerlimit/peerlimit/tracing"
)

// Node is a running peerlimit node. Its methods are safe for concurrent use.
type Node struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	store   *limiter.Store
	svc     *route.Service
	peers   *peerrpc.Peers
	handoff *handoff.Sender
	// own decides who decides each key, as this node sees it: the ring,
	// the partitions that wait for their state, the share (ownership.go).
	own     *ownership.Tracker
	members *cluster.Cluster
	cluster atomic.Pointer[cluster.Cluster] // members, for the notifier, which may run before Start returns
	repl    replication
	leases  *lease.Book // nil with leases off
	sec     *security.Credentials
	health  *health.Server
	metrics *nodeMetrics
	// configs are the policies and the Envoy rules the node serves, and
	// what reloads them.
	configs *configs.Set
	// traces records the node's spans (tracing.go); it records nothing
	// with Config.Tracing off.
	traces *tracing.Provider
	// sampler reads the metrics for the console's charts (console.go).
	sampler *console.Sampler

	grpcSrv *grpc.Server
	drain   *grpcapi.Drain // ends the gRPC streams at Shutdown
	httpSrv *http.Server
	grpcLn  net.Listener
	httpLn  net.Listener

	capacity capacityReport // written by the sweeper only
	undo     []func()       // Start's cleanups, run in reverse if a later step fails

	serving    atomic.Bool
	handoffReq chan struct{} // capacity 1: wakes the handoff loop
	stop       chan struct{} // closed by stopLoops: stops the sweeper and the handoff loop
	loops      sync.WaitGroup
	wg         sync.WaitGroup // the servers

	stopOnce sync.Once
	stopErr  error
}

// Start builds a node from cfg, binds its listeners, joins the cluster
// and starts serving. It runs the init steps below in order; each
// registers what undoes it, and if a step fails the ones before it are
// undone in reverse, so that nothing is left running.
func Start(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), reg: prometheus.NewRegistry(), health: health.NewServer(),
		handoffReq: make(chan struct{}, 1), stop: make(chan struct{})}
	defer func() {
		if err != nil {
			for i := len(n.undo) - 1; i >= 0; i-- {
				n.undo[i]()
			}
		}
	}()
	for _, step := range []func() error{
		n.initStore,       // the limiter state, policies and Envoy rules checked against its caps
		n.initMetrics,     // the registry's node-wide collectors
		n.initConsole,     // the sampler of the console's charts
		n.initSecurity,    // TLS material, tokens, cluster secrets
		n.initListeners,   // bound now, so that the ring and peers know this node's address
		n.initTracing,     // the span exporter, before anything records spans
		n.initRequestPath, // ring, peers, route.Service, handoff
		n.initGRPC,        // the public, peer, Envoy, health and reflection services
		n.initHTTP,        // the JSON API, metrics, probes
		n.serve,           // before joining: the moment others see this node they call it
		n.joinCluster,     // gossip; membership changes rebuild the ring from here on
		n.startConfigs,    // files reloaded as they change (WatchConfig), the control plane subscribed to, digests advertised
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	n.startServing()
	n.log.Info("node started", "grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "gossip", n.members.GossipAddr())
	return n, nil
}

func (n *Node) onUndo(f func()) { n.undo = append(n.undo, f) }

// initStore creates the store, and loads the policy file and the Envoy
// rate limit configuration, each checked against the store's caps so that
// a limit no request could use is refused now rather than on every
// request.
func (n *Node) initStore() (err error) {
	lc := n.cfg.Limiter
	lc.TrackChanges = n.cfg.Replication.Factor > 0 // what the replicator sends
	if n.store, err = limiter.New(lc, n.cfg.Partitions); err != nil {
		return err
	}
	n.capacity = capacityReport{log: n.log, cfg: n.store.Config()}
	n.configs, err = configs.New(n.cfg.Config, configs.Deps{Self: n.cfg.ID, Check: n.store.Validate, Now: n.cfg.Now, Logger: n.log,
		Registerer: n.reg, Health: n.health, Serving: n.serving.Load})
	return err
}

func (n *Node) initMetrics() (err error) {
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newStoreCollector(n.store))
	if n.metrics, err = newNodeMetrics(n.reg, n); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func (n *Node) initSecurity() (err error) {
	n.sec, err = security.NewCredentials(n.cfg.Security, security.CredentialsDeps{SelfID: n.cfg.ID, GRPCAddr: n.cfg.GRPCAddr,
		GossipKey: len(n.cfg.GossipKey) > 0, ConfigPath: "Security", Now: n.cfg.Now, Registerer: n.reg, Logger: n.log})
	return err
}

func (n *Node) initListeners() (err error) {
	if n.grpcLn, err = net.Listen("tcp", n.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("grpc listen on %s: %w", n.cfg.GRPCAddr, err)
	}
	n.onUndo(func() { n.grpcLn.Close() })
	if n.httpLn, err = net.Listen("tcp", n.cfg.HTTPAddr); err != nil {
		return fmt.Errorf("http listen on %s: %w", n.cfg.HTTPAddr, err)
	}
	n.onUndo(func() { n.httpLn.Close() })
	return nil
}

// initRequestPath builds what a check goes through: the ring (this node
// alone until gossip says otherwise), the connections to peers, the
// route.Service, and the handoff that moves state to its owners.
func (n *Node) initRequestPath() error {
	routeMetrics, err := route.NewMetrics(n.reg)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	dial := n.sec.PeerDialOptions()
	if d := dialFrom(n.grpcLn.Addr()); d != nil {
		dial = append(dial, grpc.WithContextDialer(d))
	}
	if n.peers, err = peerrpc.NewPeers(n.cfg.Peers, n.cfg.ID, routeMetrics, append(dial, n.cfg.PeerDialOptions...)...); err != nil {
		return err
	}
	n.onUndo(n.peers.Close)
	handoffMetrics, err := handoff.NewMetrics(n.reg)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := n.initReplicas(); err != nil {
		return err
	}
	if err := n.initOwnership(); err != nil {
		return err
	}
	var replicas handoff.Replicas // nil unless replication is on: a nil *Failover in the interface would not be nil
	deps := route.Deps{NodeID: n.cfg.ID, Store: n.store, Now: n.cfg.Now, Cluster: n.own, Peers: n.peers,
		Samples: n.sampler, Metrics: routeMetrics, HandoffMetrics: handoffMetrics, Logger: n.log, Tracer: n.traces.Tracer(routeTracer)}
	if n.repl.failover != nil {
		deps.Failover, replicas = n.repl.failover, n.repl.failover
	}
	if r := n.configs.PolicyRegistry(); r != nil { // a nil *Registry in the interface would not be nil
		deps.Policies = r
	}
	if err := n.initLeases(&deps); err != nil {
		return err
	}
	if n.svc, err = route.NewService(n.cfg.Route, deps); err != nil {
		return err
	}
	if err := n.initReplicator(); err != nil {
		return err
	}
	if n.handoff, err = handoff.New(handoff.Deps{Self: n.cfg.ID, Store: n.store, Peers: n.peers, Ring: n.ring,
		Leaving: func() bool { return n.own.View().Leaving() }, Now: n.cfg.Now, Logger: n.log, Metrics: handoffMetrics, Replicas: replicas}); err != nil {
		return err
	}
	if err := registerCapacity(n.reg, n.cfg, n.svc, n.leases); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func (n *Node) initGRPC() error {
	n.drain = grpcapi.NewDrain()
	unary := []grpc.UnaryServerInterceptor{n.drain.Unary, n.recoverUnary}
	guard := guardOf(n.sec)
	if guard != nil {
		unary = append(unary, guard.Unary)
	}
	opts := append(rpc.NewStrictCodec().ServerOptions(unary...), n.sec.ServerOptions()...)
	if guard != nil {
		opts = append(opts, grpc.ChainStreamInterceptor(guard.Stream))
	}
	opts = append(opts, wire.ServerWindow()...) // no flow-control pings per message (internal/wire)
	opts = append(opts, n.cfg.Peers.ServerKeepalive())
	n.grpcSrv = grpc.NewServer(append(opts,
		grpc.MaxRecvMsgSize(n.cfg.MaxRecvMsgBytes),
		// Reuse handler goroutines instead of one fresh goroutine per call,
		// whose stack grows anew every time (10–15 % of CPU in profiles;
		// +8 % checks/s on the forwarding path, docs/cluster-benchmarks.md).
		// Experimental in grpc-go; when all workers are busy it falls back
		// to a goroutine per stream, so it cannot stall calls. Handlers
		// block while their checks are forwarded, so there are as many as
		// calls are usually in flight, not GOMAXPROCS (streamWorkers).
		grpc.NumStreamWorkers(uint32(max(runtime.GOMAXPROCS(0), streamWorkers))))...)
	api := rpc.NewServer(n.svc)
	api.MembersFunc, api.Drain, api.Console = n.membersProto, n.drain, n.consoleView()
	pb.RegisterRateLimiterServer(n.grpcSrv, api)
	pb.RegisterPeerServer(n.grpcSrv, n.peerServer())
	if err := n.configs.RegisterEnvoyRLS(n.grpcSrv, envoyrls.ServerDeps{Checker: n.svc, Validate: n.store.Validate,
		MaxKeyBytes: n.store.Config().MaxKeyBytes, Logger: n.log,
		Tracer: n.traces.Tracer(envoyRLSTracer), Propagator: tracing.Propagator()}); err != nil {
		return err
	}
	healthpb.RegisterHealthServer(n.grpcSrv, n.health)
	reflection.Register(n.grpcSrv)
	return nil
}

// streamWorkers is how many goroutines serve calls, reused from call to
// call: a handler blocks while its check is forwarded, so with one per
// core, as grpc-go suggests for handlers that only compute, most calls of
// a node forwarding to others got a fresh goroutine and grew its stack
// again (runtime.copystack, 5 % of a node's CPU at 5 nodes). With 128,
// make bench-scale's frame at 5 nodes spent 10 % less CPU per check
// (medians of 3 interleaved runs: 104 → 94 µs); 256 did no better.
const streamWorkers = 128

// peerServer serves the peer protocol over the request path. Its streams
// end at Shutdown with the others (grpcapi.Drain). Their batches are not
// checked again one by one (Server.Admit): a stream's credentials are the
// ones it opened with, and checking them again on every batch would cut
// every stream in the middle of a secret rotation.
func (n *Node) peerServer() *peerrpc.Server {
	s := peerrpc.NewServer(n.svc.Peer)
	s.Drain = n.drain
	s.Tracer, s.NodeID = n.traces.Tracer(peerTracer), n.cfg.ID
	return s
}

func (n *Node) initHTTP() error {
	hcfg := n.cfg.HTTP
	hcfg.AuthMetrics = n.cfg.Security.AuthMetrics
	h, err := httpapi.NewHandler(n.svc, hcfg, httpapi.Deps{
		// Serving, and not unready for want of a configuration
		// (configs.Set.Ready).
		Healthy:  func() bool { return n.serving.Load() && n.configs.Ready() },
		Metrics:  n.MetricsHandler(),
		Members:  n.memberInfo,
		Policies: n.configs.Policies,
		EnvoyRLS: envoyrls.Viewer(n.configs.EnvoyRLSInForce),
		Auth:     n.sec.HTTPAuth(),
		Console:  n.consoleView(),
		Tracer:   n.traces.Tracer(httpTracer), Propagator: tracing.Propagator(),
		// A file that failed to reload is told, the status kept.
		ConfigErrors: n.configs.Errors,
	})
	if err != nil {
		return err
	}
	n.httpSrv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
	}
	n.httpSrv.TLSConfig = n.sec.HTTPServerTLS()
	return nil
}

// serve starts both servers on their listeners.
func (n *Node) serve() error {
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		if err := n.grpcSrv.Serve(n.grpcLn); err != nil {
			n.log.Error("grpc server stopped", "err", err)
		}
	}()
	go func() {
		defer n.wg.Done()
		serve := n.httpSrv.Serve
		if n.httpSrv.TLSConfig != nil {
			serve = func(ln net.Listener) error { return n.httpSrv.ServeTLS(ln, "", "") }
		}
		if err := serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	}()
	n.onUndo(func() { n.grpcSrv.Stop(); n.httpSrv.Close(); n.wg.Wait() })
	return nil
}

func (n *Node) joinCluster() (err error) {
	n.members, err = cluster.Start(cluster.Config{
		ID: n.cfg.ID, BindAddr: n.cfg.GossipAddr, AdvertiseAddr: n.cfg.AdvertiseAddr, GRPCAddr: n.GRPCAddr(),
		Join: n.cfg.Join, SecretKey: n.cfg.GossipKey, Keys: n.sec.GossipKeys(), Profile: n.cfg.GossipProfile,
		ConfigDigests: n.configs.Digests(), Logger: n.log, OnChange: n.membershipChanged,
	})
	if err != nil {
		return err
	}
	// Undone by a later step's failure: leave, so that the others do not
	// route keys to a node that never served.
	n.onUndo(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = n.members.Leave(ctx)
		_ = n.members.Shutdown()
	})
	n.cluster.Store(n.members)
	n.configs.Joined(n.members) // a reload while joining found no cluster to tell
	// The join is done: route by the members it found before serving,
	// rather than as the lone owner of every key until the notifier's
	// first delivery (a node restarted after a crash would otherwise
	// decide every key it receives from zero for that moment).
	n.membershipChanged(n.members.View())
	n.own.Joined()
	return nil
}

// startServing turns health to SERVING and starts the periodic loops:
// the sweeper, the handoff loop, replication, the console's sampler and
// the budget leases' settlement.
func (n *Node) startServing() {
	n.serving.Store(true)
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	n.health.SetServingStatus(pb.RateLimiter_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	n.configs.UpdateHealth() // the Envoy service's, from its rules
	n.loops.Add(4)
	go func() { defer n.loops.Done(); n.every(n.cfg.SweepInterval, n.sweep) }()
	go func() { defer n.loops.Done(); n.every(time.Second, n.expireReservations) }()
	go func() { defer n.loops.Done(); n.handoffLoop() }()
	go func() { defer n.loops.Done(); n.sampleNow(); n.every(sampleInterval, n.sampleNow) }()
	if n.leases != nil {
		n.loops.Add(1)
		go func() { defer n.loops.Done(); n.every(n.leases.Duration()/4, n.settleLeases) }()
	}
	if n.repl.sender != nil {
		n.loops.Add(1)
		go func() { defer n.loops.Done(); n.replicationLoop() }()
	}
}

// GRPCAddr is the bound gRPC address.
func (n *Node) GRPCAddr() string { return n.grpcLn.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// GossipAddr is the gossip address other nodes join through.
func (n *Node) GossipAddr() string { return n.members.GossipAddr() }

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Store exposes the node's limiter state, for tests and embedding.
func (n *Node) Store() *limiter.Store { return n.store }

// Ring returns the node's current view of ownership.
func (n *Node) Ring() *ring.Ring { return n.own.View().Ring() }

// ring is Ring, for the components that read it (handoff, replica).
func (n *Node) ring() *ring.Ring { return n.own.View().Ring() }

// HandoffsWaiting returns how many partitions this node has come to own
// whose state other members have not yet said they handed over: their
// answers are marked degraded meanwhile.
func (n *Node) HandoffsWaiting() int { return n.own.View().Waiting() }

// Members returns the live members this node sees.
func (n *Node) Members() []cluster.Member { return n.members.Members() }

func (n *Node) wakeHandoff() {
	select {
	case n.handoffReq <- struct{}{}:
	default:
	}
}

// handoffLoop sends state this node holds but does not own to the owner:
// after every ring change, and every HandoffInterval for the state made
// meanwhile (fallback decisions, forwards decided during convergence).
// A round that left state behind is retried sooner, from 100 ms doubling
// up to HandoffInterval: an owner that just (re)joined is often not yet
// connectable for a moment, and until its counts arrive it decides their
// keys from less than they hold.
func (n *Node) handoffLoop() {
	t := time.NewTimer(n.cfg.HandoffInterval)
	defer t.Stop()
	retry := time.Duration(0)
	for {
		select {
		case <-n.stop:
			return
		case <-n.handoffReq:
		case <-t.C:
		}
		if left := n.handoff.Run(context.Background()); left > 0 {
			retry = min(max(2*retry, 100*time.Millisecond), n.cfg.HandoffInterval)
		} else {
			retry = 0
		}
		next := n.cfg.HandoffInterval
		if retry > 0 {
			next = retry
		}
		t.Reset(next)
	}
}

// expireReservations forgets the reservations due now: a hold whose
// all-or-nothing coordinator died gives its hits back about a second
// after its expiry at worst. Nearly free while none are remembered.
func (n *Node) expireReservations() {
	if expired := n.store.ExpireReservations(n.cfg.Now()); expired > 0 {
		n.log.Debug("reservations expired unsettled", "expired", expired)
	}
}

// sweep frees expired keys; the node runs it every SweepInterval (every).
func (n *Node) sweep() {
	if freed := n.store.Sweep(n.cfg.Now()); freed > 0 {
		n.log.Debug("swept expired keys", "freed", freed)
	}
	n.capacity.report(n.store.Stats())
}

// Shutdown leaves the cluster gracefully: health turns NOT_SERVING, the
// node gives up ownership (what it receives from now on is forwarded to
// the heirs), tells the cluster it leaves, hands every key to its new
// owner, lets in-flight calls finish, hands off what they created, and
// stops. If ctx ends first, the rest is cut short and the error says so.
// Safe to call more than once.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() {
		n.log.Info("shutting down: leaving the cluster")
		var errs []error
		n.serving.Store(false)
		n.health.Shutdown()
		// From here on only this goroutine hands off: a background round
		// racing the final one could be cut short by halt and put its
		// state back into a store about to vanish.
		n.stopLoops()
		n.own.Leaving() // a ring without this node
		if err := n.members.Leave(ctx); err != nil {
			errs = append(errs, err)
		}
		if left := n.handoff.Run(ctx); left > 0 {
			errs = append(errs, fmt.Errorf("%d keys could not be handed off", left))
		}
		if err := n.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			n.httpSrv.Close()
		}
		if err := n.stopGRPC(ctx); err != nil {
			errs = append(errs, err)
		}
		if n.leases != nil { // no call can admit from them any more
			n.leases.SettleWithOwners(ctx, n.cfg.Now(), true)
		}
		// Decisions made by calls that were in flight during the handoff.
		if left := n.handoff.Run(ctx); left > 0 {
			errs = append(errs, fmt.Errorf("%d keys could not be handed off after draining", left))
		}
		n.stopErr = errors.Join(append(errs, n.halt(), n.stopTracing(ctx))...)
		n.log.Info("stopped")
	})
	return n.stopErr
}

// stopGRPC stops the gRPC server once the calls and stream messages under
// way are answered. Streams end after the message in hand, and once
// nothing is under way what is left, the idle streams clients and peers
// keep open, is cut (grpcapi.Drain). If ctx ends first, everything is cut and
// the error says so.
func (n *Node) stopGRPC(ctx context.Context) error {
	quiet := n.drain.Start()
	done := make(chan struct{})
	go func() { n.grpcSrv.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-quiet:
		n.grpcSrv.Stop() // only idle streams are left; GracefulStop then returns
		<-done
		return nil
	case <-ctx.Done():
		n.grpcSrv.Stop() // cuts the remaining calls; GracefulStop then returns
		<-done
		return fmt.Errorf("grpc graceful stop: %w", ctx.Err())
	}
}

// Kill stops the node at once, as a crash would: no leave, no handoff. Its
// keys start fresh on their new owners. For tests and chaos experiments.
func (n *Node) Kill() {
	n.stopOnce.Do(func() {
		n.serving.Store(false)
		n.stopLoops()
		n.grpcSrv.Stop()
		n.httpSrv.Close()
		n.stopErr = n.halt()
		_ = n.stopTracing(expired()) // as a crash: the spans not yet exported are lost
		n.log.Info("killed")
	})
}

// stopLoops stops the periodic loops (sweeper, handoff, replication,
// sampler, leases) and what keeps the configurations current (the
// files' watcher, the control plane's subscription), and waits for them.
func (n *Node) stopLoops() {
	close(n.stop)
	n.configs.Shutdown() // no reload while leaving
	n.loops.Wait()
}

// halt stops gossip, peer connections and every goroutine of the node.
func (n *Node) halt() error {
	err := n.members.Shutdown()
	n.own.Stop()
	n.peers.Close()
	n.grpcSrv.Stop()
	n.wg.Wait()
	return err
}

// memberInfo lists the members for GET /v1/members.
func (n *Node) memberInfo() httpapi.Members {
	r := n.Ring()
	parts := r.Partitions()
	out := httpapi.Members{Self: n.cfg.ID, Partitions: r.PartitionCount()}
	own := n.configs.Digests()
	for _, m := range n.members.View() {
		out.Members = append(out.Members, httpapi.MemberInfo{
			ID: m.ID, GRPCAddr: m.GRPCAddr, GossipAddr: m.GossipAddr, State: string(m.State),
			Partitions: parts[m.ID], Share: float64(parts[m.ID]) / float64(r.PartitionCount()),
			Config: m.Config, ConfigDiffers: m.ConfigDiffers(own),
		})
	}
	return out
}

// membersProto answers the Members call: the view and the ring, with each
// partition's owner as an index into the member list.
func (n *Node) membersProto() *pb.MembersResponse {
	r := n.Ring()
	out := &pb.MembersResponse{Self: n.cfg.ID, PartitionCount: uint32(r.PartitionCount())}
	index := map[string]uint32{}
	add := func(m *pb.Member) {
		if _, ok := index[m.Id]; !ok {
			index[m.Id] = uint32(len(out.Members))
			out.Members = append(out.Members, m)
		}
	}
	for _, m := range r.Members() { // the ring's owners first: they may not be in the view yet
		add(&pb.Member{Id: m.ID, GrpcAddr: m.Addr, State: string(cluster.StateAlive)})
	}
	own := n.configs.Digests()
	for _, m := range n.members.View() {
		if i, ok := index[m.ID]; ok {
			out.Members[i].GossipAddr, out.Members[i].State = m.GossipAddr, string(m.State)
		} else {
			add(&pb.Member{Id: m.ID, GrpcAddr: m.GRPCAddr, GossipAddr: m.GossipAddr, State: string(m.State)})
		}
		out.Members[index[m.ID]].Config, out.Members[index[m.ID]].ConfigDiffers = m.Config, m.ConfigDiffers(own)
	}
	out.PartitionOwners = make([]uint32, r.PartitionCount())
	for p := range out.PartitionOwners {
		out.PartitionOwners[p] = index[r.PartitionOwner(p).ID]
	}
	return out
}

// recoverUnary turns a panic in a handler into an Internal error: nothing a
// client sends may take the node down, and a bug must leave a trace.
func (n *Node) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			n.log.Error("panic in grpc handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "internal error in %s", info.FullMethod)
		}
	}()
	return handler(ctx, req)
}

// dialFrom returns a dialer whose connections leave from the IP the node's
// gRPC server is bound to, or nil for a wildcard bind. Calls between peers
// then carry the addresses the cluster knows them by, as gossip does (see
// cluster's boundTransport): what separates two nodes by address on a
// multi-homed host, or on loopback in jepsen-lite, separates all of
// their traffic.
func dialFrom(bound net.Addr) func(context.Context, string) (net.Conn, error) {
	tcp, ok := bound.(*net.TCPAddr)
	if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		return nil
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: tcp.IP}}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}
}
