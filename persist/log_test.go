package persist_test

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/crashfs"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/persist"
)

var me = persist.Identity{Cluster: "c1", Node: "n1"}

// source is a node's states as a snapshot reads them: the test's model of
// the store and the replica store.
type source struct {
	mu       sync.Mutex
	own      map[limiter.StateID]limiter.KeyState
	replicas map[int][]limiter.KeyState
	origin   map[int]string
}

func newSource() *source {
	return &source{own: map[limiter.StateID]limiter.KeyState{}, replicas: map[int][]limiter.KeyState{}, origin: map[int]string{}}
}

func (s *source) set(states ...limiter.KeyState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ks := range states {
		if ks.Empty() {
			delete(s.own, ks.ID())
		} else {
			s.own[ks.ID()] = ks
		}
	}
}

func (s *source) OwnStates(yield func([]limiter.KeyState) error) error {
	s.mu.Lock()
	states := make([]limiter.KeyState, 0, len(s.own))
	for _, ks := range s.own {
		states = append(states, ks)
	}
	s.mu.Unlock()
	return yield(states)
}

func (s *source) Replicas(yield func(origin string, r peer.Replication) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, states := range s.replicas {
		if err := yield(s.origin[p], peer.Replication{Whole: []int{p}, States: states}); err != nil {
			return err
		}
	}
	return nil
}

func counter(key string, curr int64) limiter.KeyState {
	return limiter.KeyState{Key: key, Window: time.Minute, Algorithm: limiter.SlidingWindowCounter, WindowID: 29_000_000, Curr: curr}
}

func open(t *testing.T, fs persist.FS, src persist.Source, id persist.Identity) (*persist.Log, persist.Restored) {
	t.Helper()
	cfg := persist.DefaultConfig()
	cfg.Dir = "/data"
	l, r, err := persist.Open(cfg, id, persist.Deps{FS: fs, Source: src, Logger: slog.New(slog.NewTextHandler(testlog.New(t), nil))})
	require.NoError(t, err)
	return l, r
}

// byKey returns the restored own states by key.
func byKey(r persist.Restored) map[string]int64 {
	out := map[string]int64{}
	for _, ks := range r.Own {
		out[ks.Key] = ks.Curr
	}
	return out
}

// What a Log was given comes back: a key's last state, tombstones
// dropping keys, and the replicas' changes in order.
func TestALogRestoresWhatItWasGiven(t *testing.T) {
	fs := crashfs.New()
	l, r := open(t, fs, newSource(), me)
	assert.Empty(t, r.Own)
	l.Own([]limiter.KeyState{counter("a", 1), counter("b", 1)})
	l.Own([]limiter.KeyState{counter("a", 2), {Key: "b", Window: time.Minute}}) // b's tombstone
	l.Replicated("n2", peer.Replication{Whole: []int{3}, States: []limiter.KeyState{counter("r", 7)}})
	l.Dropped([]int{3})
	require.NoError(t, l.Close())

	_, r = open(t, fs, newSource(), me)
	assert.Equal(t, map[string]int64{"a": 2}, byKey(r))
	require.Len(t, r.Replicas, 2)
	assert.Equal(t, "n2", r.Replicas[0].Origin)
	assert.Equal(t, []int{3}, r.Replicas[0].Whole)
	assert.Equal(t, int64(7), r.Replicas[0].States[0].Curr)
	assert.True(t, r.Replicas[1].Drop)
	assert.Equal(t, []int{3}, r.Replicas[1].Whole)
	assert.Empty(t, r.Dropped)
}

// A GCRA bucket's TAT is written and restored to the nanosecond, as
// its own state and as a replica's; its tombstone (TAT 0) drops it.
func TestALogRestoresGCRABuckets(t *testing.T) {
	fs := crashfs.New()
	l, _ := open(t, fs, newSource(), me)
	bucket := func(key string, tat int64) limiter.KeyState {
		return limiter.KeyState{Key: key, Window: time.Second, Algorithm: limiter.GCRA, TAT: tat}
	}
	l.Own([]limiter.KeyState{bucket("a", 1_750_000_000_123_456_789), bucket("b", 1_750_000_000_000_000_001)})
	l.Own([]limiter.KeyState{bucket("b", 0)}) // b's tombstone
	l.Replicated("n2", peer.Replication{Whole: []int{3}, States: []limiter.KeyState{bucket("r", 1_750_000_000_999_999_999)}})
	require.NoError(t, l.Close())

	_, r := open(t, fs, newSource(), me)
	assert.Equal(t, []limiter.KeyState{bucket("a", 1_750_000_000_123_456_789)}, r.Own)
	require.Len(t, r.Replicas, 1)
	assert.Equal(t, []limiter.KeyState{bucket("r", 1_750_000_000_999_999_999)}, r.Replicas[0].States)
}

// A replication is journaled as the replica store applied it, already on
// this node's clock (the node rebased it on arrival): with no sent stamp,
// so that a restore applies it as it is and never rebases it again.
func TestAReplicationIsWrittenWithoutItsStamp(t *testing.T) {
	fs := crashfs.New()
	l, _ := open(t, fs, newSource(), me)
	l.Replicated("n2", peer.Replication{Sent: time.UnixMilli(1_700_000_000_000), States: []limiter.KeyState{counter("r", 7)}})
	require.NoError(t, l.Close())

	_, r := open(t, fs, newSource(), me)
	require.Len(t, r.Replicas, 1)
	assert.True(t, r.Replicas[0].Sent.IsZero(), "no stamp: %v", r.Replicas[0].Sent)
	assert.Equal(t, []limiter.KeyState{counter("r", 7)}, r.Replicas[0].States, "the states as written")
}

// A snapshot holds every state; the segments before it are deleted, and
// what was appended after it is replayed over it.
func TestASnapshotReplacesTheSegmentsBeforeIt(t *testing.T) {
	fs := crashfs.New()
	src := newSource()
	l, _ := open(t, fs, src, me)
	for i := range 100 {
		ks := counter(fmt.Sprint("k", i), int64(i+1))
		src.set(ks)
		l.Own([]limiter.KeyState{ks})
	}
	src.replicas[5], src.origin[5] = []limiter.KeyState{counter("r", 3)}, "n3"
	require.NoError(t, l.Snapshot())
	after := counter("k0", 50)
	src.set(after)
	l.Own([]limiter.KeyState{after, {Key: "k1", Window: time.Minute}}) // k1 reset: its tombstone

	names, _ := fs.List()
	segs, snaps := 0, 0
	for _, n := range names {
		segs += btoi(strings.HasPrefix(n, "seg-"))
		snaps += btoi(strings.HasPrefix(n, "snap-"))
	}
	assert.Equal(t, 1, segs, "the segment before the snapshot is deleted: %v", names)
	assert.Equal(t, 1, snaps, "%v", names)

	_, r := open(t, fs.Kill(), newSource(), me)
	got := byKey(r)
	assert.Len(t, got, 99)
	assert.Equal(t, int64(50), got["k0"], "the append after the snapshot replaces its state")
	assert.NotContains(t, got, "k1", "a tombstone after the snapshot hides its state")
	assert.Equal(t, int64(100), got["k99"])
	require.Len(t, r.Replicas, 1)
	assert.Equal(t, "n3", r.Replicas[0].Origin)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The bounds: a process killed loses nothing that was written, a machine
// that loses power loses what was not synced, and no more.
func TestAKillLosesNothingWrittenAPowerLossWhatWasNotSynced(t *testing.T) {
	fs := crashfs.New()
	l, _ := open(t, fs, newSource(), me)
	l.Own([]limiter.KeyState{counter("a", 1)})
	require.NoError(t, l.Sync())
	l.Own([]limiter.KeyState{counter("a", 2), counter("b", 1)})

	_, killed := open(t, fs.Kill(), newSource(), me)
	assert.Equal(t, map[string]int64{"a": 2, "b": 1}, byKey(killed))
	_, lost := open(t, fs.Crash(), newSource(), me)
	assert.Equal(t, map[string]int64{"a": 1}, byKey(lost), "what was synced, and nothing since")
}

// A crash in the middle of a write leaves a record cut short: the file is
// read up to it, the node starts, and says what it dropped.
func TestATornWriteIsDroppedAndSaid(t *testing.T) {
	fs := crashfs.New()
	l, _ := open(t, fs, newSource(), me)
	l.Own([]limiter.KeyState{counter("a", 1)})
	fs.Inject(func(op crashfs.Op) error {
		if op.Kind == "write" {
			return crashfs.Torn{Keep: op.Len / 2}
		}
		return nil
	})
	l.Own([]limiter.KeyState{counter("a", 2)})
	_, r := open(t, fs.Kill(), newSource(), me)
	assert.Equal(t, map[string]int64{"a": 1}, byKey(r))
	require.Len(t, r.Dropped, 1)
	assert.Contains(t, r.Dropped[0], "cut short")
}

// A bit flipped on disk fails the record's checksum: nothing from that
// record on in that file is restored, and later files still are, since
// each record is a whole state that was written: never a count higher
// than one written.
func TestAFlippedBitDropsTheRestOfItsFileOnly(t *testing.T) {
	fs := crashfs.New()
	src := newSource()
	l, _ := open(t, fs, src, me)
	src.set(counter("c", 9))
	require.NoError(t, l.Snapshot())
	l.Own([]limiter.KeyState{counter("d", 4)})
	require.NoError(t, l.Close())

	// The snapshot holds c, the segment after it d: corrupt the snapshot.
	snap := lastFile(t, fs, "snap-")
	b := fs.Bytes(snap)
	b[len(b)/2] ^= 0x40
	fs.SetBytes(snap, b)
	_, r := open(t, fs, newSource(), me)
	got := byKey(r)
	assert.Equal(t, int64(4), got["d"], "the segment after the bad snapshot is still read")
	for k, v := range got {
		assert.Contains(t, map[string]int64{"c": 9, "d": 4}, k, "only states that were written")
		assert.LessOrEqual(t, v, map[string]int64{"c": 9, "d": 4}[k])
	}
	require.NotEmpty(t, r.Dropped)
	assert.Contains(t, strings.Join(r.Dropped, "\n"), snap)
}

func lastFile(t *testing.T, fs *crashfs.FS, prefix string) string {
	t.Helper()
	names, err := fs.List()
	require.NoError(t, err)
	var out string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) && !strings.HasSuffix(n, ".tmp") {
			out = n
		}
	}
	require.NotEmpty(t, out, "no %s file in %v", prefix, names)
	return out
}

// A full disk stops the appends, which is said, and the node keeps
// serving; once space returns a snapshot holds what was not written, and
// the appends resume.
func TestAFullDiskStopsTheAppendsUntilASnapshotSucceeds(t *testing.T) {
	fs := crashfs.New()
	src := newSource()
	reg := prometheus.NewRegistry()
	m, err := persist.NewMetrics(reg)
	require.NoError(t, err)
	logs := testlog.NewCapture()
	cfg := persist.DefaultConfig()
	cfg.Dir = "/data"
	l, _, err := persist.Open(cfg, me, persist.Deps{FS: fs, Source: src, Logger: slog.New(logs), Metrics: m})
	require.NoError(t, err)
	failing := func() float64 { return metrictest.Value(t, reg, "peerlimit_persist_failing") }
	const cannot, again = "persist: cannot write the data directory", "persist: writing the data directory again"
	assert.Zero(t, failing())

	full := true
	var mu sync.Mutex
	fs.Inject(func(op crashfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		if full && (op.Kind == "write" || op.Kind == "create") {
			return syscall.ENOSPC
		}
		return nil
	})
	a := counter("a", 5)
	src.set(a)
	l.Own([]limiter.KeyState{a})
	err = l.Sync()
	require.Error(t, err)
	assert.True(t, persist.IsNoSpace(err), "%v", err)
	assert.True(t, errors.Is(l.Snapshot(), syscall.ENOSPC), "no snapshot while the disk is full")
	a = counter("a", 6)
	src.set(a)
	l.Own([]limiter.KeyState{a}) // dropped: appends stopped
	assert.Equal(t, 1.0, failing(), "raised while the disk is full")
	assert.Equal(t, 2.0, metrictest.Value(t, reg, "peerlimit_persist_dropped_records_total"))
	warned := logs.Find(cannot)
	require.Len(t, warned, 1, "said once, however many appends and snapshots fail")
	assert.Equal(t, slog.LevelWarn, warned[0].Level)
	assert.Equal(t, "true", warned[0].Attrs["disk_full"])
	assert.Equal(t, "/data", warned[0].Attrs["dir"])
	assert.Empty(t, logs.Find(again))

	mu.Lock()
	full = false
	mu.Unlock()
	require.NoError(t, l.Snapshot())
	assert.Zero(t, failing(), "cleared once a snapshot succeeds")
	require.Len(t, logs.Find(again), 1)
	assert.Equal(t, slog.LevelInfo, logs.Find(again)[0].Level)
	b := counter("b", 1)
	src.set(b)
	l.Own([]limiter.KeyState{b})
	require.NoError(t, l.Close())
	_, r := open(t, fs, newSource(), me)
	assert.Equal(t, map[string]int64{"a": 6, "b": 1}, byKey(r), "the snapshot holds what the full disk refused")
}

// A data directory is one node's: another node's, another cluster's, or
// one in another format is refused, naming the directory; so is one
// another process holds.
func TestADataDirectoryIsOneNodes(t *testing.T) {
	fs := crashfs.New()
	l, _ := open(t, fs, newSource(), me)
	cfg := persist.DefaultConfig()
	cfg.Dir = "/data"
	_, _, err := persist.Open(cfg, me, persist.Deps{FS: fs})
	require.Error(t, err, "locked by the first")
	assert.Contains(t, err.Error(), "/data")
	require.NoError(t, l.Close())

	for _, id := range []persist.Identity{{Cluster: "c1", Node: "n2"}, {Cluster: "c2", Node: "n1"}} {
		_, _, err := persist.Open(cfg, id, persist.Deps{FS: fs})
		require.ErrorIs(t, err, persist.ErrNotOurs, "%+v", id)
		assert.Contains(t, err.Error(), "/data")
	}
	fs.SetBytes("MANIFEST", []byte(`{"format":2,"cluster":"c1","node":"n1"}`))
	_, _, err = persist.Open(cfg, me, persist.Deps{FS: fs})
	require.ErrorIs(t, err, persist.ErrNotOurs)
	assert.Contains(t, err.Error(), "format 2")

	orphan := crashfs.New()
	orphan.SetBytes("seg-0000000000000001.log", nil)
	_, _, err = persist.Open(cfg, me, persist.Deps{FS: orphan})
	require.ErrorIs(t, err, persist.ErrNotOurs, "log files and no manifest")
}

// A snapshot a crash cut short is a temporary file, never read, and
// removed at the next start.
func TestAHalfWrittenSnapshotIsIgnored(t *testing.T) {
	fs := crashfs.New()
	src := newSource()
	l, _ := open(t, fs, src, me)
	l.Own([]limiter.KeyState{counter("a", 1)})
	require.NoError(t, l.Sync())
	src.set(counter("a", 1))
	fs.Inject(func(op crashfs.Op) error {
		if op.Kind == "rename" {
			return errors.New("crash before the rename")
		}
		return nil
	})
	require.Error(t, l.Snapshot())
	crashed := fs.Kill()
	crashed.SetBytes("snap-00000000000000ff.snap.tmp", []byte("half"))
	_, r := open(t, crashed, newSource(), me)
	assert.Equal(t, map[string]int64{"a": 1}, byKey(r))
	names, _ := crashed.List()
	assert.False(t, slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".tmp") }), "%v", names)
}

// The machine's filesystem: what was written is read back, and a second
// process cannot open a directory the first holds (flock).
func TestOnTheMachinesDisk(t *testing.T) {
	cfg := persist.DefaultConfig()
	cfg.Dir = t.TempDir()
	src := newSource()
	l, _, err := persist.Open(cfg, me, persist.Deps{Source: src})
	require.NoError(t, err)
	_, _, err = persist.Open(cfg, me, persist.Deps{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use by another process")
	src.set(counter("a", 3))
	l.Own([]limiter.KeyState{counter("a", 3)})
	require.NoError(t, l.Snapshot())
	l.Own([]limiter.KeyState{counter("b", 1)})
	require.NoError(t, l.Close())

	l, r, err := persist.Open(cfg, me, persist.Deps{})
	require.NoError(t, err)
	defer l.Close()
	assert.Equal(t, map[string]int64{"a": 3, "b": 1}, byKey(r))
}

// A calendar quota comes back with its calendar (unit and zone) and its
// period: restored, it counts against the same month in the same zone.
func TestACalendarStateComesBackWithItsCalendar(t *testing.T) {
	fs := crashfs.New()
	month, err := limiter.NewCalendar(limiter.CalendarMonth, "Europe/Paris")
	require.NoError(t, err)
	quota := limiter.KeyState{Key: "tenant:7", Algorithm: limiter.SlidingWindowCounter, Calendar: month, WindowID: 1_748_728_800_000, Curr: 7}
	l, _ := open(t, fs, newSource(), me)
	l.Own([]limiter.KeyState{quota})
	require.NoError(t, l.Close())
	_, r := open(t, fs, newSource(), me)
	assert.Equal(t, []limiter.KeyState{quota}, r.Own)
}
