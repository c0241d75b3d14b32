package jepsenlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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
}

// Latency is the time the client waited.
func (o Op) Latency() time.Duration { return o.Complete - o.Invoke }

// Answered reports whether the node gave a decision.
func (o Op) Answered() bool { return o.Outcome == Allowed || o.Outcome == Denied }

// KeySpec is one rate-limited key of the workload: Limit per sliding
// Window, or, with Calendar set, Limit per calendar period in TimeZone
// (a counter; Window 0).
type KeySpec struct {
	Name      string          `json:"name"`
	Algorithm pb.Algorithm    `json:"algorithm"`
	Limit     int64           `json:"limit"`
	Window    time.Duration   `json:"window"`
	Calendar  pb.CalendarUnit `json:"calendar,omitempty"`
	TimeZone  string          `json:"time_zone,omitempty"`
}

// IsCalendar reports whether the key counts per calendar period.
func (k KeySpec) IsCalendar() bool { return k.Calendar != pb.CalendarUnit_CALENDAR_NONE }

// request is a check of one hit of the key.
func (k KeySpec) request() *pb.CheckRequest {
	return &pb.CheckRequest{Key: k.Name, Limit: k.Limit, WindowMs: k.Window.Milliseconds(), Algorithm: k.Algorithm,
		Calendar: k.Calendar, TimeZone: k.TimeZone}
}

// Workload is the clients' side: Workers closed-loop clients, each pacing
// itself to Rate/Workers operations per second, each operation a check of
// a random key at a random target node.
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

// Run drives the workload until ctx ends and returns the history, in no
// particular order. Every operation that was invoked is recorded,
// including those cut short by ctx.
func (w Workload) Run(ctx context.Context, clients *Clients, start time.Time, seed uint64) []Op {
	var (
		mu  sync.Mutex
		all []Op
		wg  sync.WaitGroup
	)
	interval := time.Duration(float64(time.Second) * float64(w.Workers) / w.Rate)
	for i := range w.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ops := w.worker(ctx, clients, start, i, interval, rand.New(rand.NewPCG(seed, uint64(i))))
			mu.Lock()
			all = append(all, ops...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all
}

func (w Workload) worker(ctx context.Context, clients *Clients, start time.Time, id int, interval time.Duration, r *rand.Rand) []Op {
	var ops []Op
	// Stagger the workers over one interval, so the load is smooth.
	next := time.Now().Add(time.Duration(r.Int64N(int64(interval))))
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ops
		case <-t.C:
		}
		k := r.IntN(len(w.Keys))
		node, cl := clients.pick(r)
		if cl != nil {
			ops = append(ops, w.do(ctx, cl, start, id, k, node))
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

func (w Workload) do(ctx context.Context, cl pb.RateLimiterClient, start time.Time, worker, k int, node string) Op {
	ks := w.Keys[k]
	op := Op{Worker: worker, Key: k, Node: node, Invoke: time.Since(start)}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.Timeout)
	resp, err := cl.Check(cctx, ks.request())
	cancel()
	op.Complete = time.Since(start)
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
	return op
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
