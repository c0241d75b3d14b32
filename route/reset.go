package route

import (
	"context"
	"fmt"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/reset"
)

// NewResetRequest builds a ResetRequest from the public API's fields,
// which every API shares, and validates it. A reset names one limit of
// the key (window_ms or calendar, and algorithm, or a policy) or all of
// them (all_windows), never a mix; the extra field is named.
func (s *Ingress) NewResetRequest(key string, windowMS int64, algo limiter.Algorithm, algoSet bool, cal limiter.Calendar, policyName string, all bool) (peer.ResetRequest, error) {
	r := peer.ResetRequest{Key: key, Algorithm: algo, AllWindows: all}
	given := InlineField(0, windowMS, algoSet)
	if given == "" && cal != 0 {
		given = "calendar"
	}
	switch {
	case all:
		if given != "" {
			return r, &limiter.ArgumentError{Field: given, Reason: reset.ErrAllWindows}
		}
		if policyName != "" {
			return r, &limiter.ArgumentError{Field: "policy", Reason: reset.ErrAllWindows}
		}
		r.Algorithm = limiter.SlidingWindowCounter
	case policyName != "":
		if given != "" {
			return r, &limiter.ArgumentError{Field: given, Reason: fmt.Sprintf("must not be given with policy %q, which sets window_ms and algorithm", limiter.Echo(policyName))}
		}
		p, err := s.Policy(policyName)
		if err != nil {
			return r, err
		}
		r.Window, r.Algorithm, r.Calendar = p.Window, p.Algorithm, p.Calendar
	default:
		r.Window, r.Calendar = limiter.WindowFromMS(windowMS), cal
	}
	return r, s.resets.Validate(r)
}

// Reset clears a key's state on its owner and drops every other copy
// (reset.Resetter.Reset): if the owner cannot be asked, nothing is
// cleared and the error wraps peer.ErrOwnerUnreachable.
func (s *Ingress) Reset(ctx context.Context, r peer.ResetRequest) (reset.Result, error) {
	return s.resets.Reset(ctx, r)
}

// HandleReset implements peer.Handler: drop this node's copy of the key
// (reset.Resetter.Handle).
func (s *Handler) HandleReset(ctx context.Context, origin string, r peer.ResetRequest) (int, error) {
	return s.resets.Handle(ctx, origin, r)
}
