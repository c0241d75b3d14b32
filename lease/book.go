// Package lease is budget leases for hot keys: an owner lends part of a
// hot key's limit to a node that forwards the key at a high rate, so that
// node admits from it without a hop, and the limit stays exact.
// docs/design.md, "Budget leases", has the protocol, its guarantees and
// its worst cases. In short:
//
//   - the holder asks (peer.Peers.Lease) once it forwards a key at
//     Config.MinRate or more; the owner decides that check as a
//     forward, and lends Hits: it takes them from the key at once, as if
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
type Config struct {
	// Duration is how long a lease lasts: a node that forwards a key at
	// MinRate or more asks its owner for part of the key's limit, and
	// admits from it for this long without a hop. 0 turns leases off.
	// Default 250 ms; at most 10 s.
	Duration time.Duration
	// MinRate is the rate (checks per second, from this node, of one key)
	// from which this node asks for a lease: ordinary keys never reach
	// it. Default 200.
	MinRate int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{Duration: 250 * time.Millisecond, MinRate: 200} }

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.Duration < 0 || c.Duration > 10*time.Second || (c.Duration > 0 && c.Duration < 10*time.Millisecond) {
		errs = append(errs, field.Errorf("Duration", "must be 0 (off) or in [10ms, 10s], got %s", c.Duration))
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

// Duration is how long a lease lasts.
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
// moment long before its placeholders leave the window. A GCRA bucket is
// never leased: its lent hits would drain from the grant on while the
// holder admits them later, up to a lease's duration later, so the owner
// would admit up to the lent hits past the burst, and a settlement's
// forget of the unused ones finds part of them drained already. No
// boundary bounds that, as a counter's fixed window bounds its lease.
func (b *Book) Leasable(req limiter.Request) bool {
	if req.Hits <= 0 || req.Limit < 2 || req.Algorithm == limiter.GCRA || req.Algorithm == limiter.Concurrency {
		// A slot is taken by ACQUIRE, with a token, on the owner only; a
		// bucket's lent hits would drain before the holder admits them
		// (docs/limiter.md, "GCRA").
		return false
	}
	return req.Algorithm != limiter.SlidingWindowLog || req.Window >= minLogWindowLeases*b.cfg.Duration
}

// minLogWindowLeases is how many lease durations a log window must span to
// be leased (see Leasable).
const minLogWindowLeases = 20
