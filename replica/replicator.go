package replica

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/ring"
)

// Deps is what a Replicator works with.
type Deps struct {
	// Self is this node's id. Required.
	Self string
	// Boot names this node's process (cluster.Member.Boot): every
	// replication says it, so that a heir that promotes a replica can
	// tell later whether this node restarted since. Empty: not said.
	Boot string
	// Store is the node's own state (with Config.TrackChanges). Required.
	Store *limiter.Store
	// Peers carries the calls. Required.
	Peers peer.Peers
	// Ring returns the current ring: each partition's owner and backup.
	// Required.
	Ring func() *ring.Ring
	// Now is the node's clock. Required.
	Now func() time.Time
	// Logger receives the failures, at most one line a round. Nil:
	// slog.Default().
	Logger *slog.Logger
	// Metrics counts replication; nil counts nothing.
	Metrics *Metrics
}

// Replicator sends what changed in the partitions this node owns to
// their backups. Round must not run concurrently with itself: the node
// runs it from one goroutine, every Config.Interval.
type Replicator struct {
	d   Deps
	log *slog.Logger
	// synced is, by partition, the backup that holds its whole state as
	// of the last round ("" none: the next round sends it whole).
	synced []string
	// last is when the previous round took the changes it sent: every
	// change a round delivers was made after it.
	last time.Time
	// failLog gates the failures' warning: one line a second.
	failLog logging.Gate
	// spares are sent batches' states, emptied, for the next round to
	// fill: a round sends about as many as the last.
	spares [][]limiter.KeyState
	// boots are the backups' boots, by id, as their last answers said.
	boots map[string]string
}

// maxSpare bounds the states a round keeps for the next: a whole
// partition's copy may be far larger than the rounds that follow.
const maxSpare = 1 << 16

// NewReplicator returns a Replicator over d.
func NewReplicator(d Deps) (*Replicator, error) {
	switch {
	case d.Self == "":
		return nil, errors.New("replica: Deps.Self must not be empty")
	case d.Store == nil || d.Peers == nil || d.Ring == nil || d.Now == nil:
		return nil, errors.New("replica: Deps.Store, Peers, Ring and Now are required")
	case !d.Store.Config().TrackChanges:
		return nil, errors.New("replica: Deps.Store must track changes (limiter.Config.TrackChanges)")
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Replicator{d: d, log: log, synced: make([]string, d.Store.Transfer().Partitions()), last: d.Now(),
		boots: map[string]string{}}, nil
}

// batch is what one round sends one backup.
type batch struct {
	to    ring.Member
	parts []int // partitions in it
	peer.Replication
}

// Round sends each backup what changed since the previous round in the
// partitions this node owns, or their whole state where the backup is
// new or missed a round, and returns how many states it could not
// deliver (they go whole in the next round). It takes the changes from
// the store's journal itself; a node that also persists them takes them
// once and calls RoundWith.
func (r *Replicator) Round(ctx context.Context) (failed int) {
	return r.RoundWith(ctx, r.d.Store.Changes().TakeAll(nil, r.d.Now()))
}

// RoundWith is Round with the changes already taken: changed is, by
// partition, what the store's journal gave since the previous round
// (limiter.Changes.TakeAll, just before).
func (r *Replicator) RoundWith(ctx context.Context, changed [][]limiter.KeyState) (failed int) {
	since := r.last
	r.last = r.d.Now()
	for _, b := range r.collect(changed) {
		failed += r.deliver(ctx, b, since)
		r.keep(b)
	}
	return failed
}

// deliver sends b and returns how many states it could not deliver; a
// failure sends its partitions whole at the next round.
func (r *Replicator) deliver(ctx context.Context, b *batch, since time.Time) (failed int) {
	err := r.send(ctx, b)
	if err == nil {
		r.d.Metrics.sent(len(b.States), 0, r.d.Now().Sub(since))
		return 0
	}
	for _, p := range b.parts {
		r.synced[p] = ""
	}
	r.d.Metrics.sent(0, len(b.States), 0)
	if r.failLog.Allow() {
		r.log.Warn("replication to a backup failed; its partitions go whole at the next round that reaches it", "backup", b.to.ID,
			"partitions", len(b.parts), "keys", len(b.States), "err", err)
	}
	return len(b.States)
}

// keep offers b's states, sent or not, to the next round.
func (r *Replicator) keep(b *batch) {
	if c := cap(b.States); c > 0 && c <= maxSpare {
		clear(b.States) // the keys and logs are the receiver's now, or garbage
		r.spares = append(r.spares, b.States[:0])
	}
}

// collect takes, for every partition this node owns, what its backup
// needs: the changes since the last round, or the whole partition. The
// changes were taken before a whole copy is, so a change made meanwhile
// is sent again rather than lost.
func (r *Replicator) collect(changed [][]limiter.KeyState) map[string]*batch {
	rg := r.d.Ring()
	now := r.d.Now()
	out := map[string]*batch{}
	for p := range r.synced {
		backup, ok := rg.Backup(p)
		if !ok || rg.PartitionOwner(p).ID != r.d.Self {
			r.synced[p] = "" // not ours to replicate; handoff moves it
			continue
		}
		b := out[backup.ID]
		if b == nil {
			b = &batch{to: backup}
			if n := len(r.spares); n > 0 {
				b.States, r.spares = r.spares[n-1], r.spares[:n-1]
			}
			out[backup.ID] = b
		}
		if r.synced[p] != backup.ID {
			b.Whole = append(b.Whole, p)
			b.States = append(b.States, r.d.Store.Transfer().SnapshotPartition(p, now)...)
			b.parts = append(b.parts, p)
			r.synced[p] = backup.ID
			continue
		}
		if len(changed[p]) > 0 {
			b.States = append(b.States, changed[p]...)
			b.parts = append(b.parts, p)
		}
	}
	for id, b := range out {
		if len(b.Whole) == 0 && len(b.States) == 0 {
			delete(out, id)
		}
	}
	r.forgetBoots(rg)
	return out
}

// forgetBoots drops the boots of members no longer in rg: one that comes
// back is sent its partitions whole, as a new backup is.
func (r *Replicator) forgetBoots(rg *ring.Ring) {
	if len(r.boots) <= len(rg.Members()) {
		return
	}
	in := map[string]bool{}
	for _, m := range rg.Members() {
		in[m.ID] = true
	}
	for id := range r.boots {
		if !in[id] {
			delete(r.boots, id)
		}
	}
}

// send delivers b in chunks under limiter.ChunkBytes; the partitions sent whole
// go with the first.
func (r *Replicator) send(ctx context.Context, b *batch) error {
	to := peer.Route{ID: b.to.ID, Addr: b.to.Addr}
	states, whole := b.States, b.Whole
	for first := true; first || len(states) > 0; first = false {
		n := limiter.ChunkLen(states)
		rid := peer.NewRequestID()
		// Stamped after the states were taken: none is later than Sent,
		// which the backup rebases them by (limiter.Rebase).
		done, err := r.d.Peers.Replicate(peer.WithRequestID(ctx, rid), to,
			peer.Replication{Sent: r.d.Now(), Whole: whole, States: states[:n], Boot: r.d.Boot})
		if err != nil {
			return err
		}
		r.resync(to.ID, done)
		states, whole = states[n:], nil
	}
	return nil
}

// resync sends whole, next round, what backup's answer says it lacks:
// every partition it backs if it restarted (a boot of its own since its
// last answer), and the partitions it said it holds no whole copy of
// (it restored them from its disk, or promoted them): the changes alone
// would leave it a part of their state.
func (r *Replicator) resync(backup string, done peer.Replicated) {
	if was, ok := r.boots[backup]; ok && was != done.Boot {
		for p, id := range r.synced {
			if id == backup {
				r.synced[p] = ""
			}
		}
	}
	r.boots[backup] = done.Boot
	for _, p := range done.Unsynced {
		if p >= 0 && p < len(r.synced) { // the backup's word: checked
			r.synced[p] = ""
		}
	}
}
