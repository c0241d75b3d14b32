// Package xdsserver runs go-control-plane's own state-of-the-world ADS
// server in process, serving RateLimitConfig snapshots as Envoy Gateway's
// controller does (internal/globalratelimit/runner: a snapshot cache
// keyed by node id, snapshots set for one id), and records what clients
// answer (ACK, NACK), for tests of the xDS subscription.
package xdsserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// EnvoyGatewayNodeID is the one node id Envoy Gateway serves its rate
// limit configuration to (ratelimit.InfraName); every replica of its
// rate limit service subscribes with it (CONFIG_GRPC_XDS_NODE_ID).
const EnvoyGatewayNodeID = "envoy-ratelimit"

// Answer is what a client said about a response: an ACK of Version, or a
// NACK (Nack holds the error_detail's message; Version is then the one
// the client keeps). Node is the client's node id, which replicas share;
// Stream tells the streams apart.
type Answer struct {
	Node    string
	Stream  int64
	Version string
	Nack    string
}

// Server is a running control plane.
type Server struct {
	Addr string
	// NodeIDs are the node ids Set serves; a client subscribing under
	// any other gets nothing, as from Envoy Gateway.
	NodeIDs []string
	cache   cache.SnapshotCache
	srv     *grpc.Server
	stop    context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	answers []Answer
	streams int
}

// Start serves on a free loopback port, over TLS when tlsCfg is not nil,
// and stops when t ends (or at Stop). Set serves nodeIDs, by default
// EnvoyGatewayNodeID alone. The gRPC server has the default keepalive
// enforcement, as Envoy Gateway's.
func Start(t testing.TB, tlsCfg *tls.Config, nodeIDs ...string) *Server {
	t.Helper()
	if len(nodeIDs) == 0 {
		nodeIDs = []string{EnvoyGatewayNodeID}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdsserver: %v", err)
	}
	// Not ADS mode, and keyed by node id, as Envoy Gateway's cache.
	return serve(t, lis, tlsCfg, nodeIDs, cache.NewSnapshotCache(false, cache.IDHash{}, nil))
}

// Restart serves old's snapshots again on old's address, to old's node
// ids (old must be stopped): a control plane that restarted.
func Restart(t testing.TB, old *Server, tlsCfg *tls.Config) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", old.Addr)
	if err != nil {
		t.Fatalf("xdsserver: listening again on %s: %v", old.Addr, err)
	}
	return serve(t, lis, tlsCfg, old.NodeIDs, old.cache)
}

func serve(t testing.TB, lis net.Listener, tlsCfg *tls.Config, nodeIDs []string, c cache.SnapshotCache) *Server {
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Addr: lis.Addr().String(), NodeIDs: nodeIDs, cache: c, srv: grpc.NewServer(opts...), stop: cancel, done: make(chan struct{})}
	callbacks := serverv3.CallbackFuncs{StreamRequestFunc: s.onRequest, StreamOpenFunc: s.onOpen}
	discoverypb.RegisterAggregatedDiscoveryServiceServer(s.srv, serverv3.NewServer(ctx, c, callbacks))
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	t.Cleanup(s.Stop)
	return s
}

// Stop closes every stream and the listener, and waits.
func (s *Server) Stop() {
	s.stop()
	s.srv.Stop()
	<-s.done
}

func (s *Server) onOpen(context.Context, int64, string) error {
	s.mu.Lock()
	s.streams++
	s.mu.Unlock()
	return nil
}

// onRequest records every answer to a response (a request with a nonce).
func (s *Server) onRequest(stream int64, req *discoverypb.DiscoveryRequest) error {
	if req.GetResponseNonce() == "" {
		return nil
	}
	a := Answer{Node: req.GetNode().GetId(), Stream: stream, Version: req.GetVersionInfo()}
	if d := req.GetErrorDetail(); d != nil {
		a.Nack = d.GetMessage()
	}
	s.mu.Lock()
	s.answers = append(s.answers, a)
	s.mu.Unlock()
	return nil
}

// Set serves configs as the state of the world at version to the
// server's NodeIDs. With no configs the snapshot is Envoy Gateway's once
// its last Gateway is deleted: no RateLimitConfig entry at all, so the
// response has no resources and an empty version_info.
func (s *Server) Set(t testing.TB, version string, configs ...*rlsconfpb.RateLimitConfig) {
	t.Helper()
	res := map[resource.Type][]types.Resource{}
	for _, c := range configs {
		res[resource.RateLimitConfigType] = append(res[resource.RateLimitConfigType], c)
	}
	snap, err := cache.NewSnapshot(version, res)
	if err != nil {
		t.Fatalf("xdsserver: snapshot %s: %v", version, err)
	}
	for _, id := range s.NodeIDs {
		if err := s.cache.SetSnapshot(context.Background(), id, snap); err != nil {
			t.Fatalf("xdsserver: snapshot %s for node %q: %v", version, id, err)
		}
	}
}

// Answers returns what clients answered so far, in order.
func (s *Server) Answers() []Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Answer(nil), s.answers...)
}

// Streams counts the streams opened so far.
func (s *Server) Streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams
}

// Acked counts the ACKs of version.
func (s *Server) Acked(version string) int {
	n := 0
	for _, a := range s.Answers() {
		if a.Nack == "" && a.Version == version {
			n++
		}
	}
	return n
}

// Nacks returns the NACK messages received so far.
func (s *Server) Nacks() []string {
	var out []string
	for _, a := range s.Answers() {
		if a.Nack != "" {
			out = append(out, a.Nack)
		}
	}
	return out
}

// String describes the answers, for failure messages.
func (s *Server) String() string {
	return fmt.Sprintf("%d streams, answers %+v", s.Streams(), s.Answers())
}
