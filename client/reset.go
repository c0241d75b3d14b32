package client

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// ResetResult is what a reset did. The owner clears its state; the node
// that received the call also asks every other member to drop a copy it
// may hold (a handoff in flight, a stale owner's), best effort.
type ResetResult struct {
	// Owner is the node that owns the key and cleared it.
	Owner string
	// Cleared is how many states the owner dropped: 0 when there was
	// nothing to clear; more than 1 only with ResetAll.
	Cleared int
	// MembersAsked and MembersAcknowledged count the other members asked
	// to drop their copies, and those that answered. A member that did not
	// answer may give its copy back to the owner with its next handoff:
	// reset again if the key stays limited.
	MembersAsked, MembersAcknowledged int
	// CopiesCleared is how many copies the other members dropped.
	CopiesCleared int
}

// Existed reports whether the owner held state to clear.
func (r ResetResult) Existed() bool { return r.Cleared > 0 }

// Reset clears key's state under l's window (or calendar) and algorithm
// (its Limit is not used: the state of a key is per window and
// algorithm), so that its
// next check starts from zero. An owner that cannot be reached is an
// error (codes.Unavailable), and nothing is cleared.
func (c *Client) Reset(ctx context.Context, key string, l Limit) (ResetResult, error) {
	if err := l.validate(); err != nil {
		return ResetResult{}, err
	}
	return c.reset(ctx, &pb.ResetRequest{Key: key, WindowMs: l.Window.Milliseconds(), Algorithm: pb.Algorithm(l.Algorithm),
		Calendar: pb.CalendarUnit(l.Calendar), TimeZone: l.TimeZone})
}

// ResetPolicy clears key's state under the named policy's window and
// algorithm (the cluster's --policies file).
func (c *Client) ResetPolicy(ctx context.Context, key, policy string) (ResetResult, error) {
	if policy == "" {
		return ResetResult{}, status.Error(codes.InvalidArgument, "invalid policy: must not be empty")
	}
	return c.reset(ctx, &pb.ResetRequest{Key: key, Policy: policy})
}

// ResetAll clears key's state under every window and algorithm.
func (c *Client) ResetAll(ctx context.Context, key string) (ResetResult, error) {
	return c.reset(ctx, &pb.ResetRequest{Key: key, AllWindows: true})
}

// reset goes to the key's owner when the client knows it (the node it
// reaches routes it there otherwise), failing over like a check; a reset
// is idempotent, so a retry after a lost answer clears nothing twice.
func (c *Client) reset(ctx context.Context, req *pb.ResetRequest) (ResetResult, error) {
	var resp *pb.ResetResponse
	_, err := c.router.do(ctx, req.GetKey(), false, func(ctx context.Context, nd *node) (*pb.CheckResult, error) {
		var err error
		resp, err = nd.api.Reset(ctx, req)
		return nil, err
	})
	if err != nil {
		return ResetResult{}, err
	}
	return ResetResult{Owner: resp.GetOwner(), Cleared: int(resp.GetCleared()), MembersAsked: int(resp.GetMembersAsked()),
		MembersAcknowledged: int(resp.GetMembersAcknowledged()), CopiesCleared: int(resp.GetCopiesCleared())}, nil
}
