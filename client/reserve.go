package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Costs known only after the work (the tokens an LLM call used, the bytes
// a download sent) are limited in two ways:
//
//   - Reserve an estimate before the work, as a check does, and Settle the
//     real cost after it: the unused part is refunded, a cost above the
//     estimate is charged as debt. A retried Settle counts once. Release
//     gives it all back (the work did not happen); a reservation never
//     closed counts as used when it expires.
//   - Check before and Refund or Charge after. A retry of these after a
//     lost answer may apply them twice, as a retried Check counts twice;
//     when that matters, use a reservation.
//
// docs/limiter.md, "Reservations, refunds and debt", states every rule.

// SettleOutcome says what closing a reservation found; its values are the
// API's (peerlimit.v1.Settled).
type SettleOutcome uint8

const (
	// SettledUnspecified is the zero value: not an answer to a settle.
	SettledUnspecified SettleOutcome = iota
	// SettledNow: the reservation was open on its owner, and is closed now.
	SettledNow
	// SettledBefore: it was closed before, so this was a retry: nothing
	// was applied again, and the first answer's Refunded and Over repeat.
	SettledBefore
	// SettledUnknown: its owner had no record (the key changed owner by
	// failover or handoff); it was applied from the token when the
	// cluster has a secret, which makes tokens authentic; without one,
	// nothing was refunded and only a cost above its hits was charged.
	SettledUnknown
	// SettledExpired: it had expired, counting as used, so only a cost
	// above its hits was charged.
	SettledExpired
)

// String returns the outcome's name as the API spells it.
func (o SettleOutcome) String() string {
	if name, ok := pb.Settled_name[int32(o)]; ok {
		return name
	}
	return fmt.Sprintf("SettleOutcome(%d)", uint8(o))
}

// Reservation is the answer to Reserve: the check's Decision and, when it
// is allowed, the token Settle and Release close it with, and what they
// need to reach the same limit. A Reservation is a value: pass it to
// another goroutine or process (the token is a string) as it is.
type Reservation struct {
	Decision
	// Token names the reservation on the cluster; empty when it was denied.
	Token string
	// Expires is when the reservation, unsettled, starts to count as used
	// for good, on this process's clock: the time the answer came plus
	// the time the owner said it had left.
	Expires time.Time
	// Key, Limit or Policy, and Hits are what was reserved.
	Key    string
	Limit  Limit
	Policy string
	Hits   int64
}

// Reserved reports whether the reservation was admitted, as r.Allowed
// does: an admitted reservation always has a token.
//
// Deprecated: use r.Allowed, as for any Decision. Settle and Release of
// a reservation that was not admitted do nothing, so most callers need
// neither.
func (r Reservation) Reserved() bool { return r.Allowed && r.Token != "" }

// Settlement is the answer to Settle or Release: the Decision after it (a
// peek at the key, or the charge's decision when the cost exceeded the
// reservation), with Refunded and Over set, and what closing found.
type Settlement struct {
	Decision
	Outcome SettleOutcome
}

// Reserve admits estimate hits (1 ≤ estimate ≤ l.Limit) of key under l as
// CheckN does and, when it admits them, opens a reservation, to be closed
// by Settle with the real cost or by Release. ttl is how long it lasts
// unsettled: 0 is the nodes' --reservation-ttl (1 minute by default), and
// it may not exceed their --max-reservation-ttl (1 hour). A denied
// reservation is not an error: r.Allowed is false. Like a check's
// hits, a reservation whose answer was lost (the client then asks
// another node) stays counted: it expires as used.
func (c *Client) Reserve(ctx context.Context, key string, l Limit, estimate int64, ttl time.Duration) (Reservation, error) {
	req, err := reserveRequest(key, l, "", estimate, ttl)
	if err != nil {
		return Reservation{}, err
	}
	return c.open(ctx, Reservation{Key: key, Limit: l, Hits: estimate}, req)
}

// ReservePolicy is Reserve under the named policy of the cluster's policy
// file (--policies).
func (c *Client) ReservePolicy(ctx context.Context, key, policy string, estimate int64, ttl time.Duration) (Reservation, error) {
	req, err := reserveRequest(key, Limit{}, policy, estimate, ttl)
	if err != nil {
		return Reservation{}, err
	}
	return c.open(ctx, Reservation{Key: key, Policy: policy, Hits: estimate}, req)
}

// reserveRequest is the RESERVE of estimate hits of key under l, or under
// policy when it is not empty, lasting ttl.
func reserveRequest(key string, l Limit, policy string, estimate int64, ttl time.Duration) (*pb.CheckRequest, error) {
	req, err := opRequest(key, l, policy, estimate)
	if err != nil {
		return nil, err
	}
	if ttl%time.Millisecond != 0 {
		return nil, status.Errorf(codes.InvalidArgument, "invalid ttl_ms: %s is not a whole number of milliseconds", ttl)
	}
	req.Op, req.TtlMs = pb.Op_RESERVE, ttl.Milliseconds()
	return req, nil
}

// open sends req, an op that opens a reservation (RESERVE, ACQUIRE), and
// fills in r from the answer: its decision and, when admitted, its token
// and when it expires.
func (c *Client) open(ctx context.Context, r Reservation, req *pb.CheckRequest) (Reservation, error) {
	res, err := c.router.send(ctx, r.Key, req)
	if err != nil {
		return Reservation{}, err
	}
	if r.Decision, err = fromProto(res); err != nil {
		return Reservation{}, err
	}
	if resp := res.GetResponse(); r.Allowed && resp.GetReservation() != "" {
		r.Token = resp.GetReservation()
		r.Expires = time.Now().Add(time.Duration(resp.GetExpiresInMs()) * time.Millisecond)
	}
	return r, nil
}

// Settle closes r at the real cost (≥ 0, which may exceed both the
// reservation and the limit): the reserved hits the work did not use are
// refunded (Refunded), a cost above them is charged as debt (Over says how
// far past the limit it took the key). Settle is idempotent: a retry, by
// this client after a lost answer or by the caller, applies nothing again
// and answers SettledBefore with the first answer's numbers; a settle
// at another cost than the first is no retry, and is refused with
// codes.FailedPrecondition naming hits (its message gives the first
// one's numbers). Settle of a reservation that was denied (r.Allowed is
// false), or of the zero Reservation, does nothing and returns the zero
// Settlement and nil, as x/time/rate's Cancel does of a reservation that
// is not OK: so that
//
//	r, err := c.Reserve(ctx, key, l, estimate, 0)
//	...
//	defer c.Release(ctx, r)
//
// needs no guard.
func (c *Client) Settle(ctx context.Context, r Reservation, cost int64) (Settlement, error) {
	return c.settle(ctx, r, pb.Op_SETTLE, cost)
}

// Release closes r refunding every hit of it: the work did not happen.
// It is Settle at a cost of 0, and as idempotent. Release also frees a
// slot Acquire took (Settle of a slot is refused, naming op: a slot has
// no cost to settle). A Release after a
// Settle changes nothing and answers SettledBefore with the settle's
// numbers (a deferred Release after the work settled is harmless); of a
// denied reservation it does nothing and returns nil, as Settle.
func (c *Client) Release(ctx context.Context, r Reservation) (Settlement, error) {
	return c.settle(ctx, r, pb.Op_RELEASE, 0)
}

func (c *Client) settle(ctx context.Context, r Reservation, op pb.Op, cost int64) (Settlement, error) {
	if r.Token == "" {
		return Settlement{}, nil // denied, or the zero Reservation: nothing to close
	}
	req, err := opRequest(r.Key, r.Limit, r.Policy, cost)
	if err != nil {
		return Settlement{}, err
	}
	req.Op, req.Reservation = op, r.Token
	res, err := c.router.send(ctx, r.Key, req)
	if err != nil {
		return Settlement{}, err
	}
	d, err := fromProto(res)
	if err != nil {
		return Settlement{}, err
	}
	return Settlement{Decision: d, Outcome: SettleOutcome(res.GetResponse().GetSettled())}, nil
}

// Refund gives back up to n (> 0, may exceed the limit) hits of key under
// l: never below what its window holds, never creating credit.
// Decision.Refunded says how many; the rest of the Decision is a peek
// after the refund.
func (c *Client) Refund(ctx context.Context, key string, l Limit, n int64) (Decision, error) {
	return c.adjust(ctx, key, l, "", pb.Op_REFUND, n)
}

// RefundPolicy is Refund under the named policy.
func (c *Client) RefundPolicy(ctx context.Context, key, policy string, n int64) (Decision, error) {
	return c.adjust(ctx, key, Limit{}, policy, pb.Op_REFUND, n)
}

// Charge counts n (> 0, may exceed the limit) hits of key under l even
// past the limit: a cost known after the work, which must be paid. The
// Decision is a check's of the same hits, except that they were counted
// whatever it says: Allowed reports whether they fitted, Over how far
// past the limit they took the key, and RetryAfter how long that debt
// blocks it.
func (c *Client) Charge(ctx context.Context, key string, l Limit, n int64) (Decision, error) {
	return c.adjust(ctx, key, l, "", pb.Op_CHARGE, n)
}

// ChargePolicy is Charge under the named policy.
func (c *Client) ChargePolicy(ctx context.Context, key, policy string, n int64) (Decision, error) {
	return c.adjust(ctx, key, Limit{}, policy, pb.Op_CHARGE, n)
}

func (c *Client) adjust(ctx context.Context, key string, l Limit, policy string, op pb.Op, n int64) (Decision, error) {
	req, err := opRequest(key, l, policy, n)
	if err != nil {
		return Decision{}, err
	}
	req.Op = op
	return c.check(ctx, key, req)
}

// opRequest is the request for key under l, or under policy when it is
// not empty, of hits.
func opRequest(key string, l Limit, policy string, hits int64) (*pb.CheckRequest, error) {
	if policy != "" {
		return &pb.CheckRequest{Key: key, Policy: policy, Hits: &hits}, nil
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	return toProto(key, l, hits), nil
}

// CheckAll checks reqs all or nothing: admitted is true, and every check
// counted, only if every one is allowed; otherwise none counts and every
// result is denied (those with a RetryAfter are the ones that denied the
// batch). The node that receives the call holds each limit on its owner
// and then commits or releases the holds. Each Request must consume at
// least one hit (no Peek). Unlike CheckBatch, an invalid item fails the
// whole call: the error is codes.InvalidArgument naming the item and its
// field, e.g. "invalid checks[2].key: ...". docs/limiter.md says what a
// node failing between the holds and the commit can leave.
func (c *Client) CheckAll(ctx context.Context, reqs []Request) ([]Result, bool, error) {
	if c.router.closed.Load() {
		return nil, false, ErrClosed
	}
	if len(reqs) == 0 {
		return []Result{}, true, nil
	}
	breq := &pb.CheckBatchRequest{AllOrNothing: true, Checks: make([]*pb.CheckRequest, len(reqs))}
	slab := make(checkSlab, len(reqs))
	for i, r := range reqs {
		if err := r.Limit.validate(); err != nil {
			return nil, false, status.Error(codes.InvalidArgument, strings.Replace(status.Convert(err).Message(), "invalid ", fmt.Sprintf("invalid checks[%d].", i), 1))
		}
		hits := max(r.Hits, 1)
		if r.Peek {
			hits = 0
		}
		breq.Checks[i] = slab.put(i, r.Key, r.Limit, hits)
		breq.Checks[i].Policy = r.Policy
	}
	var resp *pb.CheckBatchResponse
	// Sent to the first key's owner, which then holds that key without a hop.
	_, err := c.router.do(ctx, reqs[0].Key, false, func(ctx context.Context, nd *node) (*pb.CheckResult, error) {
		var err error
		resp, err = nd.api.CheckBatch(ctx, breq)
		return nil, err
	})
	if err != nil {
		return nil, false, err
	}
	if len(resp.GetResults()) != len(reqs) {
		return nil, false, fmt.Errorf("peerlimit client: node answered %d of %d checks", len(resp.GetResults()), len(reqs))
	}
	out := make([]Result, len(reqs))
	admitted := true
	for i, r := range resp.GetResults() {
		out[i].Decision, out[i].Err = fromProto(r)
		admitted = admitted && out[i].Err == nil && out[i].Allowed
	}
	return out, admitted, nil
}
