package persist

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Restored is what a data directory held.
type Restored struct {
	// Own is the last state written of every key of the node's own
	// store, tombstones left out: merged into an empty store, they are
	// the store as it was.
	Own []limiter.KeyState
	// Replicas are the replicas' changes, to apply in order to an empty
	// replica store (Apply, or Drop for a ReplicaOp.Drop).
	Replicas []ReplicaOp
	// Files are the files read, in order.
	Files []string
	// Records is how many records they held.
	Records int
	// Dropped says, for each file read only in part, what was dropped
	// and why: a crash cuts a segment's last record short, and a disk
	// that flips bits fails a checksum.
	Dropped []string
	// Took is how long reading took.
	Took time.Duration
}

// ReplicaOp is one change of the replica store: a replication from
// Origin, or, with Drop, the partitions Whole dropped.
type ReplicaOp struct {
	Origin string
	peer.Replication
	Drop bool
}

// restore reads the newest snapshot and the segments from it on, and
// returns what they hold and the highest sequence number in use.
func restore(f FS, names []string, log *slog.Logger) (Restored, uint64) {
	snaps, segs, last := files(names)
	var from uint64
	var read []string
	if len(snaps) > 0 {
		from = snaps[len(snaps)-1]
		read = append(read, snapshotName(from))
	}
	for _, s := range segs {
		if s >= from {
			read = append(read, segmentName(s))
		}
	}
	r := replay{own: map[limiter.StateID]limiter.KeyState{}}
	for i, name := range read {
		r.file(f, name, i == 0 && len(snaps) > 0, log)
	}
	out := r.Restored
	out.Files = read
	out.Own = r.states()
	return out, last
}

// files returns the snapshots' and the segments' sequence numbers, each
// sorted, and the highest of all.
func files(names []string) (snaps, segs []uint64, last uint64) {
	for _, n := range names {
		if s, ok := seqOf(n, snapshotPrefix, snapshotSuffix); ok {
			snaps = append(snaps, s)
			last = max(last, s)
		}
		if s, ok := seqOf(n, segmentPrefix, segmentSuffix); ok {
			segs = append(segs, s)
			last = max(last, s)
		}
	}
	slices.Sort(snaps)
	slices.Sort(segs)
	return snaps, segs, last
}

// replay applies records in order: a key's later state replaces its
// earlier one. A snapshot holds one state per key, so its states are
// kept in a list (base), and only the segments' go through a map: a
// million keys restored, a map of a second's changes rather than of the
// million (2.1 s → see docs/benchmarks.md, "Persistence").
type replay struct {
	Restored
	base     [][]limiter.KeyState // the snapshot's, a record at a time: no copying as it grows
	nbase    int
	snapshot bool                                 // replaying the snapshot
	own      map[limiter.StateID]limiter.KeyState // the segments', tombstones among them
}

// states returns every key's last state: the segments' where they have
// one, else the snapshot's; tombstones left out.
func (r *replay) states() []limiter.KeyState {
	out := make([]limiter.KeyState, 0, r.nbase+len(r.own))
	for _, chunk := range r.base {
		for _, ks := range chunk {
			if _, later := r.own[ks.ID()]; len(r.own) == 0 || !later {
				out = append(out, ks)
			}
		}
	}
	for _, ks := range r.own {
		if !ks.Empty() {
			out = append(out, ks)
		}
	}
	return out
}

// file replays name up to its first bad record. A snapshot must end with
// its end record; one that does not was cut short, which is said too.
// What is dropped is logged and kept in Dropped; nothing here fails the
// start.
func (r *replay) file(f FS, name string, snapshot bool, log *slog.Logger) {
	rc, err := f.Open(name)
	if err != nil {
		r.drop(log, name, fmt.Sprintf("unreadable: %v", err))
		return
	}
	defer rc.Close()
	rd := newReader(rc)
	r.snapshot = snapshot
	defer func() { r.snapshot = false }()
	ended := false
	for {
		kind, body, err := rd.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			r.drop(log, name, fmt.Sprintf("%v; the rest of the file is dropped", err))
			return
		}
		if kind == kindEnd {
			ended = true
			continue
		}
		if err := r.record(kind, body); err != nil {
			r.drop(log, name, fmt.Sprintf("record at offset %d: %v; the rest of the file is dropped", rd.off, err))
			return
		}
		r.Records++
	}
	if snapshot && !ended {
		r.drop(log, name, "the snapshot has no end record: it was cut short")
	}
}

// record applies one record.
func (r *replay) record(kind byte, body []byte) error {
	var m pb.ReplicateRequest
	if err := m.UnmarshalVT(body); err != nil {
		return err
	}
	switch kind {
	case kindOwn:
		states := protoconv.FromProtoKeyStates(m.GetStates())
		if r.snapshot {
			r.base, r.nbase = append(r.base, states), r.nbase+len(states)
			break
		}
		for _, ks := range states {
			r.own[ks.ID()] = ks // a tombstone too: it hides the snapshot's state
		}
	case kindReplica:
		r.Replicas = append(r.Replicas, ReplicaOp{Origin: m.GetOrigin(), Replication: protoconv.FromProtoReplicate(&m)})
	case kindDrop:
		r.Replicas = append(r.Replicas, ReplicaOp{Replication: protoconv.FromProtoReplicate(&m), Drop: true})
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	return nil
}

func (r *replay) drop(log *slog.Logger, name, what string) {
	r.Dropped = append(r.Dropped, name+": "+what)
	log.Warn("persist: part of a data file could not be read; what follows it in that file is not restored", "file", name, "what", what)
}
