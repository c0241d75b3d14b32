package jepsenlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Outcome is how an operation ended, as the client saw it.
type Outcome string

const (
	Allowed Outcome = "allowed"
	Denied  Outcome = "denied"
	// Failed: the node answered with an error, or could not be reached.
	// The check was most likely not decided.
	Failed Outcome = "error"
	// Timeout: no answer within the client's deadline. The check may or
	// may not have been decided: an indeterminate operation, counted as
	// neither allowed nor denied.
	Timeout Outcome = "timeout"
)

// Op is one recorded operation. Times are offsets from the run's start on
// the harness's monotonic clock; Start maps them to wall time, the clock
// the nodes decide by.
type Op struct {
	Worker   int           `json:"worker"`
	Key      int           `json:"key"`
	Node     string        `json:"node"`
	Invoke   time.Duration `json:"invoke_ns"`
	Complete time.Duration `json:"complete_ns"`
	Outcome  Outcome       `json:"outcome"`
	Owner    string        `json:"owner,omitempty"` // the node that decided
	Degraded bool          `json:"degraded,omitempty"`
	Err      string        `json:"err,omitempty"`
	// Via is how the node that received it answered (peer.Via), where
	// the harness can tell: the simulation's.
	Via string `json:"via,omitempty"`
	// Kind is what the operation did: a check (""), or a concurrency
	// key's acquire or release.
	Kind OpKind `json:"op,omitempty"`
	// Slot ties a release to the acquire whose slot it frees: the same
	// number, unique in the run; 0 for a check.
	Slot int `json:"slot,omitempty"`
}

// OpKind is what an operation did.
type OpKind string

const (
	// CheckOp checks one hit of a key (CHECK): the zero value.
	CheckOp OpKind = ""
	// AcquireOp takes one slot of a concurrency key (ACQUIRE); allowed, it
	// holds the slot until its release, or its key's window after.
	AcquireOp OpKind = "acquire"
	// ReleaseOp frees an acquired slot (RELEASE of its token); one slot
	// may have several, a failed attempt retried through another node.
	ReleaseOp OpKind = "release"
)

// Latency is the time the client waited.
func (o Op) Latency() time.Duration { return o.Complete - o.Invoke }

// Answered reports whether the node gave a decision.
func (o Op) Answered() bool { return o.Outcome == Allowed || o.Outcome == Denied }

// Admitted reports whether the node admitted a hit: a check or an
// acquire allowed (a release admits nothing).
func (o Op) Admitted() bool { return o.Outcome == Allowed && o.Kind != ReleaseOp }

// KeySpec is one rate-limited key of the workload: Limit per sliding
// Window, or, with Calendar set, Limit per calendar period in TimeZone
// (a counter; Window 0). A GCRA key is a bucket of Burst (0: Limit)
// refilled at Limit per Window; a CONCURRENCY key holds at most Limit
// slots, each freed by its release or Window after it was taken.
type KeySpec struct {
	Name      string          `json:"name"`
	Algorithm pb.Algorithm    `json:"algorithm"`
	Limit     int64           `json:"limit"`
	Window    time.Duration   `json:"window"`
	Calendar  pb.CalendarUnit `json:"calendar,omitempty"`
	TimeZone  string          `json:"time_zone,omitempty"`
	Burst     int64           `json:"burst,omitempty"`
	// Weight is the key's share of the workload's operations against the
	// others' (0 counts as 1): a hot key has more.
	Weight int `json:"weight,omitempty"`
}

// IsCalendar reports whether the key counts per calendar period.
func (k KeySpec) IsCalendar() bool { return k.Calendar != pb.CalendarUnit_CALENDAR_NONE }

// IsConcurrency reports whether the key limits slots in flight.
func (k KeySpec) IsConcurrency() bool { return k.Algorithm == pb.Algorithm_CONCURRENCY }

// BurstOrLimit is a GCRA key's bucket size: Burst, or Limit without one.
func (k KeySpec) BurstOrLimit() int64 {
	if k.Burst == 0 {
		return k.Limit
	}
	return k.Burst
}

func (k KeySpec) weight() int { return max(k.Weight, 1) }

// request is a check of one hit of the key (for a concurrency key, the
// acquire of one slot).
func (k KeySpec) request() *pb.CheckRequest {
	req := &pb.CheckRequest{Key: k.Name, Limit: k.Limit, WindowMs: k.Window.Milliseconds(), Algorithm: k.Algorithm,
		Calendar: k.Calendar, TimeZone: k.TimeZone}
	if k.Burst != 0 {
		req.Burst = &k.Burst
	}
	if k.IsConcurrency() {
		req.Op = pb.Op_ACQUIRE
	}
	return req
}

// release frees the slot of a concurrency key that token holds.
func (k KeySpec) release(token string) *pb.CheckRequest {
	return &pb.CheckRequest{Key: k.Name, Limit: k.Limit, WindowMs: k.Window.Milliseconds(), Algorithm: k.Algorithm,
		Op: pb.Op_RELEASE, Reservation: token}
}

// TotalWeight is the keys' weights summed: the workload's operations per
// round of one per key of weight 1.
func TotalWeight(keys []KeySpec) int {
	n := 0
	for _, k := range keys {
		n += k.weight()
	}
	return n
}

// Workload is the clients' side: Workers closed-loop clients, each pacing
// itself to Rate/Workers operations per second, each operation a check of
// a random key (by the keys' weights) at a random target node.
//
// A concurrency key's operation is an acquire. An admitted one holds its
// slot for a random time between HoldMin and HoldMax, then releases it
// through a random node (on a goroutine of its own: the worker goes on),
// retrying a failed release through another node; one in AbandonEvery
// is never released, so that its slot frees itself at the key's window.
// A slot still held when the run ends is abandoned too.
type Workload struct {
	Keys    []KeySpec
	Workers int
	Rate    float64       // operations per second, all workers together
	Timeout time.Duration // the client's deadline per operation
}

// Clients holds one gRPC connection per node. Connections reconnect
// quickly (a restarted node is reachable again within half a second) and
// calls fail fast while a node is down instead of waiting for it.
type Clients struct {
	mu      sync.RWMutex
	conns   map[string]*grpc.ClientConn
	clients map[string]pb.RateLimiterClient
	targets []string // nodes the workload sends to
}

// NewClients returns an empty set.
func NewClients() *Clients {
	return &Clients{conns: map[string]*grpc.ClientConn{}, clients: map[string]pb.RateLimiterClient{}}
}

// Add connects to a node and makes it a target of the workload.
func (c *Clients) Add(id, addr string) error {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 500 * time.Millisecond,
		}))
	if err != nil {
		return fmt.Errorf("client for %s: %w", id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.conns[id]; old != nil {
		old.Close()
	}
	c.conns[id], c.clients[id] = conn, pb.NewRateLimiterClient(conn)
	c.targets = appendUnique(c.targets, id)
	return nil
}

// Retire stops sending the workload to a node (an operator drains a node
// before removing it); its connection stays for the membership monitor.
func (c *Clients) Retire(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.targets[:0:0]
	for _, t := range c.targets {
		if t != id {
			out = append(out, t)
		}
	}
	c.targets = out
}

func (c *Clients) client(id string) pb.RateLimiterClient {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.clients[id]
}

func (c *Clients) pick(r *rand.Rand) (string, pb.RateLimiterClient) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.targets) == 0 {
		return "", nil
	}
	id := c.targets[r.IntN(len(c.targets))]
	return id, c.clients[id]
}

// Close closes every connection.
func (c *Clients) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	clear(c.conns)
	clear(c.clients)
	c.targets = nil
}

// run is one Run's shared state: the history, the slots' numbers, and the
// goroutines that hold and release slots.
type run struct {
	w       Workload
	clients *Clients
	start   time.Time

	mu    sync.Mutex
	ops   []Op
	slots atomic.Int64
	holds sync.WaitGroup
}

func (rn *run) record(op Op) {
	rn.mu.Lock()
	rn.ops = append(rn.ops, op)
	rn.mu.Unlock()
}

// Run drives the workload until ctx ends and returns the history, in no
// particular order. Every operation that was invoked is recorded,
// including those cut short by ctx.
func (w Workload) Run(ctx context.Context, clients *Clients, start time.Time, seed uint64) []Op {
	rn := &run{w: w, clients: clients, start: start}
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) * float64(w.Workers) / w.Rate)
	for i := range w.Workers {
		wg.Go(func() { rn.worker(ctx, i, interval, rand.New(rand.NewPCG(seed, uint64(i)))) })
	}
	wg.Wait()
	rn.holds.Wait()
	return rn.ops
}

// pickKey picks a key, each with a chance in proportion to its weight.
func (w Workload) pickKey(r *rand.Rand) int {
	n := r.IntN(TotalWeight(w.Keys))
	for k, ks := range w.Keys {
		if n -= ks.weight(); n < 0 {
			return k
		}
	}
	return len(w.Keys) - 1
}

func (rn *run) worker(ctx context.Context, id int, interval time.Duration, r *rand.Rand) {
	// Stagger the workers over one interval, so the load is smooth.
	next := time.Now().Add(time.Duration(r.Int64N(int64(interval))))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		k := rn.w.pickKey(r)
		node, cl := rn.clients.pick(r)
		if cl != nil {
			rn.operate(ctx, cl, id, k, node, r)
		}
		// Closed loop: a slow answer delays this worker's next request
		// instead of piling requests up behind it.
		next = next.Add(interval)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		t.Reset(time.Until(next))
	}
}

// operate checks key k (acquires a slot of a concurrency key) and
// records it; an acquired slot is held and released on a goroutine of
// its own.
func (rn *run) operate(ctx context.Context, cl pb.RateLimiterClient, worker, k int, node string, r *rand.Rand) {
	ks := rn.w.Keys[k]
	op := Op{Worker: worker, Key: k, Node: node}
	if ks.IsConcurrency() {
		op.Kind, op.Slot = AcquireOp, int(rn.slots.Add(1))
	}
	resp := rn.call(ctx, cl, ks.request(), &op)
	rn.record(op)
	if op.Kind != AcquireOp || op.Outcome != Allowed || resp.GetReservation() == "" {
		return
	}
	hold, held := DrawHold(r)
	if !held {
		return // never released: the slot frees itself at the key's window
	}
	rr := rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))
	rn.holds.Go(func() { rn.releaseAfter(ctx, hold, op, ks.release(resp.GetReservation()), rr) })
}

// releaseAfter holds acq's slot for hold, then releases it through random
// nodes (HoldThenRelease), each attempt recorded.
func (rn *run) releaseAfter(ctx context.Context, hold time.Duration, acq Op, req *pb.CheckRequest, r *rand.Rand) {
	HoldThenRelease(ctx, hold, func() (string, func() bool) {
		node, cl := rn.clients.pick(r)
		if cl == nil {
			return node, nil
		}
		return node, func() bool {
			op := Op{Worker: acq.Worker, Key: acq.Key, Node: node, Kind: ReleaseOp, Slot: acq.Slot}
			rn.call(ctx, cl, req, &op)
			rn.record(op)
			return op.Answered()
		}
	})
}

// call sends req and fills in op's times and outcome.
func (rn *run) call(ctx context.Context, cl pb.RateLimiterClient, req *pb.CheckRequest, op *Op) *pb.CheckResponse {
	op.Invoke = time.Since(rn.start)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rn.w.Timeout)
	resp, err := cl.Check(cctx, req)
	cancel()
	op.Complete = time.Since(rn.start)
	switch {
	case err == nil:
		op.Outcome, op.Owner, op.Degraded = Denied, resp.GetOwner(), resp.GetDegraded()
		if resp.GetAllowed() {
			op.Outcome = Allowed
		}
	case status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		op.Outcome, op.Err = Timeout, err.Error()
	default:
		op.Outcome, op.Err = Failed, err.Error()
	}
	return resp
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
