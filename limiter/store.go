package limiter

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/partition"
)

// OverflowPolicy says what a full partition does with a new key, or with a
// log that must grow past the log budget, once sampling found no expired key
// to drop.
type OverflowPolicy uint8

const (
	// OverflowEvict drops the sampled key that would expire soonest. That key
	// loses its count (its next request starts fresh), so the policy trades
	// some over-admission for availability; Stats.Evictions (key cap) and
	// Stats.LogEvictions (log budget) count it.
	OverflowEvict OverflowPolicy = iota
	// OverflowReject refuses the request with ErrCapacity and keeps every
	// existing key exact; Stats.Rejections and Stats.LogRejections count it.
	OverflowReject
)

// String returns the policy's flag spelling.
func (p OverflowPolicy) String() string {
	if p == OverflowReject {
		return "reject"
	}
	return "evict"
}

// ParseOverflowPolicy reads "evict" or "reject".
func ParseOverflowPolicy(s string) (OverflowPolicy, error) {
	switch s {
	case "evict":
		return OverflowEvict, nil
	case "reject":
		return OverflowReject, nil
	}
	return 0, fmt.Errorf("unknown overflow policy %q; want evict or reject", s)
}

// Config bounds a Store. Start from DefaultConfig; New rejects invalid
// values, naming the field.
type Config struct {
	// MaxKeys caps the number of keys held, split evenly over the
	// partitions, to bound memory under a flood of unique keys. Default
	// 1,048,576; at least the partition count. Memory per key is ~100 B
	// for the counter plus 4 B per held hit for the log.
	MaxKeys int
	// Overflow is what a full partition does with a new key. Default
	// OverflowEvict.
	Overflow OverflowPolicy
	// MaxKeyBytes caps the length of a key. Default 1024.
	MaxKeyBytes int
	// MaxWindow caps the window of either algorithm. Default 366 days. The
	// log never accepts more than 2^32−1 ms (49.7 days) because its entries
	// are 32-bit offsets.
	MaxWindow time.Duration
	// MaxLogLimit caps the limit of the log algorithm, whose memory grows
	// with the limit. Default 10,000; at most 2^30.
	MaxLogLimit int64
	// MaxLogEntries caps the entries (4 bytes each) all sliding window logs
	// may allocate, room to grow included, split evenly over the
	// partitions like MaxKeys: MaxKeys bounds keys, not what a log key
	// holds (a million log keys at a limit of 10,000 would be 40 GB). A log
	// that must grow past its partition's share gets room per Overflow, or
	// is refused. Default 2^27 (512 MiB); at least partitions ×
	// MaxLogLimit, so that any one log fits.
	MaxLogEntries int64
	// TrackChanges makes the store remember which keys changed since
	// Changes.Take last asked, for replication to a backup: a record per
	// key changed in a round, appended or overwritten in place by an
	// admitted check under the partition's lock it already holds (see
	// journal). Default false.
	TrackChanges bool
	// HotKeys is how many keys each partition's hot-key summaries monitor
	// (see HotKeys): two Space-Saving summaries, by checks and by denials,
	// for each of two epochs. A decided check costs a scan of HotKeys
	// hashes under the partition's lock it already holds, and no
	// allocation once the summaries are warm. Default 8 (with 271
	// partitions, ~2,200 keys per list and ~0.7 MB per node); 0 turns the
	// summaries off; at most 64.
	HotKeys int
	// ReservationTTL is how long a reservation lasts unsettled when its
	// request names no TTL. Default 1 minute.
	ReservationTTL time.Duration
	// MaxReservationTTL caps a reservation's TTL. Default 1 hour.
	MaxReservationTTL time.Duration
	// MaxReservations caps the reservations the store remembers, open
	// ones and settled ones alike (a settled one is remembered until its
	// expiry, so that a retried settle counts once): about 150 bytes each.
	// A reservation past the cap is refused with ErrCapacity. Default
	// 1,048,576: at the default TTL, 17,000 reservations a second
	// sustained.
	MaxReservations int
	// MaxUnknownSettles caps the settles of reservations the store had
	// no record of (the owner changed) that it remembers, so that a
	// retry of one counts once: about 150 bytes each, split evenly over
	// the partitions, apart from MaxReservations, so that they never take
	// the room reservations need. At its share a partition forgets its
	// oldest; a retry of a forgotten one is applied again. Default 65,536;
	// 0 remembers none.
	MaxUnknownSettles int
	// TokenKeys authenticate the reservation tokens: every member must
	// hold the same (NewTokenKeys of the cluster secrets). Nil: the public
	// key of no secret and no cluster name, which authenticates nothing.
	TokenKeys *TokenKeys
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		MaxKeys:       1 << 20,
		Overflow:      OverflowEvict,
		MaxKeyBytes:   1024,
		MaxWindow:     366 * 24 * time.Hour,
		MaxLogLimit:   10_000,
		MaxLogEntries: 1 << 27,
		HotKeys:       8,

		ReservationTTL:    time.Minute,
		MaxReservationTTL: time.Hour,
		MaxReservations:   1 << 20,
		MaxUnknownSettles: 1 << 16,
	}
}

// Validate reports every field unusable in a store of the given number
// of partitions, each a *field.Error naming it.
func (c Config) Validate(partitions int) error {
	var errs []error
	if partitions < 1 {
		errs = append(errs, fmt.Errorf("partitions must be ≥ 1, got %d", partitions))
	}
	if c.MaxKeys < max(partitions, 1) {
		errs = append(errs, field.Errorf("MaxKeys", "must be ≥ the partition count (%d), got %d", partitions, c.MaxKeys))
	}
	if c.Overflow > OverflowReject {
		errs = append(errs, field.Errorf("Overflow", "is an unknown policy, %d", c.Overflow))
	}
	if c.MaxKeyBytes < 1 {
		errs = append(errs, field.Errorf("MaxKeyBytes", "must be ≥ 1, got %d", c.MaxKeyBytes))
	}
	if c.MaxWindow < time.Millisecond {
		errs = append(errs, field.Errorf("MaxWindow", "must be ≥ 1ms, got %s", c.MaxWindow))
	}
	if c.MaxLogLimit < 1 || c.MaxLogLimit > 1<<30 {
		errs = append(errs, field.Errorf("MaxLogLimit", "must be in [1, 2^30], got %d", c.MaxLogLimit))
	} else if partitions >= 1 && c.MaxLogEntries/int64(partitions) < c.MaxLogLimit {
		errs = append(errs, field.Errorf("MaxLogEntries", "must be ≥ partitions × %s = %d × %d, so that a full log fits in its partition's share; got %d",
			field.Ref("MaxLogLimit"), partitions, c.MaxLogLimit, c.MaxLogEntries))
	}
	if c.HotKeys < 0 || c.HotKeys > 64 {
		errs = append(errs, field.Errorf("HotKeys", "must be in [0, 64], got %d", c.HotKeys))
	}
	if c.MaxReservationTTL < time.Millisecond {
		errs = append(errs, field.Errorf("MaxReservationTTL", "must be ≥ 1ms, got %s", c.MaxReservationTTL))
	}
	if c.ReservationTTL < time.Millisecond || c.ReservationTTL > c.MaxReservationTTL {
		errs = append(errs, field.Errorf("ReservationTTL", "must be in [1ms, %s], got %s", field.Ref("MaxReservationTTL"), c.ReservationTTL))
	}
	if c.MaxReservations < 0 {
		errs = append(errs, field.Errorf("MaxReservations", "must be ≥ 0 (0 turns reservations off), got %d", c.MaxReservations))
	}
	if c.MaxUnknownSettles < 0 {
		errs = append(errs, field.Errorf("MaxUnknownSettles", "must be ≥ 0 (0 remembers none), got %d", c.MaxUnknownSettles))
	}
	return errors.Join(errs...)
}

// Store holds the state of every key this node owns and decides requests
// against it. It is safe for concurrent use: keys are spread over partitions
// (see New) that each have their own mutex, so there is no global lock.
//
// Idle keys cost nothing once expired: a decision treats an expired state as
// empty, and Sweep frees them. The zero Store is not usable; call New.
//
// Store's own methods are the request path (Check, CheckPlaced, Apply,
// Refund, Charge) and the store-wide bookkeeping (Sweep, Stats). Its other
// roles are small types over the same partitions, reached by accessors that
// cost nothing (each returns a pointer into the Store): Transfer (state
// moved a partition at a time: handoff, replication, persistence),
// Changes (what changed since the last round, for the backups),
// Reservations (the reservations' book) and Admin (an operator's calls:
// inspect, hot keys, reset). Each is safe for concurrent use, as the Store
// is, and lives as long as it.
type Store struct {
	cfg    Config
	shards shards
	room   room // the key cap and the log budget

	transfer     Transfer
	changes      Changes
	reservations Reservations
	admin        Admin
}

// shards are a store's partitions, indexed by partition.Of.
type shards []shard

func (ss shards) of(key string) *shard {
	return &ss[partition.Of(key, len(ss))]
}

// hashed returns key's shard and its partition.Hash, which the hot-key
// summaries reuse.
func (ss shards) hashed(key string) (*shard, uint64) {
	h := partition.Hash(key)
	return &ss[partition.OfHash(h, len(ss))], h
}

// Transfer returns the store's face to the members it moves state to
// and from. The call costs nothing: the Transfer is part of the Store.
func (s *Store) Transfer() *Transfer { return &s.transfer }

// Changes returns the store's change tracking (Config.TrackChanges).
func (s *Store) Changes() *Changes { return &s.changes }

// Reservations returns the store's reservations: Reserve, Settle and
// their book.
func (s *Store) Reservations() *Reservations { return &s.reservations }

// Admin returns the store's operator calls: Inspect, HotKeys, Delete.
func (s *Store) Admin() *Admin { return &s.admin }

// stateKey identifies one limit: the same key under another window is an
// independent limit. The algorithm picks the map.
type stateKey struct {
	key string
	// window is the sliding window in ms (> 0), or a calendar counter's
	// Calendar.stateWindow (< 0): the unit and the zone are part of the
	// identity, at no cost in memory.
	window int64
}

type shard struct {
	mu       sync.Mutex
	counters map[stateKey]counterState
	logs     map[stateKey]*logState
	gcras    map[stateKey]gcraState
	peak     int // largest size since the maps were last rebuilt
	// Running totals, kept under mu wherever state changes, so that the
	// log budget is one comparison and a scrape never walks the maps.
	entries  int // hits held by the logs
	slots    int // ring slots the logs allocated (≥ entries): the budgeted memory
	keyBytes int // bytes of the key strings held
	// concurrencyKeys is how many of logs are concurrency limits'.
	concurrencyKeys int
	// journal holds what changed since Changes.Take last took it; nil
	// unless Config.TrackChanges.
	journal *journal
	// hot summarises the keys decided here; nil unless Config.HotKeys.
	hot *hotKeys
	// book remembers the reservations opened or settled here; nil until
	// the first.
	book *book
	_    [8]byte // keep neighbouring shards' locks off one cache line
}

func (sh *shard) len() int { return len(sh.counters) + len(sh.logs) + len(sh.gcras) }

// putCounter stores a new key's counter. Requires sh.mu held.
func (sh *shard) putCounter(k stateKey, st counterState) {
	k.key = strings.Clone(k.key) // don't pin the caller's buffer
	sh.counters[k] = st
	sh.keyBytes += len(k.key)
	sh.peak = max(sh.peak, sh.len())
}

// putLog stores a new key's log, already accounted by the caller's
// before/after of its entries and slots. Requires sh.mu held.
func (sh *shard) putLog(k stateKey, st *logState) {
	k.key = strings.Clone(k.key)
	sh.logs[k] = st
	sh.keyBytes += len(k.key)
	if k.concurrency() {
		sh.concurrencyKeys++
	}
	sh.peak = max(sh.peak, sh.len())
}

func (sh *shard) deleteCounter(k stateKey, st counterState) {
	sh.unjournal(k, st.mark, st.slot, counterChange)
	delete(sh.counters, k)
	sh.keyBytes -= len(k.key)
}

func (sh *shard) deleteLog(k stateKey, st *logState) {
	sh.unjournal(k, st.mark, st.slot, logChange)
	delete(sh.logs, k)
	sh.keyBytes -= len(k.key)
	if k.concurrency() {
		sh.concurrencyKeys--
	}
	sh.entries -= int(st.n)
	sh.slots -= len(st.ring)
}

// account records how a log changed since it held n entries in c slots.
func (sh *shard) account(st *logState, n int32, c int) {
	sh.entries += int(st.n - n)
	sh.slots += len(st.ring) - c
}

// New returns an empty store of the given number of partitions (see
// package partition): a key lives in partition.Of(key, partitions), each
// partition under its own lock, and a partition is the unit of handoff.
func New(cfg Config, partitions int) (*Store, error) {
	if err := cfg.Validate(partitions); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, shards: make(shards, partitions),
		room: room{perShard: (cfg.MaxKeys + partitions - 1) / partitions,
			logShare: int(min(cfg.MaxLogEntries/int64(partitions), math.MaxInt32)),
			overflow: cfg.Overflow, maxKeys: cfg.MaxKeys, maxLogEntries: cfg.MaxLogEntries, maxLogLimit: cfg.MaxLogLimit}}
	s.transfer = Transfer{cfg: &s.cfg, shards: s.shards, room: &s.room}
	s.changes = Changes{shards: s.shards}
	s.admin = Admin{cfg: &s.cfg, shards: s.shards}
	s.reservations = Reservations{store: s, keys: cfg.TokenKeys}
	if s.reservations.keys == nil {
		s.reservations.keys = publicKeys
	}
	if partitions > 0 && cfg.MaxUnknownSettles > 0 {
		s.reservations.unknownShare = max(cfg.MaxUnknownSettles/partitions, 1)
	}
	for i := range s.shards {
		s.shards[i].counters = make(map[stateKey]counterState)
		s.shards[i].logs = make(map[stateKey]*logState)
		s.shards[i].gcras = make(map[stateKey]gcraState)
		if cfg.TrackChanges {
			s.shards[i].journal = newJournal()
		}
		if cfg.HotKeys > 0 {
			s.shards[i].hot = newHotKeys(cfg.HotKeys)
		}
	}
	return s, nil
}

// Config returns the store's effective configuration.
func (s *Store) Config() Config { return s.cfg }

// Check decides r at time now, and consumes r.Hits if allowed. It returns an
// *ArgumentError for a request it cannot serve, and an error wrapping
// ErrCapacity when a new key does not fit under OverflowReject.
func (s *Store) Check(now time.Time, r Request) (Decision, error) {
	if err := s.cfg.validate(&r); err != nil {
		return Decision{}, err
	}
	ms := max(now.UnixMilli(), 0) // time before the epoch is the epoch
	k := stateKey{r.Key, r.stateWindow()}
	sh, h := s.shards.hashed(r.Key)

	var d Decision
	var err error
	sh.mu.Lock()
	switch r.Algorithm {
	case SlidingWindowLog, Concurrency:
		d, err = s.checkLog(sh, k, ms, r)
	case GCRA:
		d, err = s.checkGCRA(sh, k, nanos(now), r)
	default:
		d, err = s.checkCounter(sh, k, ms, r)
	}
	if sh.hot != nil && err == nil {
		sh.hot.observe(ms, h, r.Key, d.Allowed)
	}
	sh.mu.Unlock()
	return d, err
}

// CheckPlaced is Check, and also returns the time (ms) at which r's hits
// were counted when it was allowed: now, unless the key's state had
// already moved past it (a concurrent check that read a later clock took
// the shard's lock first), in which case decideLog puts the entries at
// the log's newest time and decideCounter the hits at the start of the
// counter's window. A caller that must find those hits again (a budget
// lease's placeholders, taken back at settlement) uses this time, not
// its own clock's: the two differ by the time the lock was waited for,
// and under load a lease's placeholders were then not found, and stayed
// counted. Check's body is not shared with it: one more layer there cost
// the hot path 10–25 % (CounterHotKey, LogHotKey).
func (s *Store) CheckPlaced(now time.Time, r Request) (Decision, int64, error) {
	if err := s.cfg.validate(&r); err != nil {
		return Decision{}, 0, err
	}
	ms := max(now.UnixMilli(), 0) // time before the epoch is the epoch
	k := stateKey{r.Key, r.stateWindow()}
	sh, h := s.shards.hashed(r.Key)

	var d Decision
	var err error
	at := ms
	sh.mu.Lock()
	switch r.Algorithm {
	case SlidingWindowLog, Concurrency:
		d, err = s.checkLog(sh, k, ms, r)
		if st, ok := sh.logs[k]; ok && st.n > 0 && err == nil && d.Allowed {
			at = st.newest() // the entries just pushed are the newest
		}
	case GCRA: // a bucket counts its hits at now, whatever its TAT
		d, err = s.checkGCRA(sh, k, nanos(now), r)
	default:
		d, err = s.checkCounter(sh, k, ms, r)
		if st, ok := sh.counters[k]; ok {
			at = placedAt(k, st, ms) // rollTo's clamp
		}
	}
	if sh.hot != nil && err == nil {
		sh.hot.observe(ms, h, r.Key, d.Allowed)
	}
	sh.mu.Unlock()
	return d, at, err
}

// checkCounter decides r against the counter of k at now (ms), a sliding
// one or a calendar one. Requires sh.mu held.
func (s *Store) checkCounter(sh *shard, k stateKey, now int64, r Request) (Decision, error) {
	if k.window < 0 {
		c, _ := r.Calendar.cal() // validated
		return s.checkCalendar(sh, k, c, now, r)
	}
	st, ok := sh.counters[k]
	res := decideCounter(&st, now, k.window, r.Limit, r.Hits)
	changed := res.allowed && r.Hits > 0
	switch {
	case ok:
		if changed {
			sh.journalCounter(k, &st)
		}
		sh.counters[k] = st
	case changed:
		if err := s.room.makeRoom(sh, now); err != nil {
			return Decision{}, err
		}
		sh.journalCounter(k, &st)
		sh.putCounter(k, st)
	}
	return decision(r.Limit, r.Hits, res.allowed, res.count, res.retryAfter, res.resetAfter, st.refillAfter(now, k.window)), nil
}

// checkLog decides r against the log of k at now (ms), within the log
// budget of sh. Requires sh.mu held.
func (s *Store) checkLog(sh *shard, k stateKey, now int64, r Request) (Decision, error) {
	st, ok := sh.logs[k]
	if !ok {
		if r.Hits == 0 { // a peek at an absent key: nothing to count, nothing to create
			return decision(r.Limit, 0, true, 0, 0, 0, 0), nil
		}
		// A new key with hits ≤ limit is always allowed, so it will be
		// stored: make room under the key cap first.
		if err := s.room.makeRoom(sh, now); err != nil {
			return Decision{}, err
		}
		st = newLogFor(k)
	}
	// The ring may grow to what the shard's share leaves after the
	// other logs (sh.slots counts this one at c0).
	n0, c0 := st.n, len(st.ring)
	res := decideLog(st, now, k.span(), r.Limit, r.Hits, s.room.logShare-sh.slots+c0)
	var err error
	if res.noRoom() {
		err = s.room.makeLogRoom(sh, now, k, c0, int(st.n)+int(r.Hits))
		if err == nil {
			res = decideLog(st, now, k.span(), r.Limit, r.Hits, s.room.logShare-sh.slots+c0)
		}
		if err == nil && res.noRoom() { // cannot happen: room was made
			err = s.room.logFull(sh)
		}
	}
	// A refused request's prune stands; a refused new key changed
	// nothing (n0 = c0 = 0, and noRoom consumed nothing).
	sh.account(st, n0, c0)
	if err != nil {
		return Decision{}, err
	}
	if !ok {
		sh.putLog(k, st)
	}
	if res.allowed && r.Hits > 0 {
		sh.journalLog(k, st)
	}
	return decision(r.Limit, r.Hits, res.allowed, res.count, res.retryAfter, res.resetAfter, st.refillAfter(now, k.span())), nil
}

func decision(limit, hits int64, allowed bool, count, retryMS, resetMS, refillMS int64) Decision {
	used := count
	if allowed {
		used += hits
	}
	return Decision{
		Allowed:      allowed,
		Limit:        limit,
		Remaining:    max(limit-used, 0),
		CurrentCount: count,
		RetryAfter:   time.Duration(retryMS) * time.Millisecond,
		ResetAfter:   time.Duration(resetMS) * time.Millisecond,
		RefillAfter:  time.Duration(refillMS) * time.Millisecond,
	}
}

// room is a store's key cap and log budget, and what keeping them
// cost: it makes room in a full partition, or refuses. Its methods
// require the partition's lock held; its counters are atomic.
type room struct {
	perShard int // key cap of one shard
	logShare int // log entry budget of one shard
	// Config's, for the policy and the errors' messages.
	overflow      OverflowPolicy
	maxKeys       int
	maxLogEntries int64
	maxLogLimit   int64

	evictions     atomic.Uint64
	rejections    atomic.Uint64
	logEvictions  atomic.Uint64
	logRejections atomic.Uint64
	expired       atomic.Uint64
	// calendarOver counts calendar states another member or the disk
	// brought into a full shard, kept past the cap (keepCalendar).
	calendarOver atomic.Uint64
}

// evictionSample is how many keys of each map a full shard looks at, as
// Redis's approximated LRU does: enough to find an expired or nearly
// expired key cheaply, without a per-key list.
const evictionSample = 8

// makeRoom ensures sh can take one more key, or refuses it (counted in
// rejections). Requires sh.mu held.
func (rm *room) makeRoom(sh *shard, now int64) error {
	if rm.freeOne(sh, now) {
		return nil
	}
	rm.rejections.Add(1)
	if rm.overflow == OverflowEvict {
		return fmt.Errorf("new key refused: its shard holds %d keys, its share of the node's maximum of %d (--max-keys), and the keys sampled to evict were calendar or concurrency limits, which are never evicted: %w",
			sh.len(), rm.maxKeys, ErrCapacity)
	}
	return fmt.Errorf("new key refused: its shard holds %d keys, its share of the node's maximum of %d (--max-keys); --overflow=reject keeps the keys held exact: %w",
		sh.len(), rm.maxKeys, ErrCapacity)
}

// keepCalendar makes room for a calendar counter's state that arrives
// from the disk (a restore), the previous owner (a handoff) or a replica
// (a promotion), as makeRoom does for a new key, but never refuses it:
// the count is a quota spent, which no other member holds any more, and
// dropping it would give the budget back until the period ends (a month
// at most). Past the cap, the shard keeps it and counts it
// (Stats.CalendarOverCap). What that adds is bounded by what the member
// that sent it held under its own cap, or by what this node held before
// its restart. Requires sh.mu held.
func (rm *room) keepCalendar(sh *shard, now int64) {
	if !rm.freeOne(sh, now) {
		rm.calendarOver.Add(1)
	}
}

// freeOne reports whether sh can take one more key, once it has freed
// the expired keys of a sample or, under OverflowEvict, evicted the
// sampled key that expires soonest (never a calendar or concurrency
// limit). Requires sh.mu held.
func (rm *room) freeOne(sh *shard, now int64) bool {
	if sh.len() < rm.perShard {
		return true
	}
	// Map iteration starts at a random position, which makes this a sample.
	var (
		victimC *stateKey
		victimS counterState
		soonest = int64(math.MaxInt64)
		dropped int
	)
	// A calendar counter is never evicted: its count is a quota that only
	// its boundary resets, and a month's could not come back. So the
	// sample looks past them, up to calendarSample keys, for
	// evictionSample sliding ones.
	n, looked := 0, 0
	for k, st := range sh.counters {
		if looked++; n >= evictionSample || looked > calendarSample {
			break
		}
		exp := counterExpiryOf(k, &st)
		switch {
		case exp <= now:
			sh.deleteCounter(k, st)
			dropped++
		case k.window < 0:
			continue
		case exp < soonest:
			kk := k
			victimC, victimS, soonest = &kk, st, exp
		}
		n++
	}
	// No key has window 0, so nothing is skipped.
	victimL, victimLog, droppedLogs := sh.sampleLogs(now, stateKey{}, soonest)
	if victimLog != nil {
		soonest = victimLog.expiry(victimL.window)
	}
	victimG, victimGS, isG, droppedGCRAs := sh.sampleGCRAs(now, soonest)
	if dropped += droppedLogs + droppedGCRAs; dropped > 0 {
		rm.expired.Add(uint64(dropped))
		return true
	}
	if rm.overflow == OverflowReject || (victimLog == nil && victimC == nil && !isG) {
		return false
	}
	switch {
	case isG: // empties sooner than any sampled log or counter
		sh.deleteGCRA(victimG, victimGS)
	case victimLog != nil: // expires sooner than any sampled counter
		sh.deleteLog(victimL, victimLog)
	case victimC != nil:
		sh.deleteCounter(*victimC, victimS)
	}
	rm.evictions.Add(1)
	return true
}

// calendarSample bounds the counters a full shard looks at for sliding
// ones to evict, past the calendar counters it may not evict: a shard of
// calendar limits only costs a new key 64 map steps before it is refused.
const calendarSample = 8 * evictionSample

// maxLogEvictions bounds the keys one decision may evict to make room for
// its log: a log growing by thousands of slots in a shard of tiny ones
// would otherwise empty the shard. Past it the request is refused.
const maxLogEvictions = 64

// makeLogRoom frees slots of other logs of sh until the log of self,
// which the shard counts at selfSlots, can have need slots within the
// shard's share: expired logs first, then, under OverflowEvict, the
// sampled log that would expire soonest. Requires sh.mu held.
func (rm *room) makeLogRoom(sh *shard, now int64, self stateKey, selfSlots, need int) error {
	evicted := 0
	for sh.slots-selfSlots+need > rm.logShare {
		victim, victimLog, dropped := sh.sampleLogs(now, self, math.MaxInt64)
		if dropped > 0 {
			rm.expired.Add(uint64(dropped))
			continue
		}
		if victimLog == nil || rm.overflow == OverflowReject || evicted == maxLogEvictions {
			return rm.logFull(sh)
		}
		sh.deleteLog(victim, victimLog)
		rm.logEvictions.Add(1)
		evicted++
	}
	return nil
}

// sampleLogs looks at up to evictionSample logs of sh other than skip
// (map iteration starts at a random position, which makes this a
// sample), frees the expired ones and returns how many, and the live one
// that would expire soonest, if before soonest (else its state is nil).
// Requires sh.mu held.
func (sh *shard) sampleLogs(now int64, skip stateKey, soonest int64) (victim stateKey, st *logState, dropped int) {
	n := 0
	for k, l := range sh.logs {
		if k == skip {
			continue
		}
		if n++; n > evictionSample {
			break
		}
		if exp := l.expiry(k.span()); exp <= now {
			sh.deleteLog(k, l)
			dropped++
		} else if exp < soonest && !k.concurrency() { // a slot is never evicted: its limit would admit one more in flight
			victim, st, soonest = k, l, exp
		}
	}
	return victim, st, dropped
}

// logFull counts and explains a request refused for the log budget.
func (rm *room) logFull(sh *shard) error {
	rm.logRejections.Add(1)
	return fmt.Errorf("log entries refused: the logs of this key's shard hold %d of its %d slots, its share of the node's budget of %d (--max-log-entries): %w",
		sh.slots, rm.logShare, rm.maxLogEntries, ErrCapacity)
}

// Sweep frees every key whose state is empty at now and returns how many it
// freed. It locks one partition at a time, so decisions on the others go on.
// The node calls it periodically; correctness never depends on it.
func (s *Store) Sweep(now time.Time) int {
	ms := max(now.UnixMilli(), 0)
	freed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, st := range sh.counters {
			if counterExpiryOf(k, &st) <= ms {
				sh.deleteCounter(k, st)
				freed++
			}
		}
		for k, st := range sh.logs {
			if st.expiry(k.span()) <= ms {
				sh.deleteLog(k, st)
				freed++
			}
		}
		freed += sh.sweepGCRAs(nanos(now))
		sh.compact()
		sh.mu.Unlock()
	}
	s.room.expired.Add(uint64(freed))
	return freed
}

// compact rebuilds the maps once they hold under a quarter of their peak:
// Go maps never give back the memory of deleted entries, and a flood of
// unique keys would otherwise pin its peak for the life of the process.
// Requires sh.mu held.
func (sh *shard) compact() {
	if sh.peak < 1024 || sh.len() >= sh.peak/4 {
		return
	}
	counters := make(map[stateKey]counterState, len(sh.counters))
	for k, v := range sh.counters {
		counters[k] = v
	}
	logs := make(map[stateKey]*logState, len(sh.logs))
	for k, v := range sh.logs {
		logs[k] = v
	}
	gcras := make(map[stateKey]gcraState, len(sh.gcras))
	for k, v := range sh.gcras {
		gcras[k] = v
	}
	sh.counters, sh.logs, sh.gcras, sh.peak = counters, logs, gcras, sh.len()
}

// Stats is a snapshot of the store's bookkeeping.
type Stats struct {
	CounterKeys int
	LogKeys     int // window logs and concurrency limits: both are logs
	// ConcurrencyKeys is how many of LogKeys are concurrency limits.
	ConcurrencyKeys int
	GCRAKeys        int
	LogEntries      int // hits held by all logs
	// LogSlots is the entries the logs allocated, room to grow included:
	// what Config.MaxLogEntries bounds.
	LogSlots int
	// KeyBytes is the length of every key string held.
	KeyBytes int
	// Bytes estimates the heap the state takes (see EstimateBytes).
	Bytes         int64
	Evictions     uint64 // live keys dropped for a new key at the key cap (OverflowEvict)
	Rejections    uint64 // new keys refused at the key cap (OverflowReject)
	LogEvictions  uint64 // live log keys dropped for another log's growth at the log budget (OverflowEvict)
	LogRejections uint64 // requests refused at the log budget
	Expired       uint64 // empty keys freed by Sweep or by a full partition
	// CalendarOverCap counts calendar counters kept past the key cap: a
	// restore, a handoff or a promotion brought their count into a full
	// partition, and a spent quota is never dropped for room.
	CalendarOverCap uint64
}

// Per-key heap costs beyond the key string and the log's ring, calibrated
// with BenchmarkMemoryPerKey (126 B for a counter and 176 B for a log of
// limit 5, both with a 37-byte key): a map slot at Go's load factor, the
// key string's size-class rounding, and the log's heap-allocated header,
// which the concurrency limits' tag pointer took from 48 to 64 bytes
// (195 B for a log of limit 5 and 140 B for a counter on 2026-11-29).
// A concurrency limit's tags are not counted (4 B a slot).
// A GCRA bucket's slot holds 16 bytes of state where a counter's holds
// 32: with the map's slack, 25–30 B less per key than a counter in
// TestEstimateBytesTracksTheHeap, which the estimate takes as 24.
const (
	counterKeyOverhead = 88
	logKeyOverhead     = 128
	gcraKeyOverhead    = 64
	logSlotBytes       = 4
)

// EstimateBytes estimates the heap taken by the state Stats describes.
// It is an estimate: maps grow by doubling, so a store that just grew
// holds up to twice its slots, and a map shrinks only once Sweep rebuilds
// it.
func (st Stats) EstimateBytes() int64 {
	return int64(st.CounterKeys)*counterKeyOverhead + int64(st.LogKeys)*logKeyOverhead + int64(st.GCRAKeys)*gcraKeyOverhead +
		int64(st.KeyBytes) + int64(st.LogSlots)*logSlotBytes
}

// Stats reads the running totals of each partition, one lock at a time:
// the cost is one lock per partition, however many keys the store holds.
func (s *Store) Stats() Stats {
	st := Stats{Evictions: s.room.evictions.Load(), Rejections: s.room.rejections.Load(),
		LogEvictions: s.room.logEvictions.Load(), LogRejections: s.room.logRejections.Load(), Expired: s.room.expired.Load(),
		CalendarOverCap: s.room.calendarOver.Load()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.CounterKeys += len(sh.counters)
		st.LogKeys += len(sh.logs)
		st.ConcurrencyKeys += sh.concurrencyKeys
		st.GCRAKeys += len(sh.gcras)
		st.LogEntries += sh.entries
		st.LogSlots += sh.slots
		st.KeyBytes += sh.keyBytes
		sh.mu.Unlock()
	}
	st.Bytes = st.EstimateBytes()
	return st
}

// Validate reports whether r is a request the store can serve, without
// deciding it: a node checks requests before forwarding them, so a bad one
// is refused where it arrived.
func (s *Store) Validate(r Request) error { return s.cfg.validateOp(&r) }

// ValidateRequest is Store.Validate for a store of this Config: what a
// request must be to be served, before any store exists (the node loads
// its policies against it before it builds its store).
func (c Config) ValidateRequest(r Request) error { return c.validateOp(&r) }
