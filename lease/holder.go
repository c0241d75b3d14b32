package lease

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
)

// The holder's side: a node that forwards a hot key asks its owner for a
// lease, admits from it, and settles it.

// heldLease is a lease this node holds. Guarded by its holderShard's lock.
type heldLease struct {
	owner   peer.Route
	grant   peer.LeaseGrant
	algo    limiter.Algorithm
	asked   time.Time // when this node asked: the lease's clock starts here
	until   time.Time // asked + grant.Duration
	left    int64
	used    int64
	offsets []time.Duration // log only
}

// The forwarding rate of keys, per holder shard, in a 2-way
// set-associative table: a key's two ways are found from its hash, and a
// key not there replaces the one of the two with the lower rate, so a
// one-off key evicts another one-off, not a warm key that a stream of
// a million cold keys would otherwise overwrite between its checks. A
// key that loses its way starts counting again. Memory: 32 shards × 512
// sets × 2 ways × 32 B = 1 MiB per node, allocated with the Book.
const (
	hotSets = 512
	hotWays = 2
)

// rateSpan is how long a key's count runs before it is halved (its time
// too, so that the rate stays): a rate is counted over the last one to
// two spans of checks. Two seconds see a key at 1.6 checks/s (the
// default MinHits ÷ MaxDuration) with a few checks counted.
const rateSpan = 2 * time.Second

// rateFloorSpan is the shortest time a rate is measured over: two checks
// a microsecond apart are not a rate of a million a second.
const rateFloorSpan = 100 * time.Millisecond

// minAskCount is how many checks after its first a key must have been
// seen from this node before it is asked for: a rate from one interval
// is a guess; from two it is at least one.
const minAskCount = 2

type hotSlot struct {
	hash  uint64
	start int64   // Unix ns: the first check counted (not in n)
	n     float32 // checks since start (scaled down when halved)
	// quiet (Unix ns): the owner lent nothing when last asked (the key
	// is at its limit, say), so the key is forwarded without asking until
	// then, for the lease asked for: a denied hot key must not turn every
	// forward into a Lease call.
	quiet int64
}

// rate is s's key's checks per second at now.
func (s *hotSlot) rate(now int64) float64 {
	return float64(s.n) / (float64(max(now-s.start, int64(rateFloorSpan))) / float64(time.Second))
}

// age halves s's count once it ran a rateSpan, keeping its rate: the
// rate follows the last one or two spans. A key not seen for two spans
// starts again, from now (false: this check is the first).
func (s *hotSlot) age(now int64) bool {
	switch span := now - s.start; {
	case span >= 2*int64(rateSpan):
		s.start, s.n = now, 0
		return false
	case span >= int64(rateSpan):
		s.n *= float32(float64(rateSpan/2) / float64(span))
		s.start = now - int64(rateSpan/2)
	}
	return true
}

// ways is the set of the key hashed h, in this shard (whose index took
// h's low bits: the set takes high ones).
func (sh *holderShard) ways(h uint64) *[hotWays]hotSlot {
	return &sh.hot[(h>>32)%hotSets]
}

// find returns the slot counting the key hashed h, or nil. Requires
// sh.mu held.
func (sh *holderShard) find(h uint64) *hotSlot {
	set := sh.ways(h)
	for i := range set {
		if set[i].hash == h {
			return &set[i]
		}
	}
	return nil
}

// bump counts one check of the key hashed h at now and returns its slot:
// a key not counted takes its set's way with the lower rate, of two
// equal (two keys seen once) the one that started first. Requires sh.mu
// held.
func (sh *holderShard) bump(h uint64, now int64) *hotSlot {
	s := sh.find(h)
	if s == nil {
		set := sh.ways(h)
		s = &set[0]
		if r0, r1 := set[0].rate(now), set[1].rate(now); r1 < r0 || (r1 == r0 && set[1].start < set[0].start) {
			s = &set[1]
		}
		*s = hotSlot{hash: h, start: now}
		return s // the first check: the count starts here
	}
	if s.age(now) {
		s.n++
	}
	return s
}

// holderShard is one stripe of the holder's leases, by key hash.
type holderShard struct {
	mu     sync.Mutex
	held   map[leaseKey]*heldLease
	asking map[leaseKey]bool
	hot    [hotSets][hotWays]hotSlot
	done   []*heldLease // spent or expired, to settle
	_      [40]byte     // neighbouring shards' locks off one cache line
}

const holderShards = 32

func (b *Book) shard(key string) (*holderShard, uint64) {
	h := partition.Hash(key)
	return &b.shards[h%holderShards], h
}

// Admit decides req from a lease this node holds, if one for its limit is
// live and has the hits left: Take without asking (a batch's checks).
func (b *Book) Admit(now time.Time, req limiter.Request) (limiter.Decision, bool) {
	d, ok, _, _ := b.Take(now, req, false)
	return d, ok
}

// Take decides req from a lease this node holds (none with a nil Book:
// leases off), if one for its limit is
// live and has the hits left (a spent or expired one is set aside for
// settlement). Otherwise, with mayAsk, it reports whether this node should
// ask req's owner for a lease now, and which (wantFor): the key's rate
// from this node pays for a lease (leased checks count too, so that the
// next lease is asked for at the first forward after one ends), this node
// holds no live lease for it, is not asking already, and the owner did
// not just refuse. It then marks the key as asked for; the caller must
// then Ask, or Forgo if it will not. One hash and one stripe lock per
// check, either way, and no allocation.
func (b *Book) Take(now time.Time, req limiter.Request, mayAsk bool) (d limiter.Decision, admitted bool, want peer.LeaseWant, ask bool) {
	if b == nil || req.Hits <= 0 { // leases off; a peek asks the owner: a lease knows nothing of the count
		return d, false, want, false
	}
	sh, h := b.shard(req.Key)
	lk := leaseKeyOf(req)
	ns := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.bump(h, ns)
	if hl := sh.held[lk]; hl != nil {
		if now.Before(hl.until) && hl.left >= req.Hits {
			return hl.use(now, req), true, want, false
		}
		delete(sh.held, lk)
		sh.done = append(sh.done, hl)
	}
	if !mayAsk || s.n < minAskCount || ns < s.quiet || sh.asking[lk] || !b.Leasable(req) {
		return d, false, want, false
	}
	if want, ask = b.wantFor(s.rate(ns), req); ask {
		sh.asking[lk] = true
	}
	return d, false, want, ask
}

// wantFor is the lease to ask for req's limit, whose key this node sees
// at rate checks/s: for as long as Config.MinHits checks take at that
// rate, within [Duration, MaxDuration] (and a log's cap), and the hits
// the rate needs for it; none (false) when the rate is under MinRate or
// a lease of MaxDuration would not cover MinHits checks.
func (b *Book) wantFor(rate float64, req limiter.Request) (peer.LeaseWant, bool) {
	if rate < float64(b.cfg.MinRate) || rate*b.cfg.MaxDuration.Seconds() < float64(b.cfg.MinHits) {
		return peer.LeaseWant{}, false
	}
	d := time.Duration(float64(b.cfg.MinHits) / rate * float64(time.Second))
	d = min(max(d, b.cfg.Duration), b.cfg.MaxDuration, logLeaseCap(req))
	hits := int64(math.Ceil(rate*d.Seconds() - 1e-9)) // 5/s × 1.6 s is 8, not 9
	return peer.LeaseWant{Hits: max(hits, req.Hits), Duration: d}, true
}

// use admits req from hl. Requires its shard's lock held.
func (hl *heldLease) use(now time.Time, req limiter.Request) limiter.Decision {
	before := hl.left
	hl.left -= req.Hits
	hl.used += req.Hits
	if hl.algo == limiter.SlidingWindowLog {
		// In whole milliseconds, rounded up, as the wire and the owner take
		// it (peer.LeaseUse): the owner places the hit at its grant's
		// millisecond (its clock's, truncated) plus this, and a truncated
		// offset too put it up to 2 ms before the hit, 1 ms earlier than
		// the owner stamps its own admissions: a window could admit one
		// more as the hit left it (the simulation's seed 103, a leased
		// log key 245 of 244).
		at := max(now.Sub(hl.asked), 0)
		at = (at + time.Millisecond - 1).Truncate(time.Millisecond)
		for range req.Hits {
			hl.offsets = append(hl.offsets, at)
		}
	}
	return hl.decision(now, req, before)
}

// decision is the holder's answer for a check admitted from hl: allowed,
// with what the lease has left as remaining (the key may have more), and
// the owner's times at the grant, run down.
func (hl *heldLease) decision(now time.Time, req limiter.Request, before int64) limiter.Decision {
	age := now.Sub(hl.asked)
	return limiter.Decision{Allowed: true, Limit: req.Limit, Remaining: hl.left, CurrentCount: max(req.Limit-before, 0),
		ResetAfter: max(hl.grant.ResetAfter-age, 0), RefillAfter: max(hl.grant.RefillAfter-age, 0)}
}

// Ask sends req to its owner as a lease request, for want, after
// Take said to: the owner decides req as a forward, and may lend hits for
// later checks, which this node records. asked is when Take said so,
// before the call: the lease's time runs from there, so it ends here
// before it ends on the owner, whatever the clocks say. The error is the
// call's (a *peer.CallError); nothing was lent then.
func (b *Book) Ask(ctx context.Context, owner peer.Route, req limiter.Request, want peer.LeaseWant, asked time.Time) (peer.Result, error) {
	b.metrics.event(eventAsked)
	res, g, err := b.peers.Lease(ctx, owner, req, want)
	if err != nil {
		g = peer.LeaseGrant{}
	}
	b.answered(owner, req, asked, want.Duration, g)
	if g.ID != 0 {
		b.metrics.event(eventReceived)
	}
	return res, err
}

// Forgo ends an ask Take called for that this node will not make (the
// request is invalid, or no forward slot was free): the key is not asked
// for again for the shortest lease duration.
func (b *Book) Forgo(owner peer.Route, req limiter.Request, asked time.Time) {
	b.answered(owner, req, asked, b.cfg.Duration, peer.LeaseGrant{})
}

// answered records the owner's answer to a lease this node asked for at
// asked (before the call): a grant to admit from, or none, after which
// the key is not asked for again for quiet.
func (b *Book) answered(owner peer.Route, req limiter.Request, asked time.Time, quiet time.Duration, g peer.LeaseGrant) {
	sh, h := b.shard(req.Key)
	lk := leaseKeyOf(req)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.asking, lk)
	if g.ID == 0 || g.Hits <= 0 {
		if s := sh.find(h); s != nil {
			s.quiet = asked.Add(max(quiet, b.cfg.Duration)).UnixNano()
		}
		return
	}
	lk.key = clone(lk.key)
	sh.held[lk] = &heldLease{owner: owner, grant: g, algo: req.Algorithm, asked: asked, until: asked.Add(g.Duration), left: g.Hits}
}

func clone(s string) string { return string([]byte(s)) } // don't pin a decoded request's buffer

// Tend is the book's periodic work, at now: it settles the leases this
// node holds that are spent or ended (SettleWithOwners), and expires those
// it lent that were never settled (Expire). A node runs it every quarter
// of the lease duration.
func (b *Book) Tend(ctx context.Context, now time.Time) {
	b.SettleWithOwners(ctx, now, false)
	b.Expire(now)
}

// SettleWithOwners settles the leases this node holds that are spent or
// have ended at now, or with all every one (a node that leaves gives its
// owners back what it will not use), one call per owner. A settlement
// that fails is not retried: its owner counts the lease as all used once
// it expires, which costs under-admission, never over-admission.
func (b *Book) SettleWithOwners(ctx context.Context, now time.Time, all bool) {
	for owner, uses := range b.settlements(now, all) {
		cctx, cancel := context.WithTimeout(ctx, max(b.cfg.Duration, 100*time.Millisecond))
		_, err := b.peers.Settle(cctx, owner, uses)
		cancel()
		if err != nil {
			b.metrics.event(eventSettleFailed)
			if b.settleLog.Allow() {
				b.log.Warn("lease settlement failed; the owner will count those leases as used (under-admission until they leave the window)",
					"owner", owner.ID, "leases", len(uses), "err", err)
			}
		}
	}
}

// settlements takes, by owner, the leases to settle now: those set aside
// and those expired at now, or with all every lease held.
func (b *Book) settlements(now time.Time, all bool) map[peer.Route][]peer.LeaseUse {
	out := map[peer.Route][]peer.LeaseUse{}
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for lk, hl := range sh.held {
			if all || !now.Before(hl.until) {
				delete(sh.held, lk)
				sh.done = append(sh.done, hl)
			}
		}
		for _, hl := range sh.done {
			out[hl.owner] = append(out[hl.owner], peer.LeaseUse{ID: hl.grant.ID, Used: hl.used, Offsets: hl.offsets})
		}
		sh.done = sh.done[:0]
		sh.mu.Unlock()
	}
	return out
}

// Held returns how many leases this node holds.
func (b *Book) Held() int {
	n := 0
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		n += len(sh.held)
		sh.mu.Unlock()
	}
	return n
}
