// Package node assembles a peerlimit node: the limiter store, the request
// path, the gRPC and HTTP APIs, metrics and the expiry sweeper, with one
// Start and one Shutdown. cmd/node is a thin flag parser around it, and tests
// start real nodes with it on loopback ports.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/rpc"
)

// Node is a running peerlimit node. Its methods are safe for concurrent use.
type Node struct {
	cfg    Config
	log    *slog.Logger
	store  *limiter.Store
	svc    *rpc.Service
	health *health.Server

	grpcSrv *grpc.Server
	httpSrv *http.Server
	grpcLn  net.Listener
	httpLn  net.Listener

	serving  atomic.Bool
	stop     chan struct{} // closed by Shutdown: stops the sweeper
	wg       sync.WaitGroup
	shutOnce sync.Once
	shutErr  error
}

// Start builds a node from cfg, binds its listeners and starts serving. On
// error nothing is left running.
func Start(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store, err := limiter.New(cfg.Limiter)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newStoreCollector(store))
	metrics, err := rpc.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	rcfg := rpc.DefaultConfig()
	rcfg.NodeID, rcfg.MaxBatch, rcfg.Now = cfg.ID, cfg.MaxBatch, cfg.Now
	svc, err := rpc.NewService(rcfg, store, metrics)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), store: store, svc: svc, health: health.NewServer(), stop: make(chan struct{})}

	if n.grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen on %s: %w", cfg.GRPCAddr, err)
	}
	if n.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		n.grpcLn.Close()
		return nil, fmt.Errorf("http listen on %s: %w", cfg.HTTPAddr, err)
	}

	n.grpcSrv = grpc.NewServer(append(rpc.NewStrictCodec().ServerOptions(n.recoverUnary),
		grpc.MaxRecvMsgSize(cfg.MaxRecvMsgBytes))...)
	pb.RegisterRateLimiterServer(n.grpcSrv, rpc.NewServer(svc))
	healthpb.RegisterHealthServer(n.grpcSrv, n.health)
	reflection.Register(n.grpcSrv)

	n.httpSrv = &http.Server{
		Handler: httpapi.NewHandler(svc, httpapi.Config{
			MaxBodyBytes: cfg.MaxBodyBytes,
			Healthy:      n.serving.Load,
			Metrics:      promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
	}

	n.serving.Store(true)
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	n.health.SetServingStatus(pb.RateLimiter_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	n.wg.Add(3)
	go func() {
		defer n.wg.Done()
		if err := n.grpcSrv.Serve(n.grpcLn); err != nil {
			n.log.Error("grpc server stopped", "err", err)
		}
	}()
	go func() {
		defer n.wg.Done()
		if err := n.httpSrv.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "err", err)
		}
	}()
	go func() {
		defer n.wg.Done()
		n.sweep()
	}()
	if len(cfg.Join) > 0 {
		n.log.Warn("clustering is not built yet: this node runs alone and ignores --join", "join", cfg.Join)
	}
	n.log.Info("node started", "grpc", n.GRPCAddr(), "http", n.HTTPAddr())
	return n, nil
}

// GRPCAddr is the bound gRPC address.
func (n *Node) GRPCAddr() string { return n.grpcLn.Addr().String() }

// HTTPAddr is the bound HTTP address.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// Store exposes the node's limiter state, for tests and embedding.
func (n *Node) Store() *limiter.Store { return n.store }

// sweep frees expired keys until Shutdown.
func (n *Node) sweep() {
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
		}
	}
}

// Shutdown stops the node gracefully: health turns NOT_SERVING, in-flight
// calls finish until ctx ends, then everything is stopped and every
// goroutine the node started has returned. It is safe to call more than
// once; later calls return the first result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.shutOnce.Do(func() {
		n.log.Info("shutting down")
		n.serving.Store(false)
		n.health.Shutdown()
		close(n.stop)

		var errs []error
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
		n.wg.Wait()
		n.shutErr = errors.Join(errs...)
		n.log.Info("stopped")
	})
	return n.shutErr
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
