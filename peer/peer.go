// Package peer is the contract between the members of a cluster: what one
// node may ask of another (Peers, the calling side) and what a node does
// with those calls (Handler, the receiving side), the messages they carry,
// how a failed call is told from an answer (CallError, Error) and the
// request ids that tie both sides' log lines together.
//
// It holds no transport and no logic. Package rpc carries the calls over
// gRPC (rpc.Peers calls, rpc.PeerServer serves a Handler), the in-memory
// network of internal/testkit/memnet carries them in tests, and the
// request path (package route), handoff and replica make them through
// Peers without knowing which. Both transports deliver to one surface, a
// Handler, so that what a test on memnet shows holds over gRPC.
package peer

import (
	"context"

	"github.com/peerlimit/peerlimit/limiter"
)

// Route names a member and where its gRPC API listens.
type Route struct {
	ID   string
	Addr string
}

// Peers carries a node's calls to the other members: the network seam of
// the request path.
//
// An error is the transport's: the member could not be asked (refused,
// unreachable, past the call's deadline, or the caller's context ended),
// always returned as a *CallError naming the request id the call carried.
// What the member answered, a per-check error included, is a result, and
// a call it refused is an *Error with its code (and, for invalid input,
// the field), wrapped in the *CallError. Every call is bounded by a
// deadline of the implementation's. Implementations are safe for
// concurrent use.
type Peers interface {
	// Forward asks to to decide req, possibly in one call with other
	// checks bound there, and returns its answer and the request id of
	// the call that carried it.
	Forward(ctx context.Context, to Route, req limiter.Request) (Result, string, error)
	// ForwardBatch asks to to decide reqs, in as few calls as the
	// transport allows, and returns one result per request, in order, and
	// the request id of a call that carried them. A request whose call
	// failed while others of the batch were answered has a Result whose
	// Err is a *CallError; the error is for the batch as a whole.
	ForwardBatch(ctx context.Context, to Route, reqs []limiter.Request) ([]Result, string, error)
	// Reset asks to to drop its state for r, whatever its ring says, and
	// returns how many states that still counted something it dropped.
	Reset(ctx context.Context, to Route, r ResetRequest) (int, error)
	// Handoff gives to key states to merge into its own and returns how
	// many it merged and why it refused the others.
	Handoff(ctx context.Context, to Route, h Handoff) (merged int, rejected []string, err error)
	// HandoffDone tells to that this node holds nothing of partitions
	// (which its ring gives to) that it has not handed over.
	HandoffDone(ctx context.Context, to Route, partitions []int) error
	// Replicate gives to, the backup of the partitions r's states belong
	// to, the owner's current state of those keys, to keep apart from its
	// own (package replica), and returns what it kept.
	Replicate(ctx context.Context, to Route, r Replication) (Replicated, error)
	// Relay asks via to get reqs, whose owner this node cannot reach,
	// decided by their owner, or by the owner's heir; one result per
	// request, in order. A request via could not get decided has a
	// Result whose Err is a *CallError.
	Relay(ctx context.Context, via Route, reqs []limiter.Request) ([]Result, error)
	// Report asks to for what the console shows of it: its samples and
	// hot keys (Handler.HandleReport).
	Report(ctx context.Context, to Route, r ReportRequest) (Report, error)
	// Inspect asks to for a key's state, whatever its ring says; an
	// invalid request is refused naming the field.
	Inspect(ctx context.Context, to Route, q InspectQuery) (OwnerView, error)
	// Lease asks to, req's owner, to decide req as Forward does and to
	// lend this node up to want.Hits hits of its limit for up to
	// want.Duration (a zero grant: none).
	Lease(ctx context.Context, to Route, req limiter.Request, want LeaseWant) (Result, LeaseGrant, error)
	// Settle reports to how much of each lease it lent this node was
	// used, and returns how many it settled.
	Settle(ctx context.Context, to Route, uses []LeaseUse) (int, error)
}

// Handler is the receiving side of Peers: what a member does with the
// calls of the others. route.Service is the node's; rpc.PeerServer serves
// one over gRPC and memnet delivers to one directly.
//
// origin is the calling member's id, as it says (the transport has
// checked it where peer authentication is on); ctx carries the call's
// request id (WithRequestID) and ends when the caller stops waiting.
// Every method is called concurrently, from the transport's goroutines,
// and must be safe for it; none may block beyond the work it does (a
// relay and a forward wait for the member they ask, within ctx).
type Handler interface {
	// HandleForward decides checks another member forwarded, here,
	// whatever this node's ring says: a forwarded check is never
	// forwarded again. An invalid check is answered with an error naming
	// the field, and logged: the two nodes' settings differ.
	HandleForward(ctx context.Context, origin string, reqs []limiter.Request) []Result
	// HandleReset drops this node's state for r, whatever its ring says,
	// and returns how many states that still counted something it
	// dropped; an r this node cannot serve is refused naming the field.
	HandleReset(ctx context.Context, origin string, r ResetRequest) (int, error)
	// HandleHandoff merges h's states into this node's, moved first onto
	// this node's clock (Handoff.Sent). h is the Handler's own: a
	// transport passes states no one else holds (decoded, or copied), and
	// the Handler may change them in place. ErrLeaving, and nothing
	// merged, if this node is leaving: the sender keeps the states.
	HandleHandoff(ctx context.Context, origin string, h Handoff) (merged int, rejected []string, err error)
	// HandleHandoffDone notes that origin holds nothing of partitions it
	// has not handed this node.
	HandleHandoffDone(ctx context.Context, origin string, partitions []int)
	// HandleReplicate keeps r's states, replicated by their owner origin,
	// apart from this node's own, moved first onto this node's clock
	// (Replication.Sent); ErrNoReplicas if this node keeps none. r is the
	// Handler's own, as HandleHandoff's h is.
	HandleReplicate(ctx context.Context, origin string, r Replication) (Replicated, error)
	// HandleRelay gets checks origin could not take to their owner
	// decided by the owner, as this node's ring says, or here from the
	// owner's replica if this node is its heir; never relayed further. A
	// check it could get decided by neither has a *CallError.
	HandleRelay(ctx context.Context, origin string, reqs []limiter.Request) []Result
	// HandleReport returns this node's samples newer than r.Since and its
	// r.Top hottest keys.
	HandleReport(ctx context.Context, origin string, r ReportRequest) Report
	// HandleInspect reads q.Key's state here, consuming nothing.
	HandleInspect(ctx context.Context, origin string, q InspectQuery) (OwnerView, error)
	// HandleLease decides req here, as HandleForward does, and may lend
	// origin up to want.Hits hits of its limit, for up to want.Duration
	// (0: the owner's lease.Config.Duration).
	HandleLease(ctx context.Context, origin string, req limiter.Request, want LeaseWant) (Result, LeaseGrant)
	// HandleSettle settles the leases origin reports on and returns how
	// many it settled.
	HandleSettle(ctx context.Context, origin string, uses []LeaseUse) int
}
