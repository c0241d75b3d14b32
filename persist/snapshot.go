package persist

import (
	"errors"
	"fmt"

	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

var errClosed = errors.New("persist: the log is closed")

// Snapshot writes every state the node holds to a new snapshot. It
// starts a new segment first, so that the snapshot with the segments from
// it on hold every change, whatever the snapshot reads of states that
// change while it is written (replaying a later record over the state
// it read is the same state, or a later one). Once the snapshot is
// durable, by a rename, the files before it are deleted. While failing,
// a snapshot that succeeds is what resumes the appends: it holds what
// was not written meanwhile.
func (l *Log) Snapshot() error {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	if l.closed {
		return errClosed
	}
	if l.src == nil {
		return errors.New("persist: a snapshot needs Deps.Source")
	}
	l.mu.Lock()
	wasFailing := l.failing != nil
	l.mu.Unlock()
	_ = l.syncLocked() // the segment before the snapshot, for the crash that comes first
	seq := l.seq + 1
	if err := l.startSegment(seq); err != nil {
		l.fail(fmt.Errorf("starting %s: %w", segmentName(seq), err))
		return err
	}
	l.mu.Lock()
	l.since = 0
	l.mu.Unlock()
	start := l.now()
	keys, err := l.writeSnapshot(seq)
	if err != nil {
		l.fail(fmt.Errorf("writing %s: %w", snapshotName(seq), err))
		return err
	}
	l.metrics.snapshot(keys, l.now().Sub(start))
	l.removeBefore(seq)
	l.metrics.setFailing(false)
	if wasFailing {
		l.log.Info("persist: writing the data directory again; a snapshot holds what was not written meanwhile", "dir", l.cfg.Dir)
	}
	return nil
}

// fail is failLocked, taking mu.
func (l *Log) fail(err error) {
	l.mu.Lock()
	l.failLocked(err)
	l.mu.Unlock()
}

// writeSnapshot writes snapshot seq, by a temporary file and a rename,
// and returns how many states it holds.
func (l *Log) writeSnapshot(seq uint64) (keys int, err error) {
	tmp := snapshotName(seq) + tmpSuffix
	f, err := l.fs.Create(tmp)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = l.fs.Remove(tmp)
		}
	}()
	w := &recordWriter{f: f}
	if keys, err = l.writeStates(w); err != nil {
		return 0, err
	}
	w.write(kindEnd, nil)
	if w.err != nil {
		return 0, w.err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if err := l.fs.Rename(tmp, snapshotName(seq)); err != nil {
		return 0, err
	}
	return keys, l.fs.SyncDir()
}

// writeStates writes every state of the Source, in chunks under
// limiter.ChunkBytes, and returns how many it wrote.
func (l *Log) writeStates(w *recordWriter) (int, error) {
	keys := 0
	err := l.src.OwnStates(func(states []limiter.KeyState) error {
		for len(states) > 0 {
			n := limiter.ChunkLen(states)
			w.message(kindOwn, &pb.ReplicateRequest{States: protoconv.ToProtoKeyStates(states[:n])})
			keys += n
			states = states[n:]
		}
		return w.err
	})
	if err != nil {
		return 0, err
	}
	err = l.src.Replicas(func(origin string, r peer.Replication) error {
		w.message(kindReplica, protoconv.ToProtoReplicate(origin, r))
		keys += len(r.States)
		return w.err
	})
	return keys, err
}

// recordWriter writes records to a file, keeping the first error.
type recordWriter struct {
	f   File
	buf []byte
	err error
}

func (w *recordWriter) message(kind byte, m *pb.ReplicateRequest) {
	if w.err != nil {
		return
	}
	body, err := m.MarshalVT()
	if err != nil {
		w.err = err
		return
	}
	w.write(kind, body)
}

func (w *recordWriter) write(kind byte, body []byte) {
	if w.err != nil {
		return
	}
	w.buf = appendRecord(w.buf[:0], kind, body)
	_, w.err = w.f.Write(w.buf)
}

// removeBefore deletes the segments and snapshots that snapshot seq
// covers: a failure is only logged (the files are read, and superseded,
// at the next start).
func (l *Log) removeBefore(seq uint64) {
	names, err := l.fs.List()
	if err != nil {
		return
	}
	for _, n := range names {
		s, ok := seqOf(n, segmentPrefix, segmentSuffix)
		if !ok {
			s, ok = seqOf(n, snapshotPrefix, snapshotSuffix)
		}
		if ok && s < seq {
			if err := l.fs.Remove(n); err != nil {
				l.log.Debug("persist: removing a file a snapshot covers", "file", n, "err", err)
			}
		}
	}
	_ = l.fs.SyncDir()
}
