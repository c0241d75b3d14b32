package route

import (
	"context"

	"github.com/peerlimit/peerlimit/limiter"
)

// HandleForward implements Handler: decide here, never forward again. The
// checks are stamped with one arrival time, this node's.
func (s *Service) HandleForward(ctx context.Context, origin string, reqs []limiter.Request) []Result {
	now := s.deps.Now()
	out := make([]Result, len(reqs))
	refused := -1
	for i, r := range reqs {
		out[i] = s.decide(now, r)
		s.metrics.peerCheck(r.Algorithm, out[i])
		if refused < 0 && CodeOf(out[i].Err) == InvalidArgument {
			refused = i
		}
	}
	if refused >= 0 {
		s.RefusedForward(ctx, origin, reqs[refused].Key, out[refused].Err)
	}
	// Decided, but the caller has stopped waiting (its forward deadline
	// passed): it answered these checks by its fallback, and they count
	// here as well. Worth a trace on both sides.
	if err := ctx.Err(); err != nil && s.lateLog.allow() {
		s.log.Warn("decided forwarded checks after the caller stopped waiting; if it answered them by its fallback, they count twice",
			append([]any{"origin", Clip(origin), "checks", len(reqs), "err", err}, idAttrs(ctx, "")...)...)
	}
	return out
}

// RefusedForward warns, at most once a second, about a forwarded check
// this node refused as invalid (err names the field): the sender validated
// it by its own limits, so the two nodes are configured differently.
// HandleForward calls it; a transport calls it for a check it could not
// even convert.
func (s *Service) RefusedForward(ctx context.Context, origin, key string, err error) {
	if !s.peerRefusedLog.allow() {
		return
	}
	s.log.Warn("refused a forwarded check the sender accepted: the nodes' settings differ",
		append([]any{"origin", Clip(origin), "key", Clip(key), "field", Field(err), "err", err}, idAttrs(ctx, "")...)...)
}

// HandleReset implements Handler. The member that received the public call
// resolved any policy and checked r by its rules; it is checked again
// here, by this node's, and refused naming the field if they differ.
func (s *Service) HandleReset(ctx context.Context, origin string, r ResetRequest) (int, error) {
	if err := s.validateReset(r); err != nil {
		return 0, err
	}
	cleared := s.ResetLocal(r)
	// Debug: applications may reset on every successful login; the node
	// that received the reset logs it at Info, with the same request_id.
	s.log.Debug("dropped a key's state at a member's request", append([]any{"origin", Clip(origin), "key", Clip(r.Key),
		"cleared", cleared}, idAttrs(ctx, "")...)...)
	return cleared, nil
}

// HandleHandoff implements Handler: merge the states into the store, and
// tell Deps.OnHandoff. A state refused (invalid, or no room under
// --overflow=reject) is named in the answer and logged here, under the
// call's request id, which the sender logs too.
func (s *Service) HandleHandoff(ctx context.Context, origin string, states []limiter.KeyState) (int, []string) {
	if s.deps.BeforeHandoff != nil {
		s.deps.BeforeHandoff(origin, states)
	}
	merged, errs := s.store.Merge(s.deps.Now(), states)
	var rejected []string
	for _, err := range errs {
		rejected = append(rejected, err.Error())
	}
	if s.deps.OnHandoff != nil {
		s.deps.OnHandoff(merged)
	}
	if len(rejected) > 0 {
		s.log.Warn("refused handed-off keys", append([]any{"from", Clip(origin), "refused", len(rejected), "first", rejected[0]},
			idAttrs(ctx, "")...)...)
	}
	return merged, rejected
}

// HandleReplicate implements Handler: keep the owner's states apart, in
// Deps.Replicas, never in the store that decides.
func (s *Service) HandleReplicate(_ context.Context, origin string, r Replication) (int, error) {
	if s.deps.Replicas == nil {
		return 0, ErrNoReplicas
	}
	return s.deps.Replicas.Apply(origin, r), nil
}
