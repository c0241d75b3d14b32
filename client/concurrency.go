package client

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A Concurrency limit caps the requests in flight, not a rate: Acquire
// takes a slot before the work and Release frees it after,
//
//	slot, err := c.Acquire(ctx, "tenant:42", client.Limit{Limit: 20, Window: 30 * time.Second, Algorithm: client.Concurrency})
//	if err != nil || !slot.Allowed { /* busy: retry after slot.RetryAfter */ }
//	defer c.Release(ctx, slot)
//
// A slot is a Reservation of one hit whose Token is the slot's: the same
// Release closes it, as idempotently (a retried Release answers
// SettledBefore), and a slot never released (its process died) frees
// itself Window after it was taken. CheckN of 0 hits peeks at the slots
// in use. docs/limiter.md, "Concurrency limits", states every rule.

// Acquire takes one slot of key under l, whose Algorithm must be
// Concurrency (any other is codes.InvalidArgument naming op): at most
// l.Limit slots of a key are held at once, each until Release or until
// l.Window after it was taken, which Reservation.Expires says. A denied
// Acquire (every slot held) is not an error: its Allowed is false, its
// Token empty and RetryAfter says when a slot frees itself at the latest;
// releasing it does nothing, so `defer c.Release(ctx, slot)` needs no
// guard. Like a check, an Acquire whose answer was lost (the client then
// asks another node) may hold a slot no one has the token of: it frees
// itself at Window.
func (c *Client) Acquire(ctx context.Context, key string, l Limit) (Reservation, error) {
	req, err := acquireRequest(key, l, "")
	if err != nil {
		return Reservation{}, err
	}
	return c.open(ctx, Reservation{Key: key, Limit: l, Hits: 1}, req)
}

// AcquirePolicy is Acquire under the named policy of the cluster's policy
// file (--policies), which must be a CONCURRENCY one.
func (c *Client) AcquirePolicy(ctx context.Context, key, policy string) (Reservation, error) {
	if policy == "" {
		return Reservation{}, status.Error(codes.InvalidArgument, "invalid policy: must not be empty")
	}
	req, err := acquireRequest(key, Limit{}, policy)
	if err != nil {
		return Reservation{}, err
	}
	return c.open(ctx, Reservation{Key: key, Policy: policy, Hits: 1}, req)
}

// acquireRequest is the ACQUIRE of one slot of key under l, or under
// policy when it is not empty.
func acquireRequest(key string, l Limit, policy string) (*pb.CheckRequest, error) {
	req, err := opRequest(key, l, policy, 1)
	if err != nil {
		return nil, err
	}
	req.Op = pb.Op_ACQUIRE
	return req, nil
}
