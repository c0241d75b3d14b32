// Package client is the Go client of a peerlimit cluster.
//
// A Client talks gRPC to the cluster's nodes. Any node answers for any key,
// so a Client needs only one reachable endpoint; it learns the rest from the
// cluster and keeps a connection to each member. By default it also learns
// the ring and sends each check straight to the key's owner, saving the
// forwarding hop, and it coalesces concurrent checks bound for the same node
// into one CheckBatch call. When a node fails or times out, a call moves on
// to another node, within the caller's context; failed nodes are avoided
// for a backoff that grows with repeated failures.
//
//	c, err := client.New(ctx, client.Config{Endpoints: []string{"10.0.0.1:9090"}})
//	...
//	d, err := c.Check(ctx, "user:42", client.Limit{Limit: 100, Window: time.Minute})
//	if err == nil && !d.Allowed { /* 429, retry after d.RetryAfter */ }
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/partition"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Algorithm selects how a limit counts. Its values
// are the API's (peerlimit.v1.Algorithm): the client needs none of the
// server's packages.
type Algorithm uint8

const (
	// SlidingWindowCounter (the default) estimates the rolling window from
	// two fixed windows, in constant memory per key.
	SlidingWindowCounter Algorithm = iota
	// SlidingWindowLog counts the rolling window exactly; limits are capped
	// (10,000 by default) because its memory grows with the limit.
	SlidingWindowLog
	// GCRA is a token bucket of Limit.Burst hits (Limit.Limit when Burst
	// is 0) refilled at Limit per Window: exact, in constant memory per
	// key. A check is the same as for the windows.
	GCRA
	// Concurrency allows at most Limit requests in flight: Acquire takes a
	// slot, Release frees it, and a slot never released frees itself
	// Window after it was taken. CheckN of 0 peeks at the slots in use;
	// a check of hits, Reserve, Settle, Refund and Charge are refused
	// (codes.InvalidArgument naming op).
	Concurrency
)

// String returns the algorithm's name as the API spells it.
func (a Algorithm) String() string {
	if name, ok := pb.Algorithm_name[int32(a)]; ok {
		return name
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm reads an algorithm's API name (SLIDING_WINDOW_COUNTER,
// SLIDING_WINDOW_LOG, GCRA, CONCURRENCY); the empty string is the
// default, the counter.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return SlidingWindowCounter, nil
	}
	if v, ok := pb.Algorithm_value[s]; ok {
		return Algorithm(v), nil
	}
	return 0, fmt.Errorf("invalid algorithm: unknown value %q; want SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG, GCRA or CONCURRENCY", s)
}

// CalendarUnit makes a Limit calendar-aligned: Limit hits per calendar
// period (a minute, an hour, a day, an ISO week from Monday, a month, a
// year) in its TimeZone, the count starting again from zero at each
// boundary: a quota, not a rate. Its values are the API's
// (peerlimit.v1.CalendarUnit).
type CalendarUnit uint8

const (
	// NoCalendar (the default) is a sliding window of Limit.Window.
	NoCalendar CalendarUnit = iota
	Minute
	Hour
	Day
	Week
	Month
	Year
)

// String returns the unit's name as the API spells it ("MONTH").
func (u CalendarUnit) String() string {
	if name, ok := pb.CalendarUnit_name[int32(u)]; ok {
		return name
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// ParseCalendarUnit reads a unit's name in any case ("month", "MONTH");
// the empty string is NoCalendar.
func ParseCalendarUnit(s string) (CalendarUnit, error) {
	if s == "" {
		return NoCalendar, nil
	}
	for v, name := range pb.CalendarUnit_name {
		if v != 0 && strings.EqualFold(s, name) {
			return CalendarUnit(v), nil
		}
	}
	return 0, fmt.Errorf("invalid calendar: unknown unit %q; want MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", s)
}

// Limit is "Limit hits per Window", or per calendar period.
type Limit struct {
	Limit     int64
	Window    time.Duration // whole milliseconds; 0 with a Calendar
	Algorithm Algorithm
	// Calendar, when set, makes the limit calendar-aligned: Limit hits
	// per period of the unit in TimeZone, counted by the counter (leave
	// Window and Algorithm zero). The same key under another unit or zone,
	// or under a window, is another limit.
	Calendar CalendarUnit
	// TimeZone is Calendar's IANA time zone, e.g. "Europe/Paris"; "" is
	// UTC.
	TimeZone string
	// Burst is a GCRA limit's bucket size: the most hits admitted at once
	// after a quiet spell, while Limit per Window is the rate it refills
	// at. 0 means Limit; a negative Burst, or one on another algorithm,
	// is codes.InvalidArgument naming burst. The same key with another
	// burst is the same bucket, decided by the burst each check gives.
	Burst int64
}

// Decision is the cluster's answer to a check.
type Decision struct {
	Allowed bool
	Limit   int64
	// Remaining is what is left under the limit after this check.
	Remaining int64
	// CurrentCount is the count before this check. The answer to a Refund,
	// Settle or Release carries the count after it instead (a settle
	// counts no hits of its own), whether it refunded or charged.
	CurrentCount int64
	// RetryAfter is zero when allowed; when denied, the earliest time after
	// which the same check would be allowed if no other traffic came.
	RetryAfter time.Duration
	// ResetAfter is the time until the key's state would be empty.
	ResetAfter time.Duration
	// RefillAfter is the time until the hits counted now start to leave the
	// window, if no other traffic came; it runs down as time passes and is
	// at most one window. For SlidingWindowLog, when the oldest hit in the
	// window leaves (one hit's room comes back), zero when it holds none; for
	// SlidingWindowCounter, when the current epoch-aligned fixed window ends,
	// never zero.
	RefillAfter time.Duration
	// Owner is the node that decided.
	Owner string
	// Degraded is true when the key's owner was unreachable and the node
	// answered by its fallback policy.
	Degraded bool
	// Refunded is how many hits a Refund, a Settle below the reserved
	// hits or a Release gave back; 0 for a check.
	Refunded int64
	// Over is how far past the limit a Charge, or a Settle above the
	// reserved hits, took the key (0 when the hits fitted, and Allowed is
	// then true); 0 for a check.
	Over int64
}

// Request is one check of a batch.
type Request struct {
	Key   string
	Limit Limit
	// Policy, if set, names a policy of the cluster's policy file, which
	// gives the limit, window and algorithm instead of Limit (leave Limit
	// zero).
	Policy string
	// Hits is how much the check consumes; 0 means 1. Set Peek to read the
	// state without consuming anything.
	Hits int64
	Peek bool
}

// Result is the answer to one check of a batch: a Decision, or why there is
// none.
type Result struct {
	Decision
	Err error
}

// Config configures a Client. Only Endpoints is required: a zero field
// means its documented default (DefaultConfig holds them all), so that
// Config{Endpoints: ...} is a complete configuration. A negative duration
// or count is an error naming the field, never replaced.
type Config struct {
	// Endpoints are gRPC addresses of one or more nodes. The Client learns
	// the other members from them.
	Endpoints []string
	// DialOptions are added to every connection, after the ones TLS and
	// Token make. Default: plaintext.
	DialOptions []grpc.DialOption
	// TLS, when set, makes every connection TLS with this configuration.
	// The Client connects to the addresses the members advertise, usually
	// IPs: node certificates need them as IP SANs, or set TLS.ServerName to
	// a name every node's certificate carries. Certificates in it are
	// presented for mutual TLS. LoadTLS builds one from PEM files.
	TLS *tls.Config
	// Token is sent as "authorization: Bearer <Token>" with every call,
	// for nodes that require one. Over plaintext it is refused (New
	// fails) unless TokenWithoutTLS is set: a token sent in clear is
	// anyone's who can watch the network.
	Token           string
	TokenWithoutTLS bool
	// AttemptTimeout bounds one try on one node; the call as a whole is
	// bounded by its context, and moves on to another node when a try fails
	// or times out. Default 1s.
	AttemptTimeout time.Duration
	// DisableOwnerRouting sends checks to any node instead of the key's
	// owner (the node then forwards them).
	DisableOwnerRouting bool
	// RefreshInterval is how often the member list and ring are re-read.
	// An answer decided by another node than the expected owner triggers a
	// refresh at once. Default 10s.
	RefreshInterval time.Duration
	// DisableCoalescing sends every Check as its own call instead of
	// gathering concurrent checks bound for one node into CheckBatch calls.
	DisableCoalescing bool
	// CoalesceLimit is the most checks in one coalesced batch. Default 100.
	CoalesceLimit int
	// Deprecated: CoalesceWait is no longer used. A check goes at once on
	// an idle connection, and otherwise with the next batch, as soon as an
	// earlier one is answered (MaxInflightBatches).
	CoalesceWait time.Duration
	// MaxInflightBatches caps the coalesced batches out to one node at
	// once, sent and not yet answered: while they are out, checks gather
	// for the next. Default 2.
	MaxInflightBatches int
	// RetryBackoff is how long a node that failed is avoided, doubling with
	// each further failure up to MaxRetryBackoff. An avoided node is still
	// tried when no other answers. Defaults 100ms and 5s.
	RetryBackoff, MaxRetryBackoff time.Duration
	// Logger receives membership refreshes and node failures. Default:
	// slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults documented on Config; Endpoints is
// the caller's.
func DefaultConfig() Config {
	return Config{AttemptTimeout: time.Second, RefreshInterval: 10 * time.Second, CoalesceLimit: 100,
		MaxInflightBatches: 2, RetryBackoff: 100 * time.Millisecond,
		MaxRetryBackoff: 5 * time.Second}
}

// Validate reports every unusable field of c as New would use it: zero
// fields count as their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Endpoints) == 0 {
		errs = append(errs, errors.New("Endpoints is empty"))
	}
	for name, d := range map[string]time.Duration{"AttemptTimeout": c.AttemptTimeout, "RefreshInterval": c.RefreshInterval,
		"CoalesceWait": c.CoalesceWait, "RetryBackoff": c.RetryBackoff, "MaxRetryBackoff": c.MaxRetryBackoff} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if c.CoalesceLimit < 0 || c.MaxInflightBatches < 0 {
		errs = append(errs, fmt.Errorf("CoalesceLimit and MaxInflightBatches must not be negative, got %d and %d", c.CoalesceLimit, c.MaxInflightBatches))
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		errs = append(errs, fmt.Errorf("MaxRetryBackoff (%s) must be ≥ RetryBackoff (%s)", c.MaxRetryBackoff, c.RetryBackoff))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("peerlimit client: Config: %w", err)
	}
	return nil
}

// withDefaults returns c with each zero field set to its default. An
// unset MaxRetryBackoff is at least RetryBackoff.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	set := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	set(&c.AttemptTimeout, d.AttemptTimeout)
	set(&c.RefreshInterval, d.RefreshInterval)
	set(&c.RetryBackoff, d.RetryBackoff)
	set(&c.MaxRetryBackoff, max(d.MaxRetryBackoff, c.RetryBackoff))
	if c.CoalesceLimit == 0 {
		c.CoalesceLimit = d.CoalesceLimit
	}
	if c.MaxInflightBatches == 0 {
		c.MaxInflightBatches = d.MaxInflightBatches
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Client is safe for concurrent use. Close it when done.
type Client struct {
	// router owns the connections, the view of the cluster and its
	// refresh, and the failover (router.go); a Client builds requests,
	// hands them to it and reads the answers.
	router *router
}

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("peerlimit client closed")

// New returns a Client for the cluster behind cfg.Endpoints. It reads the
// members and the ring from the first endpoint that answers within ctx;
// if none does, New still returns a working Client, which keeps trying
// (calls then go to the endpoints). Only an invalid Config is an error.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r, err := newRouter(ctx, cfg.withDefaults())
	if err != nil {
		return nil, err
	}
	return &Client{router: r}, nil
}

// Check consumes one hit of key under l.
func (c *Client) Check(ctx context.Context, key string, l Limit) (Decision, error) {
	return c.CheckN(ctx, key, l, 1)
}

// CheckN consumes n hits of key under l; n = 0 peeks (reports the state,
// consumes nothing). A denied check is not an error: see Decision.Allowed.
// Errors are invalid input (codes.InvalidArgument, not retried), a node's
// refusal (e.g. codes.ResourceExhausted), or no node answering before ctx
// ended.
func (c *Client) CheckN(ctx context.Context, key string, l Limit, n int64) (Decision, error) {
	if err := l.validate(); err != nil {
		return Decision{}, err
	}
	return c.check(ctx, key, toProto(key, l, n))
}

// CheckPolicy consumes one hit of key under the named policy: the limit,
// window and algorithm the cluster's policy file (--policies) gives it.
// The node that receives the check resolves the name; an unknown one is
// codes.InvalidArgument naming the field policy.
func (c *Client) CheckPolicy(ctx context.Context, key, policy string) (Decision, error) {
	return c.CheckPolicyN(ctx, key, policy, 1)
}

// CheckPolicyN consumes n hits of key under the named policy; n = 0 peeks.
func (c *Client) CheckPolicyN(ctx context.Context, key, policy string, n int64) (Decision, error) {
	if policy == "" {
		return Decision{}, status.Error(codes.InvalidArgument, "invalid policy: must not be empty")
	}
	return c.check(ctx, key, &pb.CheckRequest{Key: key, Policy: policy, Hits: &n})
}

func (c *Client) check(ctx context.Context, key string, req *pb.CheckRequest) (Decision, error) {
	res, err := c.router.send(ctx, key, req)
	if err != nil {
		return Decision{}, err
	}
	return fromProto(res)
}

// CheckBatch checks many keys in one call per node and answers each on its
// own, in order. With owner routing the checks are split by owner and the
// parts sent at once. The error is for the batch as a whole (closed
// client, a batch over the node's limit); per-check failures are in the
// results.
func (c *Client) CheckBatch(ctx context.Context, reqs []Request) ([]Result, error) {
	if c.router.closed.Load() {
		return nil, ErrClosed
	}
	groups := map[string][]int{} // routing key → indexes
	// Read once: the whole batch is split by one view of the ring.
	v := c.router.routing()
	for i, r := range reqs {
		g := ""
		if v != nil {
			g = v.owner(r.Key).addr
		}
		groups[g] = append(groups[g], i)
	}
	out := make([]Result, len(reqs))
	var wg sync.WaitGroup
	var fatal atomic.Pointer[error]
	send := func(idx []int) {
		// The messages of one call are allocated together (see checkSlab).
		breq := &pb.CheckBatchRequest{Checks: make([]*pb.CheckRequest, 0, len(idx))}
		slab := make(checkSlab, len(idx))
		sent := make([]int, 0, len(idx)) // indexes that passed local validation
		for _, i := range idx {
			r := reqs[i]
			if err := r.Limit.validate(); err != nil {
				out[i].Err = err
				continue
			}
			hits := max(r.Hits, 1)
			if r.Peek {
				hits = 0
			}
			pr := slab.put(len(sent), r.Key, r.Limit, hits)
			pr.Policy = r.Policy
			breq.Checks = append(breq.Checks, pr)
			sent = append(sent, i)
		}
		if idx = sent; len(idx) == 0 {
			return
		}
		var resp *pb.CheckBatchResponse
		_, err := c.router.do(ctx, reqs[idx[0]].Key, false, func(ctx context.Context, nd *node) (*pb.CheckResult, error) {
			var err error
			resp, err = nd.api.CheckBatch(ctx, breq)
			return nil, err
		})
		if err == nil && len(resp.GetResults()) != len(idx) {
			err = fmt.Errorf("peerlimit client: node answered %d of %d checks", len(resp.GetResults()), len(idx))
		}
		if err != nil {
			if status.Code(err) == codes.ResourceExhausted || errors.Is(err, ErrClosed) {
				fatal.Store(&err)
			}
			for _, i := range idx {
				out[i].Err = err
			}
			return
		}
		for j, i := range idx {
			out[i].Decision, out[i].Err = fromProto(resp.Results[j])
		}
	}
	// The last group goes out on the caller's goroutine, whose stack is
	// already grown: a fresh goroutine grows its stack through grpc's call
	// path every time (runtime.newstack was 8% of a batch client's CPU).
	k := 0
	for _, idx := range groups {
		if k++; k == len(groups) {
			send(idx)
		} else {
			wg.Go(func() { send(idx) })
		}
	}
	wg.Wait()
	if e := fatal.Load(); e != nil {
		return nil, *e
	}
	return out, nil
}

// Partition returns key's ring partition among count: XXH64 of the key's
// bytes (seed 0) mod count, as the Members RPC documents and the nodes
// compute it (package partition).
func Partition(key string, count int) int { return partition.Of(key, count) }

// OwnerOf returns key's partition and its owner in m, a node's answer to
// the Members RPC: where a check for key would be decided, as that node
// sees the ring.
func OwnerOf(m *pb.MembersResponse, key string) (partition int, owner *pb.Member, err error) {
	count, owners := int(m.GetPartitionCount()), m.GetPartitionOwners()
	if count == 0 || len(owners) != count {
		return 0, nil, fmt.Errorf("peerlimit client: node %q sent no ring (%d partitions, %d owners)", m.GetSelf(), count, len(owners))
	}
	p := Partition(key, count)
	i := int(owners[p])
	if i >= len(m.GetMembers()) {
		return p, nil, fmt.Errorf("peerlimit client: partition %d names member %d of %d", p, i, len(m.GetMembers()))
	}
	return p, m.GetMembers()[i], nil
}

// Close stops the refresher and closes every connection. Calls in flight
// fail with ErrClosed or their context's error.
func (c *Client) Close() error {
	return c.router.close()
}

// validate refuses what the wire cannot carry exactly; the node checks the
// rest.
func (l Limit) validate() error {
	if l.Window%time.Millisecond != 0 {
		return status.Errorf(codes.InvalidArgument, "invalid window_ms: %s is not a whole number of milliseconds", l.Window)
	}
	return nil
}

func toProto(key string, l Limit, hits int64) *pb.CheckRequest {
	return make(checkSlab, 1).put(0, key, l, hits)
}

// checkSlab holds the messages of one batch call, each with its optional
// hits, in one array: one allocation per call instead of two per check.
type checkSlab []struct {
	req         pb.CheckRequest
	hits, burst int64
}

func (s checkSlab) put(i int, key string, l Limit, hits int64) *pb.CheckRequest {
	w := &s[i]
	w.hits = hits
	m := &w.req
	m.Key, m.Limit, m.WindowMs, m.Algorithm, m.Hits = key, l.Limit, l.Window.Milliseconds(), pb.Algorithm(l.Algorithm), &w.hits
	m.Calendar, m.TimeZone = pb.CalendarUnit(l.Calendar), l.TimeZone
	if l.Burst != 0 { // 0 is absent: the limit; the node refuses any other non-positive one
		w.burst = l.Burst
		m.Burst = &w.burst
	}
	return m
}

func fromProto(r *pb.CheckResult) (Decision, error) {
	if e := r.GetError(); e != nil {
		return Decision{}, status.Error(codes.Code(e.GetCode()), e.GetMessage())
	}
	resp := r.GetResponse()
	if resp == nil {
		return Decision{}, errors.New("peerlimit client: empty result")
	}
	return Decision{
		Allowed:      resp.GetAllowed(),
		Limit:        resp.GetLimit(),
		Remaining:    resp.GetRemaining(),
		CurrentCount: resp.GetCurrentCount(),
		RetryAfter:   time.Duration(resp.GetRetryAfterMs()) * time.Millisecond,
		ResetAfter:   time.Duration(resp.GetResetAfterMs()) * time.Millisecond,
		RefillAfter:  time.Duration(resp.GetRefillAfterMs()) * time.Millisecond,
		Owner:        resp.GetOwner(),
		Degraded:     resp.GetDegraded(),
		Refunded:     resp.GetRefunded(),
		Over:         resp.GetOver(),
	}, nil
}
