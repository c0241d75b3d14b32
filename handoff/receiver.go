package handoff

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Receiver merges the states other members hand this node: the receiving
// side of a handoff, which the node's peer.Handler calls. Both sides may
// have served a key (a partition, a handoff in flight), so it merges,
// never overwrites (limiter.Transfer.Merge): every hit either side admitted
// still counts. Safe for concurrent use.
type Receiver struct {
	self     string
	store    *limiter.Transfer
	leaving  func() bool
	replicas Replicas
	now      func() time.Time
	log      *slog.Logger
	metrics  *Metrics
}

// ReceiverDeps is what a Receiver works with.
type ReceiverDeps struct {
	// Self is this node's id. Required.
	Self string
	// Store is the node's state: its store's Transfer
	// (limiter.Store.Transfer), all a Receiver uses of it. Required.
	Store *limiter.Transfer
	// Leaving reports whether this node is leaving the cluster: it then
	// takes no handoffs (Receive). Nil: never.
	Leaving func() bool
	// Replicas, if set, is told of every handoff before it is merged
	// (Replicas.Supersede). Nil: replication is off.
	Replicas Replicas
	// Now is the node's clock. Required.
	Now func() time.Time
	// Logger receives the states refused. Nil: slog.Default().
	Logger *slog.Logger
	// Metrics counts the states received; nil counts nothing.
	Metrics *Metrics
}

// NewReceiver returns a Receiver over d.
func NewReceiver(d ReceiverDeps) (*Receiver, error) {
	if d.Store == nil || d.Now == nil || d.Self == "" {
		return nil, errors.New("handoff: ReceiverDeps.Self, Store and Now are required")
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	if d.Leaving == nil {
		d.Leaving = func() bool { return false }
	}
	return &Receiver{self: d.Self, store: d.Store, leaving: d.Leaving, replicas: d.Replicas, now: d.Now, log: log, metrics: d.Metrics}, nil
}

// Receive merges states origin handed this node into its store, and
// returns how many it merged and why it refused the others (invalid, or
// no room with the store's OverflowReject). A refusal is logged here under the
// call's request id, which the sender logs too. The states are on this
// node's clock already: the node's peer.Handler rebased them from
// origin's as they arrived (limiter.Rebase).
//
// A node that is leaving takes nothing (peer.ErrLeaving): the sender
// keeps the states, and if it is leaving too, on its own disk, where its
// next start finds them. Taken, they could only be passed on; when every
// member leaves at once (a stop of the whole cluster) the pass fails and
// they stay on this node's disk, where their owner does not look: back
// first, it decides them from its own disk without them, unmarked, until
// this node is back and hands them over (docs/chaos.md, "full-stop").
func (r *Receiver) Receive(ctx context.Context, origin string, states []limiter.KeyState) (merged int, rejected []string, err error) {
	if r.leaving() {
		return 0, nil, peer.ErrLeaving
	}
	if r.replicas != nil {
		r.replicas.Supersede(origin, states)
	}
	merged, errs := r.store.Merge(r.now(), states)
	for _, err := range errs {
		rejected = append(rejected, err.Error())
	}
	r.metrics.received(merged)
	if len(rejected) > 0 {
		attrs := []any{"from", logging.Clip(origin), "refused", len(rejected), "first", rejected[0]}
		if id := peer.RequestIDFrom(ctx); id != "" {
			attrs = append(attrs, "request_id", id)
		}
		r.log.Warn("refused handed-off keys", attrs...)
	}
	return merged, rejected, nil
}
