package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/rpc"
	"github.com/peerlimit/peerlimit/security"
	"github.com/peerlimit/peerlimit/tracing"
)

// Assembling a node: Start runs the init steps, each registering what
// undoes it, then starts the loops. The starter exists for Start only;
// the Node it fills in is what runs.

// starter assembles a Node.
type starter struct {
	*Node
	undo []func() // Start's cleanups, run in reverse if a later step fails
}

// Start builds a node from cfg, binds its listeners, joins the cluster
// and starts serving. It runs the init steps below in order; each
// registers what undoes it, and if a step fails the ones before it are
// undone in reverse, so that nothing is left running.
func Start(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &starter{Node: &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), reg: prometheus.NewRegistry(), health: health.NewServer()}}
	defer func() {
		if err != nil {
			for i := len(n.undo) - 1; i >= 0; i-- {
				n.undo[i]()
			}
		}
	}()
	for _, step := range []func() error{
		n.initMetrics,   // the registry's node-wide collectors
		n.initConsole,   // the sampler of the console's charts
		n.initSecurity,  // TLS material, tokens, cluster secrets
		n.initListeners, // bound now, so that the ring and peers know this node's address
		n.initTracing,   // the span exporter, before anything records spans
		n.initConfigs,   // policies and Envoy rules, checked against the store's caps
		n.initCore,      // the peers, and the Core: the store restored from its disk, ownership, route.Service, handoff, replicas
		n.initGRPC,      // the public, peer, Envoy, health and reflection services
		n.initHTTP,      // the JSON API, metrics, probes
		n.serve,         // before joining: the moment others see this node they call it
		n.joinCluster,   // gossip; membership changes move ownership from here on
		n.startConfigs,  // files reloaded as they change (WatchConfig), the control plane subscribed to, digests advertised
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	n.startServing()
	n.log.Info("node started", "grpc", n.GRPCAddr(), "http", n.HTTPAddr(), "gossip", n.members.GossipAddr())
	return n.Node, nil
}

// initCore makes the connections to the peers and the Core over them:
// the store, restored from its data directory, and the request path.
func (n *starter) initCore() (err error) {
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
	deps := CoreDeps{Addr: n.GRPCAddr(), Peers: n.peers, Connections: n.peers, Registerer: n.reg,
		RouteMetrics: routeMetrics, Samples: n.sampler, Tracer: n.traces.Tracer(routeTracer)}
	if r := n.configs.PolicyRegistry(); r != nil { // a nil *Registry in the interface would not be nil
		deps.Policies = r
	}
	n.core, err = NewCore(n.cfg, deps)
	if err != nil {
		return err
	}
	n.onUndo(func() { n.core.Halt(true) })
	n.svc = n.core.svc
	return nil
}

// initConfigs loads the policy file and the Envoy rate limit
// configuration, each checked against the store's caps so that a limit
// no request could use is refused now rather than on every request.
func (n *starter) initConfigs() (err error) {
	n.configs, err = configs.New(n.cfg.Config, configs.Deps{Self: n.cfg.ID, Check: n.cfg.Limiter.ValidateRequest, Now: n.cfg.Now, Logger: n.log,
		Registerer: n.reg, Health: n.health, Serving: n.serving.Load})
	return err
}

func (n *starter) initMetrics() (err error) {
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err = registerMembers(n.reg, n.Node); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err = registerFaults(n.reg, n.cfg.faults()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

func (n *starter) initSecurity() (err error) {
	n.sec, err = security.NewCredentials(n.cfg.Security, security.CredentialsDeps{SelfID: n.cfg.ID, GRPCAddr: n.cfg.GRPCAddr,
		GossipKey: len(n.cfg.GossipKey) > 0, ConfigPath: "Security", Now: n.cfg.Now, Registerer: n.reg, Logger: n.log})
	if err != nil {
		return err
	}
	// Reservation tokens are keyed by the cluster secrets, so that the
	// heir of a key verifies its owner's; without any, by the cluster's
	// name, which is public (docs/security.md, "Reservation tokens").
	n.cfg.Limiter.TokenKeys = limiter.NewTokenKeys(n.sec.ClusterSecrets(), n.cfg.ClusterName)
	return nil
}

func (n *starter) initListeners() (err error) {
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

// streamWorkers is how many goroutines serve calls, reused from call to
// call: a handler blocks while its check is forwarded, so with one per
// core, as grpc-go suggests for handlers that only compute, most calls of
// a node forwarding to others got a fresh goroutine and grew its stack
// again (runtime.copystack, 5 % of a node's CPU at 5 nodes). With 128,
// make bench-scale's frame at 5 nodes spent 10 % less CPU per check
// (medians of 3 interleaved runs: 104 → 94 µs); 256 did no better.
const streamWorkers = 128

func (n *starter) initGRPC() error {
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
	peerrpc.Register(n.grpcSrv, n.peerServer()) // Replicate decoded without a message per state
	if err := n.configs.RegisterEnvoyRLS(n.grpcSrv, envoyrls.ServerDeps{Checker: n.svc, Validate: n.core.store.Validate,
		MaxKeyBytes: n.core.store.Config().MaxKeyBytes, Logger: n.log,
		Tracer: n.traces.Tracer(envoyRLSTracer), Propagator: tracing.Propagator()}); err != nil {
		return err
	}
	healthpb.RegisterHealthServer(n.grpcSrv, n.health)
	reflection.Register(n.grpcSrv)
	return nil
}

// peerServer serves the peer protocol over the request path. Its streams
// end at Shutdown with the others (grpcapi.Drain). Their batches are not
// checked again one by one (Server.Admit): a stream's credentials are the
// ones it opened with, and checking them again on every batch would cut
// every stream in the middle of a secret rotation.
func (n *starter) peerServer() *peerrpc.Server {
	s := peerrpc.NewServer(n.svc.Peer)
	s.Drain = n.drain
	s.Tracer, s.NodeID = n.traces.Tracer(peerTracer), n.cfg.ID
	return s
}

func (n *starter) initHTTP() error {
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
func (n *starter) serve() error {
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

func (n *starter) joinCluster() (err error) {
	n.members, err = cluster.Start(cluster.Config{
		ID: n.cfg.ID, BindAddr: n.cfg.GossipAddr, AdvertiseAddr: n.cfg.AdvertiseAddr, GRPCAddr: n.GRPCAddr(),
		Join: n.cfg.Join, SecretKey: n.cfg.GossipKey, Keys: n.sec.GossipKeys(), Profile: n.cfg.GossipProfile,
		ConfigDigests: n.configs.Digests(), Restored: n.core.Restored(), Boot: n.core.Boot(), Logger: n.log, OnChange: n.membershipChanged,
		FaultInjection: len(n.cfg.faults()) > 0,
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
	n.joined.Store(n.members)
	n.configs.Joined(n.members) // a reload while joining found no cluster to tell
	// The join is done: route by the members it found before serving,
	// rather than as the lone owner of every key until the notifier's
	// first delivery (a node restarted after a crash would otherwise
	// decide every key it receives from zero for that moment).
	n.members.Sync()
	n.core.Joined()
	return nil
}

// startServing turns health to SERVING and starts the Core's loops.
func (n *starter) startServing() {
	n.serving.Store(true)
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	n.health.SetServingStatus(pb.RateLimiter_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	n.configs.UpdateHealth() // the Envoy service's, from its rules
	n.core.Start(n.sampler)
}

// onUndo registers what undoes a step, should a later one fail.
func (n *starter) onUndo(f func()) { n.undo = append(n.undo, f) }

func (n *starter) initConsole() (err error) {
	n.sampler, err = console.NewSampler(n.reg, console.DefaultKeep)
	return err
}

// consoleView is the node's console API over its request path and peers.
func (n *starter) consoleView() consoleAPI {
	return consoleAPI{n.svc.Queries, console.NewCluster(n.cfg.ID, n.core.own, n.peers, n.svc.Peer, n.cfg.Now)}
}

// initTracing builds the span exporter of Config.Tracing (a provider that
// records nothing when it is off), named after the node unless told
// otherwise.
func (n *starter) initTracing() (err error) {
	tc := n.cfg.Tracing
	if tc.InstanceID == "" {
		tc.InstanceID = n.cfg.ID
	}
	if n.traces, err = tracing.New(context.Background(), tc); err != nil {
		return err
	}
	n.onUndo(func() { _ = n.stopTracing(expired()) })
	if tc.Enabled {
		n.log.Info("tracing on", "protocol", tc.Protocol, "endpoint", tc.Endpoint, "service", tc.ServiceName,
			"instance", tc.InstanceID, "sampling_rate", tc.SamplingRate)
	}
	return nil
}

// startConfigs starts what keeps the configurations current (package
// configs): with WatchConfig the files' watcher, the control plane's
// subscription, and the advertising of digests. The last of Start's
// steps, so that a reload's consequences find the node complete.
func (n *starter) startConfigs() error {
	if err := n.configs.Start(); err != nil {
		return err
	}
	n.onUndo(func() { _ = n.configs.Shutdown(context.Background()) })
	return nil
}
