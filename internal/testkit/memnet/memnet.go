// Package memnet is an in-memory network between route.Services, for
// tests: the seam that raft's InmemTransport and etcd's fake network are
// in theirs. Each member's Peers delivers calls straight to the other
// member's peer.Handler, through faults a test injects: a link cut one
// way or both, requests or replies dropped with a probability, a delay,
// a paused member, a member gone. Seeded generators decide every
// probabilistic fault, one for each link and kind of traffic (calls,
// gossip), so that what one link draws does not depend on how the
// traffic over the others interleaves with it; Network.Seed names the
// seed for the failure message.
//
// A call behaves as one over gRPC would, as far as the request path can
// tell:
//   - to a member that is not on the network (never joined, or Removed):
//     refused at once, as a closed port is;
//   - over a cut link, or with its request dropped: no answer; the caller
//     waits for the call's deadline (Network's timeout) and gets
//     context.DeadlineExceeded, and the member never acts;
//   - with its reply dropped: the member acts, the caller still times out;
//   - to a paused member, or over a delayed link: the member acts when it
//     resumes or the delay has passed, whether or not the caller still
//     waits; if not, the caller has timed out meanwhile, as with a
//     SIGSTOPped process whose kernel accepted the request.
//
// Timers are the standard library's, so under testing/synctest a timeout
// or a delay passes in no real time, deterministically. A Network made in
// a synctest bubble must be Closed in it.
package memnet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Faults are what happens to the calls over one link, one way.
type Faults struct {
	// Cut: no call gets through.
	Cut bool
	// DropRequests and DropReplies are probabilities, in [0, 1], that a
	// call's request is lost (the member never acts) or its reply is (the
	// member acted, the caller never hears).
	DropRequests, DropReplies float64
	// Delay holds every call this long before the member acts on it;
	// Jitter adds a uniform [-Jitter, +Jitter] to each call's (never
	// below zero).
	Delay, Jitter time.Duration
}

// Network connects members. Its methods are safe for concurrent use.
type Network struct {
	seed    uint64
	timeout time.Duration

	mu      sync.Mutex
	rngs    map[stream]*rand.Rand // each link's, per kind of traffic (rng)
	members map[string]*Peers
	faults  map[link]Faults
	paused  map[string]chan struct{} // closed when the member resumes
	calls   map[link]int
	closed  bool

	late sync.WaitGroup // deliveries that may outlive their callers
}

type link struct{ from, to string }

// stream names one generator of a Network: a link's, for its calls or
// its gossip.
type stream struct {
	link
	gossip bool
}

// rng is the generator of the link from one member to another, for
// calls or gossip: its own stream of the network's seed, from a hash of
// its names. Requires n.mu held.
func (n *Network) rng(from, to string, gossip bool) *rand.Rand {
	k := stream{link{from, to}, gossip}
	r := n.rngs[k]
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(from))
		h.Write([]byte{0})
		h.Write([]byte(to))
		if gossip {
			h.Write([]byte{1})
		}
		r = rand.New(rand.NewPCG(n.seed, h.Sum64()))
		n.rngs[k] = r
	}
	return r
}

// New returns an empty network whose calls time out after timeout, with
// its probabilistic faults drawn from seed.
func New(seed uint64, timeout time.Duration) *Network {
	return &Network{seed: seed, timeout: timeout, rngs: map[stream]*rand.Rand{},
		members: map[string]*Peers{}, faults: map[link]Faults{}, paused: map[string]chan struct{}{}, calls: map[link]int{}}
}

// Seed is the seed of the network's faults, for a failure message.
func (n *Network) Seed() uint64 { return n.seed }

// Join puts member id on the network and returns its Peers, through which
// it calls the others. It answers calls once Serve gives it a handler.
func (n *Network) Join(id string) *Peers {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := &Peers{net: n, self: id}
	n.members[id] = p
	return p
}

// Remove takes member id off the network: calls to it are refused, as to
// a crashed process's port.
func (n *Network) Remove(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.members, id)
}

// SetFaults sets the faults of the calls from one member to another.
func (n *Network) SetFaults(from, to string, f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults[link{from, to}] = f
}

// Cut cuts the link from one member to another, one way: from's calls to
// to get no answer; to's calls to from still do.
func (n *Network) Cut(from, to string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.faults[link{from, to}]
	f.Cut = true
	n.faults[link{from, to}] = f
}

// Partition cuts every link between members of different groups, both
// ways.
func (n *Network) Partition(groups ...[]string) {
	for i, g := range groups {
		for j, h := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					n.Cut(a, b)
				}
			}
		}
	}
}

// Pause stops member id from acting on calls until Resume: they wait, and
// are acted on when it resumes.
func (n *Network) Pause(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.paused[id]; !ok {
		n.paused[id] = make(chan struct{})
	}
}

// Resume lets a paused member act on the calls that wait for it.
func (n *Network) Resume(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.paused[id]; ok {
		close(ch)
		delete(n.paused, id)
	}
}

// Heal clears every fault and resumes every paused member. Removed
// members stay removed.
func (n *Network) Heal() {
	n.mu.Lock()
	n.faults = map[link]Faults{}
	n.mu.Unlock()
	for _, id := range n.pausedIDs() {
		n.Resume(id)
	}
}

func (n *Network) pausedIDs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := make([]string, 0, len(n.paused))
	for id := range n.paused {
		ids = append(ids, id)
	}
	return ids
}

// Calls returns how many calls from one member to another were made,
// whatever became of them.
func (n *Network) Calls(from, to string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[link{from, to}]
}

// Close heals the network and waits for the deliveries still pending
// (to paused members, over delayed links). Calls made afterwards are
// refused.
func (n *Network) Close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.Heal()
	n.late.Wait()
}

// ErrRefused is the error, wrapped, of a call to a member that is not on
// the network.
var ErrRefused = errors.New("connection refused")

// errNoAnswer is the error, wrapped, of a call that got no answer.
var errNoAnswer = fmt.Errorf("no answer: %w", context.DeadlineExceeded)

// fate is what becomes of one call: refused (an error), lost (the member
// never acts), or delivered to h, at once or once the delay has passed
// and wait is closed (then on its own goroutine, counted in late), its
// reply lost or not.
type fate struct {
	h         peer.Handler
	refused   error
	lost      bool
	later     bool
	wait      <-chan struct{}
	delay     time.Duration
	replyLost bool
}

// delayOf draws, from r, a call's delay over a link with faults f.
// Requires n.mu held.
func (n *Network) delayOf(r *rand.Rand, f Faults) time.Duration {
	if f.Jitter <= 0 {
		return f.Delay
	}
	return max(f.Delay+time.Duration(r.Int64N(int64(2*f.Jitter)+1))-f.Jitter, 0)
}

// Gossip decides the fate of a gossip packet or connection from one
// member to another by the same faults as the calls
// (cluster.MemNetwork's Links): lost over a cut link, with the requests'
// drop probability, or to or from a paused member (it neither reads nor
// sends: a simulation pauses no goroutine, so its gossip is what stops);
// else delivered after the link's delay.
func (n *Network) Gossip(from, to string) (deliver bool, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.paused[from] != nil || n.paused[to] != nil {
		return false, 0
	}
	f := n.faults[link{from, to}]
	r := n.rng(from, to, true)
	if f.Cut || r.Float64() < f.DropRequests {
		return false, 0
	}
	return true, n.delayOf(r, f)
}

func (n *Network) fate(from, to string) fate {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls[link{from, to}]++
	m, ok := n.members[to]
	if n.closed || !ok || m.handler() == nil {
		return fate{refused: fmt.Errorf("memnet: %s is not on the network: %w", to, ErrRefused)}
	}
	f := n.faults[link{from, to}]
	r := n.rng(from, to, false)
	if f.Cut || r.Float64() < f.DropRequests {
		return fate{lost: true}
	}
	wait := n.paused[to]
	if wait == nil {
		wait = n.paused[from] // a paused member sends nothing either, until it resumes
	}
	out := fate{h: m.handler(), wait: wait, delay: n.delayOf(r, f), replyLost: r.Float64() < f.DropReplies}
	if out.later = out.wait != nil || out.delay > 0; out.later {
		n.late.Add(1) // under mu, so that Close, once it holds mu, waits for it
	}
	return out
}

// call makes one call from member from to member to: act runs on the
// member's handler, with ctx carrying the call's request id and deadline.
func call[T any](n *Network, ctx context.Context, from, to, id string, act func(context.Context, peer.Handler) T) (T, error) {
	var zero T
	ctx, cancel := context.WithTimeout(peer.WithRequestID(ctx, id), n.timeout)
	defer cancel()
	f := n.fate(from, to)
	switch {
	case f.refused != nil:
		return zero, &peer.CallError{ID: id, Err: f.refused}
	case f.lost:
		<-ctx.Done()
		return zero, &peer.CallError{ID: id, Err: fmt.Errorf("memnet: %s→%s: %w", from, to, errNoAnswer)}
	}
	res, delivered := deliver(n, ctx, f, act)
	if !delivered || f.replyLost {
		<-ctx.Done()
		return zero, &peer.CallError{ID: id, Err: fmt.Errorf("memnet: %s→%s: %w", from, to, errNoAnswer)}
	}
	return res, nil
}

// deliver runs act on f's handler, at once on this goroutine, or, for a
// paused member or a delayed link, on another that may outlive the call;
// it reports false if ctx ended first.
func deliver[T any](n *Network, ctx context.Context, f fate, act func(context.Context, peer.Handler) T) (T, bool) {
	if !f.later {
		return act(ctx, f.h), true
	}
	done := make(chan T, 1)
	go func() {
		defer n.late.Done()
		if f.delay > 0 {
			time.Sleep(f.delay)
		}
		if f.wait != nil {
			<-f.wait
		}
		done <- act(ctx, f.h)
	}()
	select {
	case res := <-done:
		return res, true
	case <-ctx.Done():
		var zero T
		return zero, false
	}
}

var _ peer.Peers = (*Peers)(nil)

// Peers is one member's peer.Peers on a Network.
type Peers struct {
	net  *Network
	self string

	mu sync.Mutex
	h  peer.Handler
}

// Serve makes h answer the calls other members make to this one.
func (p *Peers) Serve(h peer.Handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.h = h
}

func (p *Peers) handler() peer.Handler {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.h
}

// Forward implements peer.Peers: one call per check.
func (p *Peers) Forward(ctx context.Context, to peer.Route, req limiter.Request) (peer.Result, string, error) {
	results, id, err := p.ForwardBatch(ctx, to, []limiter.Request{req})
	if err != nil {
		return peer.Result{}, id, err
	}
	return results[0], id, nil
}

// ForwardBatch implements peer.Peers.
func (p *Peers) ForwardBatch(ctx context.Context, to peer.Route, reqs []limiter.Request) ([]peer.Result, string, error) {
	id := peer.RequestIDForCall(ctx)
	res, err := call(p.net, ctx, p.self, to.ID, id, func(ctx context.Context, h peer.Handler) []peer.Result {
		return h.HandleForward(ctx, p.self, reqs)
	})
	return res, id, err
}

// Reset implements peer.Peers. A reset the member refuses is its
// answer, not the transport's error: it comes back as the member's error,
// field and all.
func (p *Peers) Reset(ctx context.Context, to peer.Route, r peer.ResetRequest) (int, error) {
	type answer struct {
		cleared int
		err     error
	}
	id := peer.RequestIDForCall(ctx)
	a, err := call(p.net, ctx, p.self, to.ID, id, func(ctx context.Context, h peer.Handler) answer {
		n, err := h.HandleReset(ctx, p.self, r)
		return answer{n, err}
	})
	if err == nil && a.err != nil {
		err = &peer.CallError{ID: id, Err: fmt.Errorf("reset on %s: %w", to.ID, a.err)}
	}
	return a.cleared, err
}

// Handoff implements peer.Peers.
// The states are copied, as the wire would: the receiver rebases them in
// place, and the sender forgets the ones it sent.
func (p *Peers) Handoff(ctx context.Context, to peer.Route, ho peer.Handoff) (int, []string, error) {
	type answer struct {
		merged   int
		rejected []string
		err      error
	}
	ho.States = copyStates(ho.States)
	id := peer.RequestIDForCall(ctx)
	a, err := call(p.net, ctx, p.self, to.ID, id, func(ctx context.Context, h peer.Handler) answer {
		m, r, err := h.HandleHandoff(ctx, p.self, ho)
		return answer{m, r, err}
	})
	if err == nil && a.err != nil {
		err = &peer.CallError{ID: id, Err: fmt.Errorf("hand off to %s: %w", to.ID, a.err)}
	}
	return a.merged, a.rejected, err
}

// HandoffDone implements peer.Peers.
func (p *Peers) HandoffDone(ctx context.Context, to peer.Route, partitions []int) error {
	_, err := call(p.net, ctx, p.self, to.ID, peer.RequestIDForCall(ctx), func(ctx context.Context, h peer.Handler) struct{} {
		h.HandleHandoffDone(ctx, p.self, partitions)
		return struct{}{}
	})
	return err
}

// Replicate implements peer.Peers. The states are copied, as Handoff's.
func (p *Peers) Replicate(ctx context.Context, to peer.Route, r peer.Replication) (peer.Replicated, error) {
	type answer struct {
		kept peer.Replicated
		err  error
	}
	r.States, r.Whole = copyStates(r.States), slices.Clone(r.Whole)
	id := peer.RequestIDForCall(ctx)
	a, err := call(p.net, ctx, p.self, to.ID, id, func(ctx context.Context, h peer.Handler) answer {
		n, err := h.HandleReplicate(ctx, p.self, r)
		return answer{n, err}
	})
	if err == nil && a.err != nil {
		err = &peer.CallError{ID: id, Err: fmt.Errorf("replicate on %s: %w", to.ID, a.err)}
	}
	return a.kept, err
}

// copyStates returns a copy of states no one else holds, logs and all.
func copyStates(states []limiter.KeyState) []limiter.KeyState {
	if states == nil {
		return nil
	}
	out := slices.Clone(states)
	for i := range out {
		out[i].Log = slices.Clone(out[i].Log)
	}
	return out
}

// Relay implements peer.Peers.
func (p *Peers) Relay(ctx context.Context, via peer.Route, reqs []limiter.Request) ([]peer.Result, error) {
	return call(p.net, ctx, p.self, via.ID, peer.RequestIDForCall(ctx), func(ctx context.Context, h peer.Handler) []peer.Result {
		return h.HandleRelay(ctx, p.self, reqs)
	})
}

// Report implements peer.Peers.
func (p *Peers) Report(ctx context.Context, to peer.Route, r peer.ReportRequest) (peer.Report, error) {
	return call(p.net, ctx, p.self, to.ID, peer.RequestIDForCall(ctx), func(ctx context.Context, h peer.Handler) peer.Report {
		return h.HandleReport(ctx, p.self, r)
	})
}

// Inspect implements peer.Peers. A refusal is the member's answer, as
// for Reset.
func (p *Peers) Inspect(ctx context.Context, to peer.Route, q peer.InspectQuery) (peer.OwnerView, error) {
	type answer struct {
		views peer.OwnerView
		err   error
	}
	id := peer.RequestIDForCall(ctx)
	a, err := call(p.net, ctx, p.self, to.ID, id, func(ctx context.Context, h peer.Handler) answer {
		v, err := h.HandleInspect(ctx, p.self, q)
		return answer{v, err}
	})
	if err == nil && a.err != nil {
		err = &peer.CallError{ID: id, Err: fmt.Errorf("inspect on %s: %w", to.ID, a.err)}
	}
	return a.views, err
}

// Lease implements peer.Peers.
func (p *Peers) Lease(ctx context.Context, to peer.Route, req limiter.Request, want peer.LeaseWant) (peer.Result, peer.LeaseGrant, error) {
	type answer struct {
		res   peer.Result
		grant peer.LeaseGrant
	}
	a, err := call(p.net, ctx, p.self, to.ID, peer.RequestIDForCall(ctx), func(ctx context.Context, h peer.Handler) answer {
		r, g := h.HandleLease(ctx, p.self, req, want)
		return answer{r, g}
	})
	return a.res, a.grant, err
}

// Settle implements peer.Peers.
func (p *Peers) Settle(ctx context.Context, to peer.Route, uses []peer.LeaseUse) (int, error) {
	return call(p.net, ctx, p.self, to.ID, peer.RequestIDForCall(ctx), func(ctx context.Context, h peer.Handler) int {
		return h.HandleSettle(ctx, p.self, uses)
	})
}
