package lease_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
)

var t0 = time.UnixMilli(1_750_000_000_000 - 1_750_000_000_000%3_600_000) // a whole hour: counter windows start here

func newBook(t *testing.T) (*lease.Book, *limiter.Store) {
	t.Helper()
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	net := memnet.New(1, time.Second)
	t.Cleanup(net.Close)
	b, err := lease.New(lease.DefaultConfig(), lease.Deps{Store: store, Peers: net.Join("n1")})
	require.NoError(t, err)
	return b, store
}

// asks checks req through b every gap from start, n times, asking only at
// the last, and returns what Take said then.
func asks(b *lease.Book, req limiter.Request, start time.Time, gap time.Duration, n int) (peer.LeaseWant, bool) {
	for i := range n - 1 {
		b.Take(start.Add(time.Duration(i)*gap), req, false)
	}
	_, _, want, ask := b.Take(start.Add(time.Duration(n-1)*gap), req, true)
	return want, ask
}

// A lease covers about MinHits checks at the key's rate: a warm key (5
// checks/s from this node) asks for 8 hits over 1.6 s; a hot one (200/s)
// for Duration, 250 ms, and the hits its rate needs, as before warm
// keys were leased; a key too slow for a lease of MaxDuration to cover
// MinHits (1/s) never asks.
func TestALeaseLastsAsLongAsMinHitsTakeAtTheKeysRate(t *testing.T) {
	b, _ := newBook(t)
	req := limiter.Request{Key: "warm", Limit: 1000, Window: time.Hour, Algorithm: limiter.SlidingWindowCounter, Hits: 1}
	want, ask := asks(b, req, t0, 200*time.Millisecond, 3)
	require.True(t, ask, "the third check of a 5/s key asks")
	assert.Equal(t, peer.LeaseWant{Hits: 8, Duration: 1600 * time.Millisecond}, want)

	req.Key = "hot"
	want, ask = asks(b, req, t0, 5*time.Millisecond, 21)
	require.True(t, ask)
	assert.Equal(t, peer.LeaseWant{Hits: 50, Duration: 250 * time.Millisecond}, want)

	req.Key = "cold"
	_, ask = asks(b, req, t0, time.Second, 10)
	assert.False(t, ask, "1/s × 5 s is under 8 checks: no lease pays")

	req.Key, req.Algorithm = "warm log", limiter.SlidingWindowLog
	req.Window = 10 * time.Second // leasable (≥ 20 × 250 ms), for 500 ms at most
	want, ask = asks(b, req, t0, 200*time.Millisecond, 3)
	require.True(t, ask)
	assert.Equal(t, peer.LeaseWant{Hits: 3, Duration: 500 * time.Millisecond}, want, "a log's lease is 1/20 of its window at most")
}

// The owner lends what is asked, capped: at its MaxDuration, a log's
// window ÷ 20 (a log under 20 × Duration is not leased at all), a
// counter's fixed-window end, each cut lending the hits the holder's rate
// needs for what is left; a request without a duration (a member from
// before durations were asked for) gets Config.Duration.
func TestTheOwnerCapsTheLeaseAskedFor(t *testing.T) {
	b, store := newBook(t)
	counter := limiter.Request{Key: "c", Limit: 1000, Window: time.Hour, Algorithm: limiter.SlidingWindowCounter, Hits: 1}

	g := b.Lend(t0, "n2", counter, peer.LeaseWant{Hits: 8, Duration: 1600 * time.Millisecond}, 999)
	assert.Equal(t, int64(8), g.Hits)
	assert.Equal(t, 1600*time.Millisecond, g.Duration, "a warm key's lease, as asked")

	g = b.Lend(t0, "n2", counter, peer.LeaseWant{Hits: 8, Duration: time.Minute}, 999)
	assert.Equal(t, 5*time.Second, g.Duration, "capped at MaxDuration")
	assert.Equal(t, int64(1), g.Hits, "⌈8 × 5 s ÷ 1 min⌉")

	g = b.Lend(t0, "n2", counter, peer.LeaseWant{Hits: 50}, 999)
	assert.Equal(t, peer.LeaseWant{Hits: 50, Duration: 250 * time.Millisecond}, peer.LeaseWant{Hits: g.Hits, Duration: g.Duration}, "no duration: Config.Duration")

	g = b.Lend(t0, "n2", counter, peer.LeaseWant{Hits: 500, Duration: time.Second}, 40)
	assert.Equal(t, int64(20), g.Hits, "never past half of what the key has left")

	small := counter
	small.Key, small.Limit = "small", 160
	g = b.Lend(t0, "n2", small, peer.LeaseWant{Hits: 50, Duration: time.Second}, 160)
	assert.Equal(t, int64(10), g.Hits, "never past a 16th of the limit: hits held away from the others")
	tiny := counter
	tiny.Key, tiny.Limit = "tiny", 15
	assert.False(t, b.Leasable(tiny), "a limit under 16 is never leased")
	assert.Zero(t, b.Lend(t0, "n2", tiny, peer.LeaseWant{Hits: 1, Duration: time.Second}, 15).ID)

	second := counter
	second.Key, second.Window = "s", time.Second
	g = b.Lend(t0.Add(850*time.Millisecond), "n2", second, peer.LeaseWant{Hits: 16, Duration: 1600 * time.Millisecond}, 999)
	assert.Equal(t, 149*time.Millisecond, g.Duration, "a counter's lease ends with its fixed window")
	assert.Equal(t, int64(2), g.Hits, "⌈16 × 149 ms ÷ 1.6 s⌉")

	log := limiter.Request{Key: "l", Limit: 1000, Window: 10 * time.Second, Algorithm: limiter.SlidingWindowLog, Hits: 1}
	g = b.Lend(t0, "n2", log, peer.LeaseWant{Hits: 8, Duration: 2 * time.Second}, 999)
	assert.Equal(t, 500*time.Millisecond, g.Duration, "a log's window spans 20 of its leases")
	assert.Equal(t, int64(2), g.Hits)
	log.Key, log.Window = "short", 4*time.Second // under 20 × 250 ms
	assert.False(t, b.Leasable(log))
	assert.Zero(t, b.Lend(t0, "n2", log, peer.LeaseWant{Hits: 8, Duration: 200 * time.Millisecond}, 999).ID)
	views, err := store.Admin().Inspect(t0, "short", 0, 0)
	require.NoError(t, err)
	assert.Empty(t, views, "nothing taken")
}

// A lease never settled is expired ten of its own durations after it
// ended, not ten of Config.Duration: a warm key's 1.6 s lease waits 16 s
// for its settlement. Its log placeholders then move to its last moment.
func TestALostLeasesGraceFollowsItsDuration(t *testing.T) {
	b, store := newBook(t)
	log := limiter.Request{Key: "l", Limit: 1000, Window: time.Hour, Algorithm: limiter.SlidingWindowLog, Hits: 1}
	g := b.Lend(t0, "n2", log, peer.LeaseWant{Hits: 8, Duration: 1600 * time.Millisecond}, 999)
	require.Equal(t, 1600*time.Millisecond, g.Duration)
	hot := log
	hot.Key = "h"
	require.NotZero(t, b.Lend(t0, "n2", hot, peer.LeaseWant{Hits: 50, Duration: 250 * time.Millisecond}, 999).ID)

	assert.Equal(t, 1, b.Expire(t0.Add(250*time.Millisecond+2500*time.Millisecond)), "the hot lease: 10 × 250 ms after its end")
	assert.Equal(t, 1, b.Lent())
	assert.Zero(t, b.Expire(t0.Add(1600*time.Millisecond+16*time.Second-time.Millisecond)), "the warm lease waits 10 × 1.6 s")
	assert.Equal(t, 1, b.Expire(t0.Add(1600*time.Millisecond+16*time.Second)))
	assert.Zero(t, b.Lent())

	views, err := store.Admin().Inspect(t0.Add(20*time.Second), "l", 0, 0)
	require.NoError(t, err)
	require.Len(t, views, 1)
	require.Len(t, views[0].Entries, 8)
	for _, e := range views[0].Entries {
		assert.Equal(t, t0.Add(1600*time.Millisecond), e, "at the lease's last moment, inside the window")
	}
}

// MaxDuration and MinHits are validated, naming the field.
func TestWarmLeaseConfigValidate(t *testing.T) {
	for name, mutate := range map[string]func(*lease.Config){
		"MaxDuration": func(c *lease.Config) { c.MaxDuration = 100 * time.Millisecond }, // under Duration
		"MinHits":     func(c *lease.Config) { c.MinHits = 0 },
	} {
		c := lease.DefaultConfig()
		mutate(&c)
		assert.ErrorContains(t, c.Validate(), name)
	}
	c := lease.DefaultConfig()
	c.MaxDuration = 31 * time.Second
	assert.ErrorContains(t, c.Validate(), "MaxDuration")
	c.MaxDuration = c.Duration
	assert.NoError(t, c.Validate(), "hot keys only")
}
