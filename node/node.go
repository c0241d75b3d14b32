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
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/security"
	"github.com/peerlimit/peerlimit/tracing"
)

// Node is a running peerlimit node. Its methods are safe for concurrent use.
type Node struct {
	cfg Config
	log *slog.Logger
	reg *prometheus.Registry
	// core is the node without its faces: the store and its disk,
	// ownership, the request path, replicas, handoff, leases, their loops.
	core    *Core
	svc     *route.Service // core's
	peers   *peerrpc.Peers
	members *cluster.Cluster
	// joined is members, for what the servers read: they serve before
	// the join has made it (start.go), so they read it atomically and
	// find nil until then.
	joined atomic.Pointer[cluster.Cluster]
	sec    *security.Credentials
	health *health.Server
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

	serving atomic.Bool
	wg      sync.WaitGroup // the servers

	stopOnce sync.Once
	stopErr  error
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
func (n *Node) Store() *limiter.Store { return n.core.store }

// Ring returns the node's current view of ownership.
func (n *Node) Ring() *ring.Ring { return n.core.Ring() }

// HandoffsWaiting returns how many partitions this node has come to own
// whose state other members have not yet said they handed over: their
// answers are marked degraded meanwhile.
func (n *Node) HandoffsWaiting() int { return n.core.Waiting() }

// AnswersDegraded reports whether this node marks every answer it decides
// degraded, whatever the key: a member out of its ring on its evidence
// alone, back alone from its data directory, or cut off (its probes fail).
func (n *Node) AnswersDegraded() bool { return n.core.own.View().AllContested() }

// Members returns the live members this node sees.
func (n *Node) Members() []cluster.Member { return n.members.Members() }

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
		n.core.Leaving() // a ring without this node
		if err := n.members.Leave(ctx); err != nil {
			errs = append(errs, err)
		}
		n.core.HandOff(ctx) // what is left goes in the last round, below
		if err := n.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			n.httpSrv.Close()
		}
		if err := n.stopGRPC(ctx); err != nil {
			errs = append(errs, err)
		}
		n.core.SettleLeases(ctx) // no call can admit from them any more
		// Decisions made by calls that were in flight during the handoff.
		if left := n.core.HandOff(ctx); left > 0 {
			errs = append(errs, n.core.KeptOnDisk(left))
		}
		// The disk's last word comes after the last handoff and the last
		// call served: whatever this node still holds, it keeps there.
		errs = append(errs, n.core.CloseDisk())
		// A watcher's reload under way, last and within ctx: one blocked
		// on a file system that hangs must hold up nothing above, nor the
		// exit past the deadline.
		errs = append(errs, n.configs.Shutdown(ctx))
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
		_ = n.configs.Shutdown(context.Background()) // tests and chaos runs: no reload there blocks
		n.stopErr = n.halt()
		_ = n.stopTracing(expired()) // as a crash: the spans not yet exported are lost
		n.core.Halt(true)            // as a crash: what was written to the disk stays, nothing more
		n.log.Info("killed")
	})
}

// stopLoops stops the periodic loops (sweeper, handoff, replication,
// sampler, leases), and waits for them, and what keeps the
// configurations current (the files' watcher, the control plane's
// subscription), whose reload under way Shutdown waits for last, and
// only until its context ends.
func (n *Node) stopLoops() {
	n.core.StopLoops()
	n.configs.Stop() // no reload of the watcher's starts while leaving
}

// halt stops gossip, peer connections and every goroutine of the node.
func (n *Node) halt() error {
	err := n.members.Shutdown()
	n.core.Halt(false)
	n.peers.Close()
	n.grpcSrv.Stop()
	n.wg.Wait()
	return err
}

// memberInfo lists the members for GET /v1/members.
func (n *Node) memberInfo() httpapi.Members {
	r := n.Ring()
	parts := r.Partitions()
	out := httpapi.Members{Self: n.cfg.ID, Partitions: r.PartitionCount(), FaultInjection: n.cfg.faults()}
	own := n.configs.Digests()
	for _, m := range n.view() {
		out.Members = append(out.Members, httpapi.MemberInfo{
			ID: m.ID, GRPCAddr: m.GRPCAddr, GossipAddr: m.GossipAddr, State: string(m.State),
			Partitions: parts[m.ID], Share: float64(parts[m.ID]) / float64(r.PartitionCount()),
			Config: m.Config, ConfigDiffers: m.ConfigDiffers(own), FaultInjection: m.FaultInjection,
		})
	}
	return out
}

// view is the membership's view of every member, for the servers: none
// before the join (the ring's owners are this node then).
func (n *Node) view() []cluster.Member {
	if c := n.joined.Load(); c != nil {
		return c.View()
	}
	return nil
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
	for _, m := range n.view() {
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
