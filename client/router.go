package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/batch"
	"github.com/peerlimit/peerlimit/internal/wire"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// router is where a Client's calls go: it keeps a view of the cluster's
// members and ring, a connection to each member, and the refresher
// goroutine that keeps both current; do runs one call on a key's owner
// and fails over to the other nodes. A Client's operations build the
// requests and read the answers; the router knows nothing of them.
//
// Concurrency: send, do, routing, kickRefresh and close are safe for
// concurrent use from any goroutine. refreshView and apply run on one
// goroutine at a time: newRouter's, then only the refresher's, so views
// are stored in the order they were read. The hot path (send or do
// reaching a healthy node) takes no lock: view and snap are read-only
// copies swapped atomically when the membership changes. mu guards nodes
// and seeds and is held only to open or drop connections, never across a
// call. The refresher is started by newRouter and owned by the router:
// close stops it and waits for it before closing the connections, so
// nothing of the router runs after close returns. A call in flight when
// close runs fails with ErrClosed or its context's error.
type router struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	nodes map[string]*node // by gRPC address; copied into snap on change
	seeds map[string]bool  // the configured endpoints, never dropped
	// snap is a read-only copy of nodes, so that the hot path finds a
	// node without taking mu.
	snap atomic.Pointer[map[string]*node]

	view atomic.Pointer[view]

	refresh chan struct{} // capacity 1: asks the refresher for a refresh now
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
}

// view is the cluster's ring as one node described it.
type view struct {
	owners []member // partition → owner
}

type member struct{ id, addr string }

func (v *view) owner(key string) member {
	return v.owners[Partition(key, len(v.owners))]
}

// node is a connection to one cluster node.
type node struct {
	addr      string
	conn      *grpc.ClientConn
	api       pb.RateLimiterClient
	coalescer *coalescer // nil without coalescing

	failures  atomic.Int32
	downUntil atomic.Int64 // unix ns
}

func (n *node) up() {
	if n.failures.Load() != 0 {
		n.failures.Store(0)
		n.downUntil.Store(0)
	}
}

func (n *node) down(base, maxBackoff time.Duration) {
	f := min(n.failures.Add(1), 16)
	d := min(base<<(f-1), maxBackoff)
	n.downUntil.Store(time.Now().Add(d).UnixNano())
}

func (n *node) close() {
	if n.coalescer != nil {
		n.coalescer.close()
	}
	_ = n.conn.Close()
}

// newRouter connects to cfg's endpoints (cfg has its defaults), reads the
// members and the ring from the first that answers within ctx, and starts
// the refresher. No endpoint answering is not an error: the refresher
// keeps trying, and calls go to the endpoints meanwhile.
func newRouter(ctx context.Context, cfg Config) (*router, error) {
	r := &router{cfg: cfg, log: cfg.Logger.With("component", "peerlimit-client"),
		nodes: map[string]*node{}, seeds: map[string]bool{},
		refresh: make(chan struct{}, 1), stop: make(chan struct{})}
	r.snap.Store(&map[string]*node{})
	for _, ep := range cfg.Endpoints {
		if _, err := r.node(ep); err != nil {
			r.close()
			return nil, err
		}
		r.seeds[ep] = true
	}
	if err := r.refreshView(ctx); err != nil {
		r.log.Warn("no endpoint answered yet; will keep trying", "endpoints", cfg.Endpoints, "err", err)
	}
	r.wg.Add(1)
	go r.refresher()
	return r, nil
}

// close stops the refresher and closes every connection; only the first
// call does anything.
func (r *router) close() error {
	if r.closed.Swap(true) {
		return nil
	}
	close(r.stop)
	r.wg.Wait()
	r.mu.Lock()
	nodes := r.nodes
	r.nodes = map[string]*node{}
	r.publish()
	r.mu.Unlock()
	for _, nd := range nodes {
		nd.close()
	}
	return nil
}

// node returns the connection to addr, opening it if needed.
func (r *router) node(addr string) (*node, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.nodes[addr]; ok {
		return n, nil
	}
	opts := append(Credentials(r.cfg.TLS, r.cfg.Token, r.cfg.TokenWithoutTLS), wire.Dial()...)
	conn, err := grpc.NewClient(addr, append(opts, r.cfg.DialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("peerlimit client: connect to %s: %w", addr, err)
	}
	n := &node{addr: addr, conn: conn, api: pb.NewRateLimiterClient(conn)}
	if !r.cfg.DisableCoalescing {
		if n.coalescer, err = newCoalescer(r.cfg, n.api); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	r.nodes[addr] = n
	r.publish()
	return n, nil
}

// publish copies nodes into snap. Requires r.mu held.
func (r *router) publish() {
	m := make(map[string]*node, len(r.nodes))
	for a, n := range r.nodes {
		m[a] = n
	}
	r.snap.Store(&m)
}

// routing returns the view checks are routed by: nil when they go to any
// node (owner routing off, or no ring known yet).
func (r *router) routing() *view {
	if r.cfg.DisableOwnerRouting {
		return nil
	}
	return r.view.Load()
}

// send sends one request of any op to key's owner, coalesced with others
// bound there unless coalescing is off: the message goes whole, so its
// op, reservation and TTL travel with it.
func (r *router) send(ctx context.Context, key string, req *pb.CheckRequest) (*pb.CheckResult, error) {
	return r.do(ctx, key, !r.cfg.DisableCoalescing, func(ctx context.Context, nd *node) (*pb.CheckResult, error) {
		if nd.coalescer != nil {
			return nd.coalescer.batcher.Do(ctx, req)
		}
		resp, err := nd.api.Check(ctx, req)
		if err != nil {
			return nil, err
		}
		return &pb.CheckResult{Result: &pb.CheckResult_Response{Response: resp}}, nil
	})
}

// do runs call on the preferred node for key, then on the others until one
// answers, the error is not the node's fault, or ctx ends. coalesced calls
// go through a node's batcher, whose batch call has its own deadline.
func (r *router) do(ctx context.Context, key string, coalesced bool, call func(context.Context, *node) (*pb.CheckResult, error)) (*pb.CheckResult, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	// The common case, a healthy preferred node, takes no lock and builds
	// no list; the ordered list of the others is made only after a failure.
	want, first := r.preferred(key)
	var lastErr error
	if first != nil {
		res, err, next := r.attempt(ctx, first, want, coalesced, call)
		if !next {
			return res, err
		}
		lastErr = err
	}
	for _, nd := range r.others(first) {
		if ctx.Err() != nil {
			break
		}
		res, err, next := r.attempt(ctx, nd, want, coalesced, call)
		if !next {
			return res, err
		}
		lastErr = err
	}
	if err := ctx.Err(); err != nil {
		if lastErr != nil {
			return nil, fmt.Errorf("peerlimit client: %w (last node error: %v)", err, lastErr)
		}
		return nil, err
	}
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if lastErr == nil {
		lastErr = errors.New("no node known")
	}
	return nil, fmt.Errorf("peerlimit client: no node answered: %w", lastErr)
}

// attempt tries one node. next says whether to try another: the node
// failed in a way another might not.
func (r *router) attempt(ctx context.Context, nd *node, want member, coalesced bool, call func(context.Context, *node) (*pb.CheckResult, error)) (res *pb.CheckResult, err error, next bool) {
	actx := ctx
	if dl, ok := ctx.Deadline(); !coalesced && (!ok || time.Until(dl) > r.cfg.AttemptTimeout) {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, r.cfg.AttemptTimeout)
		defer cancel()
	}
	res, err = call(actx, nd)
	if err == nil {
		nd.up()
		if want.id != "" && res != nil && res.GetResponse() != nil && res.GetResponse().GetOwner() != want.id {
			r.kickRefresh() // our ring is stale
		}
		return res, nil, false
	}
	if !retryable(ctx, err) {
		return nil, err, false
	}
	nd.down(r.cfg.RetryBackoff, r.cfg.MaxRetryBackoff)
	r.log.Debug("node failed; trying another", "node", nd.addr, "err", err)
	r.kickRefresh()
	return nil, err, true
}

// retryable reports whether another node might answer where this one
// failed: transport failures and timeouts of the attempt, not of the
// caller's context, nor the node's verdict on the request.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, batch.ErrClosed) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.Unknown:
		return true
	}
	return false
}

// preferred returns the member that owns key (with owner routing and a
// known ring) and the node to try first: the owner if it is healthy, else
// any healthy node (map iteration order is random), else nil.
func (r *router) preferred(key string) (member, *node) {
	var want member
	if v := r.routing(); v != nil {
		want = v.owner(key)
	}
	nodes := *r.snap.Load()
	now := time.Now().UnixNano()
	if nd, ok := nodes[want.addr]; ok && nd.downUntil.Load() <= now {
		return want, nd
	}
	for _, nd := range nodes {
		if nd.downUntil.Load() <= now {
			return want, nd
		}
	}
	return want, nil
}

// others orders the nodes other than skip: healthy ones in random order,
// then the recently failed, as a last resort.
func (r *router) others(skip *node) []*node {
	now := time.Now().UnixNano()
	var healthy, failed []*node
	for _, nd := range *r.snap.Load() {
		switch {
		case nd == skip:
		case nd.downUntil.Load() > now:
			failed = append(failed, nd)
		default:
			healthy = append(healthy, nd)
		}
	}
	rand.Shuffle(len(healthy), func(i, j int) { healthy[i], healthy[j] = healthy[j], healthy[i] })
	return append(healthy, failed...)
}

// kickRefresh asks the refresher for a refresh now, without waiting: a
// request already pending covers this one.
func (r *router) kickRefresh() {
	select {
	case r.refresh <- struct{}{}:
	default:
	}
}

// refresher re-reads the members and the ring periodically and on demand,
// until close.
func (r *router) refresher() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		case <-r.refresh:
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.AttemptTimeout)
		if err := r.refreshView(ctx); err != nil {
			r.log.Debug("refreshing members", "err", err)
		}
		cancel()
	}
}

// refreshView asks nodes, healthy ones first, for the members and ring,
// connects to new members and drops those gone (but never the endpoints).
func (r *router) refreshView(ctx context.Context) error {
	_, first := r.preferred("")
	nodes := r.others(first)
	if first != nil {
		nodes = append([]*node{first}, nodes...)
	}
	var lastErr error = errors.New("no node known")
	for _, nd := range nodes {
		resp, err := nd.api.Members(ctx, &pb.MembersRequest{})
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		r.apply(resp)
		return nil
	}
	return lastErr
}

// apply makes resp the view: it connects to the alive members, closes
// the connections to the others (but never the endpoints'), and swaps in
// the ring unless resp has none or a malformed one.
func (r *router) apply(resp *pb.MembersResponse) {
	members := resp.GetMembers()
	alive := map[string]bool{}
	for _, m := range members {
		if m.GetState() == "alive" && m.GetGrpcAddr() != "" {
			alive[m.GetGrpcAddr()] = true
			if _, err := r.node(m.GetGrpcAddr()); err != nil {
				r.log.Warn("connecting to member", "member", m.GetId(), "err", err)
			}
		}
	}
	r.mu.Lock()
	var gone []*node
	for addr, nd := range r.nodes {
		if !alive[addr] && !r.seeds[addr] {
			gone = append(gone, nd)
			delete(r.nodes, addr)
		}
	}
	if len(gone) > 0 {
		r.publish()
	}
	r.mu.Unlock()
	for _, nd := range gone {
		nd.close()
	}
	owners := resp.GetPartitionOwners()
	if resp.GetPartitionCount() == 0 || len(owners) != int(resp.GetPartitionCount()) {
		return // a node without a ring: route to anyone
	}
	v := &view{owners: make([]member, len(owners))}
	for p, i := range owners {
		if int(i) >= len(members) {
			return // malformed; keep the old view
		}
		v.owners[p] = member{id: members[i].GetId(), addr: members[i].GetGrpcAddr()}
	}
	r.view.Store(v)
}
