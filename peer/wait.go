package peer

import (
	"context"
	"time"
)

// ErrNotCounted answers a forwarded check that its owner decided after the
// sender had stopped waiting, and then took back: nothing counts it. The
// code is ABORTED, and in a forwarded check's result it means only this,
// so that a sender that still waits (its clock ran slower than the
// owner's) answers the check by its fallback, as if the call had failed,
// instead of passing on an admission no member counted.
var ErrNotCounted = NewError(Aborted, "decided after the sender stopped waiting, and taken back: not counted")

// NotDecided reports whether a forwarded check's result is not a
// decision anyone counted: the call failed (IsCallError), or the owner
// took it back (ErrNotCounted, which keeps its code over the wire). The
// sender answers such a check by its fallback.
func NotDecided(err error) bool {
	return err != nil && (IsCallError(err) || CodeOf(err) == Aborted)
}

type waitKey struct{}

type senderWait struct {
	arrived time.Time // this node's clock, with its monotonic reading
	wait    time.Duration
}

// WithSenderWait returns ctx carrying how long the sender of a forwarded
// batch waits for its answer, measured from when the batch arrived here.
// The sender says how long (a duration), never until when: an absolute
// time would be read on another clock, and a sender whose clock is
// behind would have its checks judged late and taken back while it still
// used the answers. Measured from arrival, the wait ends here no sooner
// than at the sender, so a batch is judged late only when its sender has
// given up on it (to within the two clocks' rates; ErrNotCounted covers
// the rest). wait ≤ 0 adds nothing.
func WithSenderWait(ctx context.Context, arrived time.Time, wait time.Duration) context.Context {
	if wait <= 0 {
		return ctx
	}
	return context.WithValue(ctx, waitKey{}, senderWait{arrived, wait})
}

// SenderGone returns why the sender of the call ctx belongs to has
// stopped waiting for its answer, or nil: ctx ended, or the wait
// WithSenderWait gave it has passed, by this node's monotonic clock
// (never the wall clock, which may be stepped).
func SenderGone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if w, ok := ctx.Value(waitKey{}).(senderWait); ok && time.Since(w.arrived) > w.wait {
		return context.DeadlineExceeded
	}
	return nil
}
