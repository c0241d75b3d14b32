package route

import (
	"context"
	"time"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// HandleForward implements Handler: decide here, never forward again. The
// checks are stamped with one arrival time, this node's. A check for a key
// this node's ring gives another member is answered Degraded: the
// sender's view and this node's disagree.
func (s *Service) HandleForward(ctx context.Context, origin string, reqs []limiter.Request) []peer.Result {
	for _, r := range reqs {
		s.awaitSettled(ctx, r.Key) // once settled, the others return at once
	}
	now := s.deps.Now()
	out := make([]peer.Result, len(reqs))
	refused := -1
	for i, r := range reqs {
		out[i] = s.decide(now, r)
		if _, local := s.owner(r.Key); !local && out[i].Err == nil {
			// The sender's ring says this node owns the key, this node's
			// says another member does: two views of the membership, and
			// perhaps two deciders. Decided, and said so.
			out[i].Degraded = true
		}
		s.metrics.peerCheck(r.Algorithm, out[i])
		if refused < 0 && peer.CodeOf(out[i].Err) == peer.InvalidArgument {
			refused = i
		}
	}
	if refused >= 0 {
		s.refusedForward(ctx, origin, reqs[refused].Key, out[refused].Err)
	}
	// Decided, but the sender has stopped waiting (its wait passed): it
	// answers these checks by its fallback, which counts them, so what
	// they added here is taken back, and the answers say so
	// (peer.ErrNotCounted): a sender that still waits after all falls
	// back too, rather than pass on an admission nothing counts. (A reply
	// already on its way when the wait ends is not caught: those count
	// twice, which over-denies; never zero times.)
	if err := peer.SenderGone(ctx); err != nil {
		undone := s.undo(now, reqs, out)
		notCounted(reqs, out)
		if s.lateLog.Allow() {
			s.log.Warn("decided forwarded checks after the caller stopped waiting; took back what they added (its fallback counts them)",
				append([]any{"origin", logging.Clip(origin), "checks", len(reqs), "undone", undone, "err", err}, peer.LogAttrs(ctx, "")...)...)
		}
	}
	return out
}

// notCounted answers every decided check of out with peer.ErrNotCounted:
// what they added was taken back. Refusals (invalid input) stay, and so
// do the answers to other ops (refunds, charges, reservations), which
// undo cannot take back exactly: a sender that still waits uses them,
// one that stopped applies the op by its fallback too (docs/limiter.md
// says what that double application costs).
func notCounted(reqs []limiter.Request, out []peer.Result) {
	for i := range out {
		if out[i].Err == nil && reqs[i].Op == limiter.OpCheck {
			out[i] = peer.Result{Err: peer.ErrNotCounted}
		}
	}
}

// undo takes back from the store what the allowed checks of reqs,
// decided at now, added (limiter.Store.Forget: the counter's hits in
// now's window, the log's entries at now), and returns how many it took
// back.
func (s *Service) undo(now time.Time, reqs []limiter.Request, out []peer.Result) int {
	var states []limiter.KeyState
	ms := max(now.UnixMilli(), 0)
	for i, r := range reqs {
		if out[i].Err != nil || !out[i].Decision.Allowed || r.Hits <= 0 || r.Op != limiter.OpCheck {
			continue
		}
		states = append(states, r.HitsAt(ms, r.Hits))
	}
	s.store.Forget(now, states)
	return len(states)
}

// refusedForward warns, at most once a second, about a forwarded check
// this node refused as invalid (err names the field): the sender validated
// it by its own limits, so the two nodes are configured differently.
func (s *Service) refusedForward(ctx context.Context, origin, key string, err error) {
	if !s.peerRefusedLog.Allow() {
		return
	}
	s.log.Warn("refused a forwarded check the sender accepted: the nodes' settings differ",
		append([]any{"origin", logging.Clip(origin), "key", logging.Clip(key), "field", peer.FieldOf(err), "err", err}, peer.LogAttrs(ctx, "")...)...)
}

// HandleHandoff implements peer.Handler: Deps.Handoffs merges the states
// into the store.
func (s *Service) HandleHandoff(ctx context.Context, origin string, states []limiter.KeyState) (int, []string) {
	return s.handoffs.Receive(ctx, origin, states)
}

// HandleHandoffDone implements peer.Handler: Deps.Handoffs notes that
// origin holds nothing more of partitions.
func (s *Service) HandleHandoffDone(_ context.Context, origin string, partitions []int) {
	s.handoffs.Done(origin, partitions)
}

// HandleReplicate implements peer.Handler: keep the owner's states apart,
// in Deps.Failover, never in the store that decides.
func (s *Service) HandleReplicate(_ context.Context, origin string, r peer.Replication) (int, error) {
	if s.deps.Failover == nil {
		return 0, peer.ErrNoReplicas
	}
	return s.deps.Failover.Apply(origin, r), nil
}

var _ peer.Handler = (*Service)(nil)
