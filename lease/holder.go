package lease

import (
	"context"
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

// hotSlots is how many keys each holder shard tracks the forwarding rate
// of; a key that loses its slot to another just starts counting again.
const hotSlots = 64

// hotSlice is the time over which a key's forwards are counted before the
// count starts again: a rate of LeaseMinRate is LeaseMinRate × hotSlice
// forwards in one slice.
const hotSlice = 100 * time.Millisecond

type hotSlot struct {
	hash  uint64
	slice int64
	n     int64
	// quiet (Unix ns): the owner lent nothing when last asked (the key
	// is at its limit, say), so the key is forwarded without asking until
	// then, for a lease duration: a denied hot key must not turn every
	// forward into a Lease call.
	quiet int64
}

// bump counts one check of the key hashed h at now and returns its slot.
// Requires sh.mu held.
func (sh *holderShard) bump(h uint64, now time.Time) *hotSlot {
	slice := now.UnixNano() / int64(hotSlice)
	s := &sh.hot[h%hotSlots]
	switch {
	case s.hash != h:
		*s = hotSlot{hash: h, slice: slice}
	case s.slice != slice:
		s.slice, s.n = slice, 0
	}
	s.n++
	return s
}

// holderShard is one stripe of the holder's leases, by key hash.
type holderShard struct {
	mu     sync.Mutex
	held   map[leaseKey]*heldLease
	asking map[leaseKey]bool
	hot    [hotSlots]hotSlot
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
// ask req's owner for a lease now, and for how many hits: it forwards the
// key at Config.MinRate or more (leased checks count too, so that the next
// lease is asked for at the first forward after one ends), holds no live
// lease for it, is not asking already, and the owner did not just refuse.
// It then marks the key as asked for; the caller must then Ask, or Forgo
// if it will not. One hash and one stripe lock per check, either way.
func (b *Book) Take(now time.Time, req limiter.Request, mayAsk bool) (d limiter.Decision, admitted bool, want int64, ask bool) {
	if b == nil || req.Hits <= 0 { // leases off; a peek asks the owner: a lease knows nothing of the count
		return d, false, 0, false
	}
	sh, h := b.shard(req.Key)
	lk := leaseKeyOf(req)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.bump(h, now)
	if hl := sh.held[lk]; hl != nil {
		if now.Before(hl.until) && hl.left >= req.Hits {
			return hl.use(now, req), true, 0, false
		}
		delete(sh.held, lk)
		sh.done = append(sh.done, hl)
	}
	threshold := max(int64(b.cfg.MinRate)*int64(hotSlice)/int64(time.Second), 1)
	if !mayAsk || s.n < threshold || now.UnixNano() < s.quiet || sh.asking[lk] || !b.Leasable(req) {
		return d, false, 0, false
	}
	sh.asking[lk] = true
	// Enough for the lease's duration at the rate seen in this slice so
	// far (at least 1 ms of it, so that a burst does not ask for a flood).
	elapsed := max(now.UnixNano()-s.slice*int64(hotSlice), int64(time.Millisecond))
	return d, false, max(s.n*int64(b.cfg.Duration)/elapsed, req.Hits), true
}

// use admits req from hl. Requires its shard's lock held.
func (hl *heldLease) use(now time.Time, req limiter.Request) limiter.Decision {
	before := hl.left
	hl.left -= req.Hits
	hl.used += req.Hits
	if hl.algo == limiter.SlidingWindowLog {
		at := max(now.Sub(hl.asked), 0)
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

// Ask sends req to its owner as a lease request, for want hits, after
// Take said to: the owner decides req as a forward, and may lend hits for
// later checks, which this node records. asked is when Take said so,
// before the call: the lease's time runs from there, so it ends here
// before it ends on the owner, whatever the clocks say. The error is the
// call's (a *peer.CallError); nothing was lent then.
func (b *Book) Ask(ctx context.Context, owner peer.Route, req limiter.Request, want int64, asked time.Time) (peer.Result, error) {
	b.metrics.event(eventAsked)
	res, g, err := b.peers.Lease(ctx, owner, req, want)
	if err != nil {
		g = peer.LeaseGrant{}
	}
	b.answered(owner, req, asked, g)
	if g.ID != 0 {
		b.metrics.event(eventReceived)
	}
	return res, err
}

// Forgo ends an ask Take called for that this node will not make (the
// request is invalid, or no forward slot was free): the key is not asked
// for again for a lease duration.
func (b *Book) Forgo(owner peer.Route, req limiter.Request, asked time.Time) {
	b.answered(owner, req, asked, peer.LeaseGrant{})
}

// answered records the owner's answer to a lease this node asked for at
// asked (before the call): a grant to admit from, or none.
func (b *Book) answered(owner peer.Route, req limiter.Request, asked time.Time, g peer.LeaseGrant) {
	sh, h := b.shard(req.Key)
	lk := leaseKeyOf(req)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.asking, lk)
	if g.ID == 0 || g.Hits <= 0 {
		if s := &sh.hot[h%hotSlots]; s.hash == h {
			s.quiet = asked.Add(b.cfg.Duration).UnixNano()
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
