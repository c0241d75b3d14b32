package route

import "github.com/peerlimit/peerlimit/peer"

// The request path's own refusals. Each carries its code (peer.CodeOf),
// which every face maps to its protocol's: gRPC's, HTTP's, Envoy's.
var (
	// ErrBatchTooLarge is returned, wrapped, for a batch over
	// Config.MaxBatch: RESOURCE_EXHAUSTED.
	ErrBatchTooLarge = peer.NewError(peer.ResourceExhausted, "batch too large")
	// ErrTooManyForwards is returned, wrapped, for a check refused because
	// Config.MaxInflightForwards checks already wait for their owners:
	// RESOURCE_EXHAUSTED.
	ErrTooManyForwards = peer.NewError(peer.ResourceExhausted, "too many forwarded checks in flight")
)
