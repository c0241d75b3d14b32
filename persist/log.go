package persist

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// The files of a data directory, besides the manifest: segments and
// snapshots, each numbered by the segment sequence. Snapshot K holds
// every state as of the moment segment K was started; K and the
// segments after it hold every change since.
const (
	segmentPrefix  = "seg-"
	segmentSuffix  = ".log"
	snapshotPrefix = "snap-"
	snapshotSuffix = ".snap"
	tmpSuffix      = ".tmp"
)

func segmentName(seq uint64) string {
	return fmt.Sprintf("%s%016x%s", segmentPrefix, seq, segmentSuffix)
}
func snapshotName(seq uint64) string {
	return fmt.Sprintf("%s%016x%s", snapshotPrefix, seq, snapshotSuffix)
}

// seqOf reads the sequence number of a file named prefix + 16 hex digits
// + suffix.
func seqOf(name, prefix, suffix string) (uint64, bool) {
	if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix), 16, 64)
	return n, err == nil
}

// Source is what a snapshot writes: every state the node holds. Both
// methods are called from the Log's snapshotting goroutine, while the
// node keeps deciding; each yield's slice may be reused after it returns.
type Source interface {
	// OwnStates yields the node's own states, a partition at a time.
	OwnStates(yield func([]limiter.KeyState) error) error
	// Replicas yields the replicas the node keeps, a partition at a
	// time (r.Whole names it, r.Boot the sender's boot), with the member
	// that sent them.
	Replicas(yield func(origin string, r peer.Replication) error) error
}

// Deps is what a Log works with.
type Deps struct {
	// FS holds the files. Nil: the machine's, at Config.Dir.
	FS FS
	// Source is what snapshots read. Required for Serve and Close.
	Source Source
	// Now is a local clock for the intervals. Nil: time.Now.
	Now func() time.Time
	// Logger receives what was restored and dropped, and the failures
	// (each at most once a second). Nil: slog.Default().
	Logger *slog.Logger
	// Metrics counts what the Log does; nil counts nothing.
	Metrics *Metrics
}

// Log is a data directory open for appending. Own, Replicated and
// Dropped are safe for concurrent use, and never block on the disk's
// sync: they write to the current segment (the page cache), and Serve
// syncs it. A failure to write (a full disk) stops the appends, and is
// said (peerlimit_persist_failing, a log line); Serve then writes a
// snapshot every SyncInterval until one succeeds, which closes the gap,
// and appends resume.
type Log struct {
	cfg     Config
	fs      FS
	src     Source
	now     func() time.Time
	log     *slog.Logger
	metrics *Metrics
	failLog logging.Gate

	// snapMu serialises snapshots, syncs and Close: what changes the
	// segment in use, or syncs it, outside mu.
	snapMu sync.Mutex

	mu       sync.Mutex
	seg      File   // nil while failing or closed
	seq      uint64 // the segment in use's
	since    int64  // bytes written since the last snapshot
	unsynced bool   // written since the last sync
	failing  error  // why appends stopped; nil while they run
	closed   bool
	buf      []byte
	lock     io.Closer // the directory's, held until Close
}

// Open opens the data directory cfg.Dir, refuses it if it is not id's
// (ErrNotOurs) or cannot be locked, reads back what it holds (Restored)
// and starts a new segment for what follows.
func Open(cfg Config, id Identity, d Deps) (*Log, Restored, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Restored{}, err
	}
	if id.Node == "" {
		return nil, Restored{}, errors.New("persist: Identity.Node is required")
	}
	l := &Log{cfg: cfg, fs: d.FS, src: d.Source, now: d.Now, log: d.Logger, metrics: d.Metrics}
	if l.fs == nil {
		l.fs = OS{Dir: cfg.Dir}
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	lock, err := l.fs.Lock()
	if err != nil {
		return nil, Restored{}, fmt.Errorf("persist: locking %s: %w", cfg.Dir, err)
	}
	names, err := l.fs.List()
	if err != nil {
		err = fmt.Errorf("persist: reading %s: %w", cfg.Dir, err)
	} else {
		err = checkManifest(l.fs, cfg.Dir, id, names)
	}
	if err != nil {
		lock.Close()
		return nil, Restored{}, err
	}
	l.lock = lock
	start := l.now()
	restored, last := restore(l.fs, names, l.log)
	restored.Took = l.now().Sub(start)
	l.metrics.restored(restored)
	if err := l.startSegment(last + 1); err != nil {
		lock.Close()
		return nil, Restored{}, fmt.Errorf("persist: starting a segment in %s: %w", cfg.Dir, err)
	}
	l.removeTemporaries(names)
	return l, restored, nil
}

// Own appends states of the node's own store, as they are now (a round's
// changes, tombstones among them).
func (l *Log) Own(states []limiter.KeyState) {
	if len(states) > 0 {
		l.append(kindOwn, &pb.ReplicateRequest{States: protoconv.ToProtoKeyStates(states)})
	}
}

// Replicated appends a replication origin made to this node, as the
// replica store applied it: its states already on this node's clock (the
// node rebased them from origin's as they arrived, route.Handler), so it
// is written with no sent stamp, and a restore applies it as it is,
// never rebasing it a second time.
func (l *Log) Replicated(origin string, r peer.Replication) {
	r.Sent = time.Time{}
	l.append(kindReplica, protoconv.ToProtoReplicate(origin, r))
}

// Dropped appends that the replicas of partitions were dropped (their
// owner handed them off, or this node promoted or stopped backing them).
func (l *Log) Dropped(partitions []int) {
	if len(partitions) > 0 {
		l.append(kindDrop, protoconv.ToProtoReplicate("", peer.Replication{Whole: partitions}))
	}
}

// append writes one record to the segment in use; while failing, it
// counts it as dropped.
func (l *Log) append(kind byte, m *pb.ReplicateRequest) {
	body, err := m.MarshalVT()
	if err != nil { // not for a message of ours
		l.log.Error("persist: encoding a record", "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seg == nil {
		l.metrics.droppedRecord()
		return
	}
	l.buf = appendRecord(l.buf[:0], kind, body)
	if _, err := l.seg.Write(l.buf); err != nil {
		l.failLocked(fmt.Errorf("writing %s: %w", segmentName(l.seq), err))
		l.metrics.droppedRecord()
		return
	}
	l.since += int64(len(l.buf))
	l.unsynced = true
	l.metrics.wrote(len(l.buf))
}

// failLocked stops the appends for err. Requires l.mu held.
func (l *Log) failLocked(err error) {
	if l.seg != nil {
		_ = l.seg.Close()
		l.seg = nil
	}
	if l.failing == nil {
		l.log.Warn("persist: cannot write the data directory; counts are kept in memory only, and a snapshot is tried every sync interval until one succeeds",
			"dir", l.cfg.Dir, "err", err, "disk_full", IsNoSpace(err))
	}
	l.failing = err
	l.metrics.setFailing(true)
}

// Sync makes what was written durable. While failing it does nothing and
// returns why appends stopped.
func (l *Log) Sync() error {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	return l.syncLocked()
}

// syncLocked syncs the segment in use, outside mu: appends go on while
// the disk syncs. Requires l.snapMu held, which keeps the segment from
// changing meanwhile.
func (l *Log) syncLocked() error {
	l.mu.Lock()
	seg, unsynced, failing := l.seg, l.unsynced, l.failing
	l.unsynced = false
	l.mu.Unlock()
	if failing != nil {
		return failing
	}
	if seg == nil || !unsynced {
		return nil
	}
	start := l.now()
	err := seg.Sync()
	l.metrics.synced(l.now().Sub(start))
	if err != nil {
		l.mu.Lock()
		l.failLocked(fmt.Errorf("syncing %s: %w", segmentName(l.seq), err))
		l.mu.Unlock()
		return err
	}
	return nil
}

// Serve syncs every SyncInterval and snapshots every SnapshotInterval,
// or sooner once the segments since the last snapshot pass
// SnapshotBytes, until stop is closed. While failing, it tries a
// snapshot at every sync.
func (l *Log) Serve(stop <-chan struct{}) {
	sync := time.NewTicker(l.cfg.SyncInterval)
	defer sync.Stop()
	last := l.now()
	for {
		select {
		case <-stop:
			return
		case <-sync.C:
		}
		l.mu.Lock()
		failing, big := l.failing != nil, l.since >= l.cfg.SnapshotBytes
		l.mu.Unlock()
		if failing || big || l.now().Sub(last) >= l.cfg.SnapshotInterval {
			if err := l.Snapshot(); err == nil {
				last = l.now()
			}
			continue
		}
		_ = l.Sync()
	}
}

// Close syncs what was written and closes the segment: the node's last
// round must come first. A graceful stop loses nothing. Safe to call
// twice.
func (l *Log) Close() error {
	l.snapMu.Lock()
	defer l.snapMu.Unlock()
	err := l.syncLocked()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seg != nil {
		err = errors.Join(err, l.seg.Close())
		l.seg = nil
	}
	if !l.closed {
		err = errors.Join(err, l.lock.Close())
	}
	l.closed = true
	if l.failing != nil {
		return fmt.Errorf("persist: %s: %w", l.cfg.Dir, l.failing)
	}
	return err
}

// Abandon closes the files and releases the directory without syncing
// anything more, as a process killed now would: what was written stays
// (the page cache), nothing else. For a node that is killed, in tests
// and chaos runs.
func (l *Log) Abandon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if l.seg != nil {
		_ = l.seg.Close()
		l.seg = nil
	}
	_ = l.lock.Close()
	l.closed = true
}

// startSegment makes segment seq the one appended to, and the data
// directory's entry for it durable.
func (l *Log) startSegment(seq uint64) error {
	f, err := l.fs.Create(segmentName(seq))
	if err != nil {
		return err
	}
	if err := l.fs.SyncDir(); err != nil {
		_ = f.Close()
		return err
	}
	l.mu.Lock()
	old := l.seg
	l.seg, l.seq, l.failing, l.unsynced = f, seq, nil, false
	l.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

// removeTemporaries deletes what a crash left half written.
func (l *Log) removeTemporaries(names []string) {
	for _, n := range names {
		if strings.HasSuffix(n, tmpSuffix) {
			_ = l.fs.Remove(n)
		}
	}
}
