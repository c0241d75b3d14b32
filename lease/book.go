// Package lease is budget leases for hot keys: an owner lends part of a
// hot key's limit to a node that forwards the key at a high rate, so that
// node admits from it without a hop, and the limit stays exact.
// docs/design.md, "Budget leases", has the protocol, its guarantees and
// its worst cases. In short:
//
//   - the holder asks (peer.Peers.Lease) once it forwards a key often
//     enough that a lease of Config.MaxDuration at most would cover
//     Config.MinHits checks, for a lease as long as about MinHits checks
//     take at the key's rate, never shorter than Config.Duration (hot
//     keys) nor longer than MaxDuration (warm keys); the owner decides
//     that check as a forward, caps the duration, and lends Hits: it
//     takes them from the key at once, as if
//     admitted then (a counter's current window, the log's entries at the
//     grant time), so what it admits and what it lent never exceed the
//     limit;
//   - the holder admits from the lease until it runs out or its Duration,
//     counted from when the holder asked (before the owner granted, so no
//     clock needs to agree), has passed; a counter's lease never outlives
//     the owner's fixed window;
//   - the holder then settles (peer.Peers.Settle): what it used, and for
//     the log when (offsets from its asking). The owner gives back the unused hits
//     and, for the log, moves the used ones to their times: its state is
//     then what it would have been without the lease (each hit stamped at
//     most the forward's latency late);
//   - a lease never settled (its holder crashed or was cut off) is counted
//     as all used, at its last moment: under-admission only.
package lease

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Config is budget leases' settings. Start from DefaultConfig.
//
// A node that forwards a key at r checks/s asks its owner for a lease of
// MinHits ÷ r, clamped to [Duration, MaxDuration], and for the hits r
// needs for it: a hot key (r ≥ MinHits ÷ Duration, 32/s by default) gets
// Duration and more hits, a warm one MinHits hits for longer. It asks only
// when r ≥ MinRate and r × MaxDuration ≥ MinHits (1.6/s by default):
// below that a lease would not save enough forwards to pay for its call.
type Config struct {
	// Duration is the shortest lease: a hot key's. 0 turns leases off.
	// Default 250 ms; at most 10 s.
	Duration time.Duration
	// MaxDuration is the longest lease, asked for a warm key and granted
	// by an owner: what a lease costs when its holder uses little of it
	// (its unused hits denied to others until it ends) or is lost grows
	// with it. Default 5 s; in [Duration, 30 s].
	MaxDuration time.Duration
	// MinHits is how many checks a lease should cover to be worth its
	// call: a key's lease lasts as long as that many take at its rate
	// (within [Duration, MaxDuration]). Default 8; in [1, 10,000].
	MinHits int
	// MinRate (checks per second, from this node, of one key) is a floor
	// under the rate from which this node asks for a lease, on top of
	// MinHits ÷ MaxDuration. Default 1: that quotient decides. 200 (its
	// old default), with MaxDuration = Duration, leases hot keys only.
	MinRate int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Duration: 250 * time.Millisecond, MaxDuration: 5 * time.Second, MinHits: 8, MinRate: 1}
}

// maxMaxDuration bounds MaxDuration: a lost lease's hits stay counted for
// up to settleGraceLeases of its durations, and a log it is lent from
// must span minLogWindowLeases of them.
const maxMaxDuration = 30 * time.Second

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.Duration < 0 || c.Duration > 10*time.Second || (c.Duration > 0 && c.Duration < 10*time.Millisecond) {
		errs = append(errs, field.Errorf("Duration", "must be 0 (off) or in [10ms, 10s], got %s", c.Duration))
	}
	if c.MaxDuration < c.Duration || c.MaxDuration > maxMaxDuration {
		errs = append(errs, field.Errorf("MaxDuration", "must be in [Duration (%s), %s], got %s", c.Duration, maxMaxDuration, c.MaxDuration))
	}
	if c.MinHits < 1 || c.MinHits > 10_000 {
		errs = append(errs, field.Errorf("MinHits", "must be in [1, 10000], got %d", c.MinHits))
	}
	if c.MinRate < 1 {
		errs = append(errs, field.Errorf("MinRate", "must be ≥ 1, got %d", c.MinRate))
	}
	return errors.Join(errs...)
}

// Book is a node's budget leases, on both sides: those it holds as a node
// that forwards hot keys (holder.go: Take, Ask, SettleWithOwners) and
// those it lent as an owner (lender.go: Lend, Settle, Expire). Safe for
// concurrent use: the holder's side takes one of 32 stripe locks per
// check, by key hash; the lender's one lock, per lease lent or settled.
type Book struct {
	cfg     Config
	store   *limiter.Store
	peers   peer.Peers
	metrics *Metrics
	log     *slog.Logger
	// settleLog gates the warning of a failed settlement: one a second.
	settleLog logging.Gate

	shards [holderShards]holderShard

	mu     sync.Mutex // guards lent and nextID
	lent   map[uint64]*lentLease
	nextID uint64
}

// Deps is what a Book works with.
type Deps struct {
	// Store is the node's state, from which leases are lent. Required.
	Store *limiter.Store
	// Peers carries the calls to owners: asking and settling. Required.
	Peers peer.Peers
	// Metrics counts leases; nil counts nothing.
	Metrics *Metrics
	// Logger receives the failed settlements, one line a second. Nil:
	// slog.Default().
	Logger *slog.Logger
}

// New returns a Book with cfg's settings over d; nil with leases off
// (Duration 0), which every caller takes to mean none.
func New(cfg Config, d Deps) (*Book, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.Peers == nil {
		return nil, errors.New("lease: Deps.Store and Peers are required")
	}
	if cfg.Duration == 0 {
		return nil, nil
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	b := &Book{cfg: cfg, store: d.Store, peers: d.Peers, metrics: d.Metrics, log: log, lent: map[uint64]*lentLease{}}
	for i := range b.shards {
		b.shards[i].held = map[leaseKey]*heldLease{}
		b.shards[i].asking = map[leaseKey]bool{}
	}
	return b, nil
}

// Duration is how long the shortest lease lasts: a node tends its
// leases every quarter of it.
func (b *Book) Duration() time.Duration { return b.cfg.Duration }

// leaseKey is one limit a lease is for.
type leaseKey struct {
	key    string
	window time.Duration
	algo   limiter.Algorithm
	cal    limiter.Calendar
	limit  int64
}

func leaseKeyOf(r limiter.Request) leaseKey {
	return leaseKey{r.Key, r.Window, r.Algorithm, r.Calendar, r.Limit}
}

// Leasable reports whether req's limit may be leased at all: a log
// window must be long enough that a lost lease is moved to its last
// moment long before its placeholders leave the window, for the
// shortest lease (Duration); a longer one is cut to fit
// (logLeaseCap). A GCRA bucket is
// never leased: its lent hits would drain from the grant on while the
// holder admits them later, up to a lease's duration later, so the owner
// would admit up to the lent hits past the burst, and a settlement's
// forget of the unused ones finds part of them drained already. No
// boundary bounds that, as a counter's fixed window bounds its lease.
func (b *Book) Leasable(req limiter.Request) bool {
	if req.Hits <= 0 || req.Limit < maxLeaseShare || req.Algorithm == limiter.GCRA || req.Algorithm == limiter.Concurrency {
		// A slot is taken by ACQUIRE, with a token, on the owner only; a
		// bucket's lent hits would drain before the holder admits them
		// (docs/limiter.md, "GCRA").
		return false
	}
	return req.Algorithm != limiter.SlidingWindowLog || req.Window >= minLogWindowLeases*b.cfg.Duration
}

// maxLeaseShare bounds a lease to 1/maxLeaseShare of its key's limit: the
// hits a lease holds are kept from every other node until it is settled
// (over-denial), so no lease may hold more than ~6 % of a limit, and a
// limit under 16 is not leased at all (a warm key's lease of 8 hits would
// hold most of a limit of 10 away from the others: an xDS-driven limit of
// 8 denied its 7th check so).
const maxLeaseShare = 16

// minLogWindowLeases is how many of a lease's durations a log window must
// span for it to be lent (see Leasable and logLeaseCap).
const minLogWindowLeases = 20

// logLeaseCap is the longest lease req's limit may have: for the log,
// 1/minLogWindowLeases of its window, so that a lost lease's
// placeholders, moved to its last moment settleGraceLeases of its
// durations after it ended, are still inside the window; no cap for the
// counter (its owner cuts a lease at the fixed window's end).
func logLeaseCap(req limiter.Request) time.Duration {
	if req.Algorithm != limiter.SlidingWindowLog {
		return maxMaxDuration
	}
	return req.Window / minLogWindowLeases
}
