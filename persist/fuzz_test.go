package persist_test

import (
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/internal/testkit/crashfs"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/persist"
)

// FuzzRestore: whatever bytes a segment holds, Open neither fails nor
// panics, and restores only states a record whose checksum matched held.
func FuzzRestore(f *testing.F) {
	good := crashfs.New()
	cfg := persist.DefaultConfig()
	cfg.Dir = "/data"
	l, _, err := persist.Open(cfg, me, persist.Deps{FS: good})
	if err != nil {
		f.Fatal(err)
	}
	month, err := limiter.NewCalendar(limiter.CalendarMonth, "Europe/Paris")
	if err != nil {
		f.Fatal(err)
	}
	l.Own([]limiter.KeyState{counter("a", 1), {Key: "l", Window: time.Second, Algorithm: limiter.SlidingWindowLog, Log: []int64{5, 6}},
		{Key: "g", Window: time.Second, Algorithm: limiter.GCRA, TAT: 1_750_000_000_123_456_789},
		// A month's quota: its calendar (unit and zone) is on disk too.
		{Key: "c", Algorithm: limiter.SlidingWindowCounter, Calendar: month, WindowID: 1_748_728_800_000, Curr: 7}})
	l.Replicated("n2", peer.Replication{Whole: []int{1}, States: []limiter.KeyState{counter("r", 2)}})
	l.Dropped([]int{1})
	_ = l.Close()
	seg := good.Bytes("seg-0000000000000001.log")
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	flipped := append([]byte(nil), seg...)
	flipped[10] ^= 1
	f.Add(flipped)
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fs := crashfs.New()
		fs.SetBytes("MANIFEST", good.Bytes("MANIFEST"))
		fs.SetBytes("seg-0000000000000001.log", b)
		l, r, err := persist.Open(cfg, me, persist.Deps{FS: fs})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		for _, ks := range r.Own {
			if ks.Empty() {
				t.Fatalf("a tombstone restored: %+v", ks)
			}
		}
	})
}
