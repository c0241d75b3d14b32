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
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/policy"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/rpc"
)

// Node is a running peerlimit node. Its methods are safe for concurrent use.
type Node struct {
	cfg     Config
	log     *slog.Logger
	store   *limiter.Store
	svc     *rpc.Service
	peers   *rpc.Peers
	members *cluster.Cluster
	sec     *nodeSecurity
	ring    ring.Holder
	health  *health.Server
	metrics *nodeMetrics
	// policies is nil without Config.PoliciesFile.
	policies *policy.Registry
	// rls is nil without Config.EnvoyRLSConfig.
	rls *envoyRLS

	grpcSrv *grpc.Server
	httpSrv *http.Server
	grpcLn  net.Listener
	httpLn  net.Listener

	capacity capacityReport // written by the sweeper only

	serving atomic.Bool
	leaving atomic.Bool   // once set, this node owns nothing
	ringMu  sync.Mutex    // serialises ring rebuilds: the notifier and Shutdown
	handoff chan struct{} // capacity 1: wakes the handoff loop
	stop    chan struct{} // closed by stopLoops: stops the sweeper and the handoff loop
	loops   sync.WaitGroup
	wg      sync.WaitGroup // the servers

	stopOnce sync.Once
	stopErr  error
}

// Start builds a node from cfg, binds its listeners, joins the cluster
// and starts serving. On error nothing is left running.
func Start(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), health: health.NewServer(),
		handoff: make(chan struct{}, 1), stop: make(chan struct{})}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	if n.store, err = limiter.New(cfg.Limiter); err != nil {
		return nil, err
	}
	n.capacity = capacityReport{log: n.log, cfg: n.store.Config()}
	if cfg.PoliciesFile != "" {
		// Checked against this store's caps, so a policy no request could
		// use is refused now rather than on every request.
		if n.policies, err = policy.Load(cfg.PoliciesFile, n.store.Validate); err != nil {
			return nil, err
		}
	}
	if n.rls, err = loadEnvoyRLS(cfg, n.store); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newStoreCollector(n.store))
	if n.metrics, err = newNodeMetrics(reg, n); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	rpcMetrics, err := rpc.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if n.sec, err = newNodeSecurity(cfg, reg, n.log); err != nil {
		return nil, err
	}

	if n.grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen on %s: %w", cfg.GRPCAddr, err)
	}
	cleanup = append(cleanup, func() { n.grpcLn.Close() })
	if n.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("http listen on %s: %w", cfg.HTTPAddr, err)
	}
	cleanup = append(cleanup, func() { n.httpLn.Close() })

	// Until gossip says otherwise, this node is the whole cluster.
	self, err := ring.New(cfg.Ring, []ring.Member{{ID: cfg.ID, Addr: n.GRPCAddr()}})
	if err != nil {
		return nil, err
	}
	n.ring.Store(self)

	pcfg := cfg.Peers
	pcfg.SelfID, pcfg.Metrics = cfg.ID, rpcMetrics
	pcfg.DialOptions = append(n.sec.peerDialOptions(), pcfg.DialOptions...)
	if d := dialFrom(n.grpcLn.Addr()); d != nil {
		pcfg.DialOptions = append(pcfg.DialOptions, grpc.WithContextDialer(d))
	}
	n.peers = rpc.NewPeers(pcfg)
	cleanup = append(cleanup, n.peers.Close)
	rcfg := rpc.DefaultConfig()
	rcfg.NodeID, rcfg.MaxBatch, rcfg.Now = cfg.ID, cfg.MaxBatch, cfg.Now
	rcfg.Owner, rcfg.Peers, rcfg.Fallback, rcfg.Logger = n.owner, n.peers, cfg.Fallback, n.log
	rcfg.Members, rcfg.MaxInflightForwards = n.memberRoutes, cfg.MaxInflightForwards
	if n.policies != nil { // a nil *Registry in the interface would not be nil
		rcfg.Policies = n.policies
	}
	if n.svc, err = rpc.NewService(rcfg, n.store, rpcMetrics); err != nil {
		return nil, err
	}
	if err := registerCapacity(reg, cfg, n.svc); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}

	unary := []grpc.UnaryServerInterceptor{n.recoverUnary}
	if g := n.sec.guard(); g != nil {
		unary = append(unary, g.Unary)
	}
	n.grpcSrv = grpc.NewServer(append(append(rpc.NewStrictCodec().ServerOptions(unary...), n.sec.serverOptions()...),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgBytes),
		// Reuse handler goroutines instead of one fresh goroutine per call,
		// whose stack grows anew every time (10–15 % of CPU in profiles;
		// +8 % checks/s on the forwarding path, docs/cluster-benchmarks.md).
		// Experimental in grpc-go; when all workers are busy it falls back
		// to a goroutine per stream, so it cannot stall calls.
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))...)
	api := rpc.NewServer(n.svc)
	api.MembersFunc = n.membersProto
	pb.RegisterRateLimiterServer(n.grpcSrv, api)
	peerSrv := rpc.NewPeerServer(n.svc)
	peerSrv.OnHandoff = n.received
	pb.RegisterPeerServer(n.grpcSrv, peerSrv)
	if err := n.rls.register(n.grpcSrv, n.svc, reg, n.log); err != nil {
		return nil, err
	}
	healthpb.RegisterHealthServer(n.grpcSrv, n.health)
	reflection.Register(n.grpcSrv)

	n.httpSrv = &http.Server{
		Handler: httpapi.NewHandler(n.svc, httpapi.Config{
			MaxBodyBytes: cfg.MaxBodyBytes,
			Healthy:      n.serving.Load,
			Metrics:      promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
			Members:      n.memberInfo,
			Policies:     n.policySet,
			Pprof:        cfg.Pprof,
			Auth:         n.sec.httpAuth(),
			AuthMetrics:  cfg.Security.AuthMetrics,
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
	}
	if n.sec.tls != nil {
		n.httpSrv.TLSConfig = n.sec.tls.HTTPServerConfig()
	}

	// Serve before joining: the moment others see this node they forward
	// to it and hand it state.
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
	cleanup = append(cleanup, func() { n.grpcSrv.Stop(); n.httpSrv.Close(); n.wg.Wait() })

	if n.members, err = cluster.Start(cluster.Config{
		ID: cfg.ID, BindAddr: cfg.GossipAddr, AdvertiseAddr: cfg.AdvertiseAddr, GRPCAddr: n.GRPCAddr(),
		Join: cfg.Join, SecretKey: cfg.GossipKey, Keys: n.sec.gossipKeys, Profile: cfg.GossipProfile,
		Logger: n.log, OnChange: n.membershipChanged,
	}); err != nil {
		return nil, err
	}

	n.serving.Store(true)
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	n.health.SetServingStatus(pb.RateLimiter_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if n.rls != nil {
		n.health.SetServingStatus(envoyRLSServiceName, healthpb.HealthCheckResponse_SERVING)
	}
	n.loops.Add(2)
	go func() { defer n.loops.Done(); n.sweepLoop() }()
	go func() { defer n.loops.Done(); n.handoffLoop() }()
	n.log.Info("node started", "grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "gossip", n.members.GossipAddr())
	return n, nil
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
func (n *Node) Ring() *ring.Ring { return n.ring.Load() }

// Members returns the live members this node sees.
func (n *Node) Members() []cluster.Member { return n.members.Members() }

// owner is the Service's routing: the ring's owner of key. A leaving node
// owns nothing, so what reaches it goes to the heirs.
func (n *Node) owner(key string) rpc.Route {
	m := n.ring.Load().Owner(key)
	return rpc.Route{ID: m.ID, Addr: m.Addr}
}

// membershipChanged rebuilds and swaps the ring, updates the peer
// connections, and wakes the handoff loop. The cluster's notifier calls
// it, and Shutdown once; ringMu keeps a rebuild that started before the
// leave from landing after it.
func (n *Node) membershipChanged(members []cluster.Member) {
	n.ringMu.Lock()
	defer n.ringMu.Unlock()
	n.sec.setMembers(members) // before routing to a new member, accept its calls
	var rms []ring.Member
	var routes []rpc.Route
	for _, m := range members {
		if m.GRPCAddr == "" || (m.ID == n.cfg.ID && n.leaving.Load()) {
			continue
		}
		rms = append(rms, ring.Member{ID: m.ID, Addr: m.GRPCAddr})
		routes = append(routes, rpc.Route{ID: m.ID, Addr: m.GRPCAddr})
	}
	if len(rms) == 0 {
		return // leaving and alone: keep the last ring
	}
	r, err := ring.New(n.cfg.Ring, rms)
	if err != nil {
		n.log.Error("building the ring", "err", err)
		return
	}
	n.peers.Update(routes)
	if old := n.ring.Load(); !old.Equal(r) {
		n.ring.Store(r)
		n.metrics.ringChanges.Inc()
		n.log.Info("ring changed", "members", len(rms), "partitions", r.Partitions()[n.cfg.ID])
	}
	n.wakeHandoff()
}

func (n *Node) wakeHandoff() {
	select {
	case n.handoff <- struct{}{}:
	default:
	}
}

// handoffLoop sends state this node holds but does not own to the owner:
// after every ring change, and every HandoffInterval for the state made
// meanwhile (fallback decisions, forwards decided during convergence).
func (n *Node) handoffLoop() {
	t := time.NewTicker(n.cfg.HandoffInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.handoff:
		case <-t.C:
		}
		n.handOff(context.Background())
	}
}

// handOff moves every partition this node holds but does not own to its
// owner, and returns how many keys stayed behind because the owner could
// not be reached. A partition is copied, sent, and only then forgotten
// (exactly what was sent), so no admitted hit is lost, and checks decided
// here meanwhile see the full state.
func (n *Node) handOff(ctx context.Context) (left int) {
	r := n.ring.Load()
	byOwner := map[ring.Member][]int{}
	for p := range n.store.Shards() {
		if owner := r.PartitionOwner(p); (owner.ID != n.cfg.ID || n.leaving.Load()) && n.store.ShardLen(p) > 0 {
			byOwner[owner] = append(byOwner[owner], p)
		}
	}
	for owner, parts := range byOwner {
		if owner.ID == n.cfg.ID {
			continue // leaving, but the ring has no one else yet
		}
		var states []limiter.KeyState
		for _, p := range parts {
			states = append(states, n.store.SnapshotShard(p, n.cfg.Now())...)
		}
		sent, merged := 0, 0
		for sent < len(states) {
			chunk := states[sent : sent+handoffChunk(states[sent:])]
			// The receiver logs what it refuses under the same request_id.
			rid := rpc.NewRequestID()
			m, rejected, err := n.peers.Handoff(rpc.WithRequestID(ctx, rid), rpc.Route{ID: owner.ID, Addr: owner.Addr}, chunk)
			if err != nil {
				// The state never left: try again on the next round.
				n.metrics.handoffs.WithLabelValues("failed").Inc()
				n.log.Warn("handoff failed; will retry", "owner", owner.ID, "keys", len(states)-sent, "err", err, "request_id", rid)
				left += len(states) - sent
				break
			}
			// Delivered: drop exactly that, keep what was admitted since.
			n.store.Forget(n.cfg.Now(), chunk)
			n.metrics.handoffs.WithLabelValues("sent").Inc()
			n.metrics.handoffKeys.WithLabelValues("sent").Add(float64(m))
			if len(rejected) > 0 {
				n.metrics.handoffKeys.WithLabelValues("refused").Add(float64(len(rejected)))
				n.log.Warn("owner refused some handed-off keys", "owner", owner.ID, "refused", len(rejected), "first", rejected[0], "request_id", rid)
			}
			sent += len(chunk)
			merged += m
		}
		if merged > 0 {
			n.log.Info("handed off", "owner", owner.ID, "partitions", len(parts), "keys", merged)
		}
	}
	return left
}

// handoffChunkBytes bounds one Handoff call, well under the receiver's
// gRPC message limit (4 MiB by default): a node may hold millions of keys.
const handoffChunkBytes = 1 << 20

// handoffChunk returns how many of states fit in one Handoff call (at
// least one: a single log key of 10,000 entries is ~40 KB).
func handoffChunk(states []limiter.KeyState) int {
	size := 0
	for i, s := range states {
		size += 48 + len(s.Key) + 5*len(s.Log) // wire size, roughly
		if size > handoffChunkBytes && i > 0 {
			return i
		}
	}
	return len(states)
}

// received counts state handed to this node.
func (n *Node) received(ctx context.Context, origin string, merged int, rejected []string) {
	n.metrics.handoffKeys.WithLabelValues("received").Add(float64(merged))
	if len(rejected) > 0 {
		n.log.Warn("refused handed-off keys", "from", origin, "refused", len(rejected), "first", rejected[0],
			"request_id", rpc.RequestIDFrom(ctx)) // always set: handoffs carry one
	}
}

// sweepLoop frees expired keys until the node stops.
func (n *Node) sweepLoop() {
	t := time.NewTicker(n.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			if freed := n.store.Sweep(n.cfg.Now()); freed > 0 {
				n.log.Debug("swept expired keys", "freed", freed)
			}
			n.capacity.report(n.store.Stats())
		}
	}
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
		n.leaving.Store(true)
		n.membershipChanged(n.members.Members()) // a ring without this node
		if err := n.members.Leave(ctx); err != nil {
			errs = append(errs, err)
		}
		if left := n.handOff(ctx); left > 0 {
			errs = append(errs, fmt.Errorf("%d keys could not be handed off", left))
		}
		if err := n.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			n.httpSrv.Close()
		}
		done := make(chan struct{})
		go func() { n.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			n.grpcSrv.Stop() // cuts the remaining calls; GracefulStop then returns
			<-done
			errs = append(errs, fmt.Errorf("grpc graceful stop: %w", ctx.Err()))
		}
		// Decisions made by calls that were in flight during the handoff.
		if left := n.handOff(ctx); left > 0 {
			errs = append(errs, fmt.Errorf("%d keys could not be handed off after draining", left))
		}
		n.stopErr = errors.Join(append(errs, n.halt())...)
		n.log.Info("stopped")
	})
	return n.stopErr
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
		n.log.Info("killed")
	})
}

// stopLoops stops the sweeper and the handoff loop and waits for them.
func (n *Node) stopLoops() {
	close(n.stop)
	n.loops.Wait()
}

// halt stops gossip, peer connections and every goroutine of the node.
func (n *Node) halt() error {
	err := n.members.Shutdown()
	n.peers.Close()
	n.grpcSrv.Stop()
	n.wg.Wait()
	return err
}

// memberInfo lists the members for GET /v1/members.
func (n *Node) memberInfo() httpapi.Members {
	r := n.ring.Load()
	parts := r.Partitions()
	out := httpapi.Members{Self: n.cfg.ID, Partitions: r.PartitionCount()}
	for _, m := range n.members.View() {
		out.Members = append(out.Members, httpapi.MemberInfo{
			ID: m.ID, GRPCAddr: m.GRPCAddr, GossipAddr: m.GossipAddr, State: string(m.State),
			Partitions: parts[m.ID], Share: float64(parts[m.ID]) / float64(r.PartitionCount()),
		})
	}
	return out
}

// membersProto answers the Members call: the view and the ring, with each
// partition's owner as an index into the member list.
func (n *Node) membersProto() *pb.MembersResponse {
	r := n.ring.Load()
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
	for _, m := range n.members.View() {
		if i, ok := index[m.ID]; ok {
			out.Members[i].GossipAddr, out.Members[i].State = m.GossipAddr, string(m.State)
		} else {
			add(&pb.Member{Id: m.ID, GrpcAddr: m.GRPCAddr, GossipAddr: m.GossipAddr, State: string(m.State)})
		}
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
