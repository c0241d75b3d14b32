package rpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// PeersConfig holds the settings of the calls to other members. Start
// from DefaultPeersConfig.
type PeersConfig struct {
	// BatchLimit is the most checks one batch of forwarded checks carries.
	// 1 turns batching off: every check is its own Forward call. Default
	// 128.
	BatchLimit int
	// MaxInflight is the most batches out to one peer at once, sent and
	// not yet answered. While they are out, checks bound there gather, and
	// go together as soon as one is answered: under load a batch carries
	// what arrived during the one before it. Default 1.
	MaxInflight int
	// Timeout bounds every call to a peer, and the wait for each batch's
	// answer. Past it the owner counts as unreachable and the fallback
	// policy answers. Default 500ms.
	Timeout time.Duration
}

// DefaultPeersConfig returns the defaults documented on PeersConfig.
func DefaultPeersConfig() PeersConfig {
	return PeersConfig{BatchLimit: 128, MaxInflight: 1, Timeout: 500 * time.Millisecond}
}

// Validate reports every unusable field.
func (c PeersConfig) Validate() error {
	var errs []error
	if c.BatchLimit < 1 {
		errs = append(errs, fmt.Errorf("BatchLimit must be ≥ 1 (1 turns batching off), got %d", c.BatchLimit))
	}
	if c.MaxInflight < 1 {
		errs = append(errs, fmt.Errorf("MaxInflight must be ≥ 1, got %d", c.MaxInflight))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("Timeout must be positive, got %s", c.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("peers config: %w", err)
	}
	return nil
}

// Peers carries a node's calls to the other members over gRPC: it is the
// node's route.Peers. It holds one long-lived connection per member,
// created when the member appears and closed when it goes, and batches
// forwarded checks per member. Safe for concurrent use.
type Peers struct {
	cfg     PeersConfig
	self    string // sent as the origin of every call
	metrics *route.Metrics
	dial    []grpc.DialOption
	mu      sync.Mutex
	peers   map[string]*peer // by member ID
	closed  bool
}

var _ route.Peers = (*Peers)(nil)

// errPeerClosed fails calls to a peer that left the membership.
var errPeerClosed = errors.New("peer connection closed")

type peer struct {
	route  route.Route
	conn   *grpc.ClientConn
	client pb.PeerClient
	link   *forwardLink // nil when batching is off
}

// NewPeers returns an empty peer set for the member self. metrics, if not
// nil, observes every Forward call; dial is added to every connection
// (TLS, a source address). Close it when done.
func NewPeers(cfg PeersConfig, self string, metrics *route.Metrics, dial ...grpc.DialOption) (*Peers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if self == "" {
		return nil, errors.New("peers: self must not be empty")
	}
	return &Peers{cfg: cfg, self: self, metrics: metrics, dial: dial, peers: map[string]*peer{}}, nil
}

// Update makes the set match members (this node excluded): connections to
// new members are opened, those of departed or moved members closed.
func (p *Peers) Update(members []route.Route) {
	want := make(map[string]route.Route, len(members))
	for _, m := range members {
		if m.ID != p.self {
			want[m.ID] = m
		}
	}
	var stale []*peer
	p.mu.Lock()
	for id, pr := range p.peers {
		if r, ok := want[id]; !ok || r != pr.route {
			stale = append(stale, pr)
			delete(p.peers, id)
		}
	}
	p.mu.Unlock()
	for _, pr := range stale {
		pr.close()
	}
	for _, r := range want {
		if _, err := p.get(r); err != nil {
			continue // get fails only when closed or the address is unusable; calls will say so
		}
	}
}

// peerConnectParams bound how long a peer connection stays down after its
// peer came back. grpc's defaults back off to 2 minutes between attempts
// and give an attempt 20 s: a connection made while the peer was cut off
// (a forward races the ring update during a partition) then kept failing
// forwards for many seconds after the heal, every one answered by
// fallback (seen with jepsen-lite's docker mode). Peers share a network;
// an attempt a second per unreachable peer costs nothing.
var peerConnectParams = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
})

// get returns the peer for r, connecting if needed: a ring may name an
// owner before Update has run.
func (p *Peers) get(r route.Route) (*peer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errPeerClosed
	}
	if pr, ok := p.peers[r.ID]; ok && pr.route == r {
		return pr, nil
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), peerConnectParams, wire.Dial()},
		p.dial...)
	conn, err := grpc.NewClient(r.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s at %s: %w", r.ID, r.Addr, err)
	}
	conn.Connect() // dial now, not on the first forward
	pr := &peer{route: r, conn: conn, client: pb.NewPeerClient(conn)}
	if p.cfg.BatchLimit > 1 {
		if pr.link, err = newForwardLink(p, pr); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	if old, ok := p.peers[r.ID]; ok {
		go old.close() // its address changed (a restart); don't close under p.mu
	}
	p.peers[r.ID] = pr
	return pr, nil
}

func (pr *peer) close() {
	if pr.link != nil {
		pr.link.close()
	}
	_ = pr.conn.Close()
}

// Forward sends one check to its owner, batched with others bound there,
// and returns the owner's answer and the request id of the batch that
// carried it (CallID of an error says the same). The error is for the
// transport (the owner could not be asked); an answer the owner gave,
// including a per-check error, is in the Result.
func (p *Peers) Forward(ctx context.Context, to route.Route, req limiter.Request) (route.Result, string, error) {
	pr, err := p.get(to)
	if err != nil {
		return route.Result{}, "", err
	}
	preq := ToProtoRequest(req)
	var res fwdResult
	if pr.link != nil {
		res, err = pr.link.batcher.Do(ctx, fwdItem{req: preq, ctx: ctx})
	} else {
		res.id = route.RequestIDForCall(ctx)
		var results []*pb.CheckResult
		results, err = p.forward(ctx, pr, []*pb.CheckRequest{preq}, res.id)
		if err == nil {
			res.res = results[0]
		}
	}
	if err != nil {
		return route.Result{}, route.CallID(err), fmt.Errorf("forward to %s: %w", to.ID, err)
	}
	return FromProtoResult(res.res), res.id, nil
}

// ForwardBatch sends checks to their owner, in the peer's batches with
// everything else bound there (or, with batching off, in one Forward call
// carrying the request's id), and returns one Result per check and the
// request id of a batch that carried them.
func (p *Peers) ForwardBatch(ctx context.Context, to route.Route, reqs []limiter.Request) ([]route.Result, string, error) {
	pr, err := p.get(to)
	if err != nil {
		return nil, "", err
	}
	preqs := make([]*pb.CheckRequest, len(reqs))
	slab := newRequestSlab(len(reqs))
	for i, r := range reqs {
		preqs[i] = slab.put(i, r)
	}
	if pr.link != nil {
		return pr.link.forwardAll(ctx, preqs)
	}
	id := route.RequestIDForCall(ctx)
	results, err := p.forward(ctx, pr, preqs, id)
	if err != nil {
		return nil, id, fmt.Errorf("forward %d checks to %s: %w", len(reqs), to.ID, err)
	}
	out := make([]route.Result, len(results))
	for i, r := range results {
		out[i] = FromProtoResult(r)
	}
	return out, id, nil
}

// forward makes one Forward call to pr carrying request id id; its error
// is a *route.CallError naming id.
func (p *Peers) forward(ctx context.Context, pr *peer, reqs []*pb.CheckRequest, id string) ([]*pb.CheckResult, error) {
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), p.cfg.Timeout)
	defer cancel()
	start := time.Now()
	resp, err := pr.client.Forward(ctx, &pb.ForwardRequest{Origin: p.self, Checks: reqs})
	if err == nil && len(resp.GetResults()) != len(reqs) {
		err = fmt.Errorf("peer answered %d of %d checks", len(resp.GetResults()), len(reqs))
	}
	p.metrics.ForwardCall(start, len(reqs), err)
	if err != nil {
		return nil, &route.CallError{ID: id, Err: err}
	}
	return resp.GetResults(), nil
}

// refusal converts a call's error: the member's refusal as invalid keeps
// its field (so that a reset the owner refused says why); anything else
// stays the transport's.
func refusal(err error) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return err
	}
	if f := grpcapi.Field(st); f != "" {
		return &limiter.ArgumentError{Field: f, Reason: strings.TrimPrefix(st.Message(), "invalid "+f+": ")}
	}
	return &route.Error{Code: route.InvalidArgument, Message: st.Message()}
}

// Handoff sends key states to their new owner and returns how many it
// merged and why it refused the others.
func (p *Peers) Handoff(ctx context.Context, to route.Route, states []limiter.KeyState) (int, []string, error) {
	pr, err := p.get(to)
	if err != nil {
		return 0, nil, err
	}
	req := &pb.HandoffRequest{Origin: p.self, States: make([]*pb.KeyState, len(states))}
	for i, s := range states {
		req.States[i] = ToProtoKeyState(s)
	}
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), 4*p.cfg.Timeout) // a partition's state is bigger than a check
	defer cancel()
	resp, err := pr.client.Handoff(ctx, req)
	if err != nil {
		return 0, nil, &route.CallError{ID: id, Err: fmt.Errorf("hand off %d keys to %s: %w", len(states), to.ID, refusal(err))}
	}
	return int(resp.GetMerged()), resp.GetRejected(), nil
}

// Replicate gives to, the backup of the partitions states belong to,
// their owner's current state, and returns how many it kept.
func (p *Peers) Replicate(ctx context.Context, to route.Route, r route.Replication) (int, error) {
	pr, err := p.get(to)
	if err != nil {
		return 0, err
	}
	req := &pb.ReplicateRequest{Origin: p.self, States: make([]*pb.KeyState, len(r.States)), Whole: make([]uint32, len(r.Whole))}
	for i, s := range r.States {
		req.States[i] = ToProtoKeyState(s)
	}
	for i, w := range r.Whole {
		req.Whole[i] = uint32(w)
	}
	states := r.States
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), 4*p.cfg.Timeout)
	defer cancel()
	resp, err := pr.client.Replicate(ctx, req)
	if err != nil {
		return 0, &route.CallError{ID: id, Err: fmt.Errorf("replicate %d keys to %s: %w", len(states), to.ID, refusal(err))}
	}
	return int(resp.GetKept()), nil
}

// Relay asks via to take reqs, whose owner this node cannot reach, to
// their owner (or decide them as the owner's heir), in one call. Its
// deadline leaves room for via's own forward to the owner.
func (p *Peers) Relay(ctx context.Context, via route.Route, reqs []limiter.Request) ([]route.Result, error) {
	pr, err := p.get(via)
	if err != nil {
		return nil, err
	}
	preqs := make([]*pb.CheckRequest, len(reqs))
	slab := newRequestSlab(len(reqs))
	for i, r := range reqs {
		preqs[i] = slab.put(i, r)
	}
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), 2*p.cfg.Timeout)
	defer cancel()
	resp, err := pr.client.Relay(ctx, &pb.ForwardRequest{Origin: p.self, Checks: preqs})
	if err == nil && len(resp.GetResults()) != len(reqs) {
		err = fmt.Errorf("relay answered %d of %d checks", len(resp.GetResults()), len(reqs))
	}
	if err != nil {
		return nil, &route.CallError{ID: id, Err: fmt.Errorf("relay %d checks through %s: %w", len(reqs), via.ID, err)}
	}
	out := make([]route.Result, len(reqs))
	for i, r := range resp.GetResults() {
		out[i] = FromProtoResult(r)
		if route.CodeOf(out[i].Err) == route.Unavailable {
			out[i].Err = &route.CallError{ID: id, Err: out[i].Err} // not decided: the caller's fallback answers
		}
	}
	return out, nil
}

// Reset asks member to to drop its state for r (never forwarding it
// further) and returns how many states that still counted something it
// dropped.
func (p *Peers) Reset(ctx context.Context, to route.Route, r route.ResetRequest) (int, error) {
	pr, err := p.get(to)
	if err != nil {
		return 0, err
	}
	id := route.RequestIDForCall(ctx)
	ctx, cancel := context.WithTimeout(grpcapi.Outgoing(ctx, id), p.cfg.Timeout)
	defer cancel()
	resp, err := pr.client.Reset(ctx, &pb.PeerResetRequest{Origin: p.self, Key: r.Key,
		WindowMs: r.Window.Milliseconds(), Algorithm: pb.Algorithm(r.Algorithm), AllWindows: r.AllWindows})
	if err != nil {
		return 0, &route.CallError{ID: id, Err: fmt.Errorf("reset on %s: %w", to.ID, refusal(err))}
	}
	return int(resp.GetCleared()), nil
}

// Close closes every connection; later calls fail.
func (p *Peers) Close() {
	p.mu.Lock()
	all := p.peers
	p.peers, p.closed = map[string]*peer{}, true
	p.mu.Unlock()
	for _, pr := range all {
		pr.close()
	}
}
