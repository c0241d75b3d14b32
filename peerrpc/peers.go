// Package peerrpc carries the peer protocol (package peer) over gRPC: Peers
// is a node's peer.Peers, with one long-lived connection per member and
// forwarded checks batched on one stream per member; Server serves the
// peerlimit.v1.Peer service over a peer.Handler. Conversions are
// internal/protoconv's; the public API is package rpc's.
package peerrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Observer is told of every call that carries checks to their owner: when
// it started, how many checks it carried, and its error. route.Metrics
// is one. It is called concurrently, from the callers' and the streams'
// goroutines, and must not block.
type Observer interface {
	ForwardCall(start time.Time, checks int, err error)
}

// Peers carries a node's calls to the other members over gRPC: it is the
// node's peer.Peers. It holds one long-lived connection per member,
// created when the member appears and closed when it goes, and batches
// forwarded checks per member. Safe for concurrent use.
type Peers struct {
	cfg      Config
	self     string // sent as the origin of every call
	observer Observer
	dial     []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*conn // by member ID
	closed bool
}

var _ peer.Peers = (*Peers)(nil)

// errClosed fails calls once Close was called.
var errClosed = errors.New("peer connections closed")

// conn is one member's connection and, with batching on, the link that
// carries forwarded checks to it.
type conn struct {
	route  peer.Route
	cc     *grpc.ClientConn
	client pb.PeerClient
	link   *forwardLink // nil when batching is off
}

// NewPeers returns an empty peer set for the member self. observer, if
// not nil, is told of every forward; dial is added to every connection
// (TLS, a source address). Close it when done.
func NewPeers(cfg Config, self string, observer Observer, dial ...grpc.DialOption) (*Peers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if self == "" {
		return nil, errors.New("peerrpc: self must not be empty")
	}
	if observer == nil {
		observer = noObserver{}
	}
	return &Peers{cfg: cfg, self: self, observer: observer, dial: dial, conns: map[string]*conn{}}, nil
}

type noObserver struct{}

func (noObserver) ForwardCall(time.Time, int, error) {}

// Update makes the set match members (this node excluded): connections to
// new members are opened, those of departed or moved members closed.
func (p *Peers) Update(members []peer.Route) {
	want := make(map[string]peer.Route, len(members))
	for _, m := range members {
		if m.ID != p.self {
			want[m.ID] = m
		}
	}
	var stale []*conn
	p.mu.Lock()
	for id, c := range p.conns {
		if r, ok := want[id]; !ok || r != c.route {
			stale = append(stale, c)
			delete(p.conns, id)
		}
	}
	p.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
	for _, r := range want {
		if _, err := p.get(r); err != nil {
			continue // get fails only when closed or the address is unusable; calls will say so
		}
	}
}

// connectParams bound how long a peer connection stays down after its
// peer came back. grpc's defaults back off to 2 minutes between attempts
// and give an attempt 20 s: a connection made while the peer was cut off
// (a forward races the ring update during a partition) then kept failing
// forwards for many seconds after the heal, every one answered by
// fallback (seen with jepsen-lite's docker mode). Peers share a network;
// an attempt a second per unreachable peer costs nothing.
var connectParams = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
})

// get returns the connection to r, connecting if needed: a ring may name
// an owner before Update has run. One whose address changed (a restart)
// is replaced, and the old one closed once p.mu is released.
func (p *Peers) get(r peer.Route) (*conn, error) {
	c, old, err := p.getLocked(r)
	if old != nil {
		old.close()
	}
	return c, err
}

func (p *Peers) getLocked(r peer.Route) (c, old *conn, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, errClosed
	}
	if c, ok := p.conns[r.ID]; ok && c.route == r {
		return c, nil, nil
	}
	opts := append(append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), connectParams, p.cfg.keepalive()}, wire.Dial()...),
		p.dial...)
	cc, err := grpc.NewClient(r.Addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s at %s: %w", r.ID, r.Addr, err)
	}
	cc.Connect() // dial now, not on the first forward
	c = &conn{route: r, cc: cc, client: pb.NewPeerClient(cc)}
	if p.cfg.BatchLimit > 1 {
		if c.link, err = newForwardLink(p, c); err != nil {
			_ = cc.Close()
			return nil, nil, err
		}
	}
	old = p.conns[r.ID]
	p.conns[r.ID] = c
	return c, old, nil
}

func (c *conn) close() {
	if c.link != nil {
		c.link.close()
	}
	_ = c.cc.Close()
}

// Close closes every connection; later calls fail.
func (p *Peers) Close() {
	p.mu.Lock()
	all := p.conns
	p.conns, p.closed = map[string]*conn{}, true
	p.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}

// call makes one unary call to member to, as every call but a batched
// forward is made: it finds the member's connection, gives the call the
// request id of ctx's request (or a new one) and a deadline of timeout,
// and returns every failure as a *peer.CallError naming that id and what
// was asked (whatf and args, formatted only then). A member's refusal
// keeps its code and field (refusal).
func call[Resp any](p *Peers, ctx context.Context, to peer.Route, timeout time.Duration,
	do func(context.Context, *conn) (Resp, error), whatf string, args ...any) (Resp, string, error) {
	id := peer.RequestIDForCall(ctx)
	var zero Resp
	c, err := p.get(to)
	if err == nil {
		ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), timeout)
		defer cancel()
		var resp Resp
		if resp, err = do(ctx, c); err == nil {
			return resp, id, nil
		}
	}
	return zero, id, &peer.CallError{ID: id, Err: fmt.Errorf("%s: %w", fmt.Sprintf(whatf, args...), refusal(err))}
}

// refusal converts a call's error: a member's refusal of the call, as
// invalid (naming the field) or as one it cannot serve, becomes the
// *peer.Error it was on the member; anything else, the transport's, stays
// as it is.
func refusal(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return &peer.Error{Code: peer.InvalidArgument, Field: grpcapi.Field(st), Message: st.Message()}
	case codes.FailedPrecondition:
		return &peer.Error{Code: peer.FailedPrecondition, Field: grpcapi.Field(st), Message: st.Message()}
	}
	return err
}
