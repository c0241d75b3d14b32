package route

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
)

// Budget leases: an owner lends part of a hot key's limit to a node that
// forwards the key at a high rate, so that node admits from it without a
// hop, and the limit stays exact. docs/design.md, "Budget leases", has the
// protocol, its guarantees and its worst cases. In short:
//
//   - the holder asks (Peers.Lease) once it forwards a key at
//     Config.LeaseMinRate or more; the owner decides that check as a
//     forward, and lends Hits: it takes them from the key at once, as if
//     admitted then (a counter's current window, the log's entries at the
//     grant time), so what it admits and what it lent never exceed the
//     limit;
//   - the holder admits from the lease until it runs out or its Duration,
//     counted from when the holder asked (before the owner granted, so no
//     clock needs to agree), has passed; a counter's lease never outlives
//     the owner's fixed window;
//   - the holder then settles (Peers.Settle): what it used, and for the log
//     when (offsets from its asking). The owner gives back the unused hits
//     and, for the log, moves the used ones to their times: its state is
//     then what it would have been without the lease (each hit stamped at
//     most the forward's latency late);
//   - a lease never settled (its holder crashed or was cut off) is counted
//     as all used, at its last moment: under-admission only.

// leaseKey is one limit a lease is for.
type leaseKey struct {
	key    string
	window time.Duration
	algo   limiter.Algorithm
	limit  int64
}

func leaseKeyOf(r limiter.Request) leaseKey {
	return leaseKey{r.Key, r.Window, r.Algorithm, r.Limit}
}

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

// leases is a Service's lease state: what it holds as a forwarding node,
// what it lent as an owner.
type leases struct {
	dur     time.Duration
	minRate int
	shards  [holderShards]holderShard

	mu     sync.Mutex // guards lent and nextID
	lent   map[uint64]*lentLease
	nextID uint64
}

func newLeases(cfg Config) *leases {
	if cfg.LeaseDuration <= 0 {
		return nil
	}
	l := &leases{dur: cfg.LeaseDuration, minRate: cfg.LeaseMinRate, lent: map[uint64]*lentLease{}}
	for i := range l.shards {
		l.shards[i].held = map[leaseKey]*heldLease{}
		l.shards[i].asking = map[leaseKey]bool{}
	}
	return l
}

func (l *leases) shard(key string) (*holderShard, uint64) {
	h := partition.Hash(key)
	return &l.shards[h%holderShards], h
}

// admit decides req from a lease this node holds, if one for its limit is
// live and has the hits left: take without asking (a batch's checks).
func (l *leases) admit(now time.Time, req limiter.Request) (limiter.Decision, bool) {
	d, ok, _, _ := l.take(now, req, false)
	return d, ok
}

// take decides req from a lease this node holds, if one for its limit is
// live and has the hits left (a spent or expired one is set aside for
// settlement). Otherwise, with mayAsk, it reports whether this node should
// ask req's owner for a lease now, and for how many hits: it forwards the
// key at LeaseMinRate or more (leased checks count too, so that the next
// lease is asked for at the first forward after one ends), holds no live
// lease for it, is not asking already, and the owner did not just refuse.
// It then marks the key as asked for; the caller must call asked when the
// answer is in. One hash and one stripe lock per check, either way.
func (l *leases) take(now time.Time, req limiter.Request, mayAsk bool) (d limiter.Decision, admitted bool, want int64, ask bool) {
	if req.Hits <= 0 { // a peek asks the owner: a lease knows nothing of the count
		return d, false, 0, false
	}
	sh, h := l.shard(req.Key)
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
	threshold := max(int64(l.minRate)*int64(hotSlice)/int64(time.Second), 1)
	if !mayAsk || s.n < threshold || now.UnixNano() < s.quiet || sh.asking[lk] || !l.validLease(req) {
		return d, false, 0, false
	}
	sh.asking[lk] = true
	// Enough for the lease's duration at the rate seen in this slice so
	// far (at least 1 ms of it, so that a burst does not ask for a flood).
	elapsed := max(now.UnixNano()-s.slice*int64(hotSlice), int64(time.Millisecond))
	return d, false, max(s.n*int64(l.dur)/elapsed, req.Hits), true
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

// asked records the owner's answer to a lease this node asked for at
// asked (before the call): a grant to admit from, or none.
func (l *leases) asked(owner peer.Route, req limiter.Request, asked time.Time, g peer.LeaseGrant) {
	sh, h := l.shard(req.Key)
	lk := leaseKeyOf(req)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.asking, lk)
	if g.ID == 0 || g.Hits <= 0 {
		if s := &sh.hot[h%hotSlots]; s.hash == h {
			s.quiet = asked.Add(l.dur).UnixNano()
		}
		return
	}
	lk.key = clone(lk.key)
	sh.held[lk] = &heldLease{owner: owner, grant: g, algo: req.Algorithm, asked: asked, until: asked.Add(g.Duration), left: g.Hits}
}

func clone(s string) string { return string([]byte(s)) } // don't pin a decoded request's buffer

// settlements takes, by owner, the leases to settle now: those set aside
// and those expired at now, or with all every lease held.
func (l *leases) settlements(now time.Time, all bool) map[peer.Route][]peer.LeaseUse {
	out := map[peer.Route][]peer.LeaseUse{}
	for i := range l.shards {
		sh := &l.shards[i]
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

// held returns how many leases this node holds.
func (l *leases) heldCount() int {
	n := 0
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		n += len(sh.held)
		sh.mu.Unlock()
	}
	return n
}

// lentLease is a lease this node lent as an owner, until it is settled or
// expires.
type lentLease struct {
	origin   string
	key      string
	window   time.Duration
	algo     limiter.Algorithm
	hits     int64
	granted  int64 // ms, this node's clock: the log's placeholders are here
	windowID int64 // the counter's fixed window at the grant
	dur      time.Duration
}

// end is the last moment the holder may admit under l (ms): the holder's
// clock started before the grant, so it stops before this.
func (ll *lentLease) end() int64 { return ll.granted + ll.dur.Milliseconds() }

// leasesOn returns the leases lent on key at now.
func (l *leases) leasesOn(now time.Time, key string) []peer.LeaseInfo {
	if l == nil {
		return nil
	}
	ms := now.UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []peer.LeaseInfo
	for _, ll := range l.lent {
		if ll.key == key {
			out = append(out, peer.LeaseInfo{Holder: ll.origin, Hits: ll.hits, ExpiresIn: time.Duration(max(ll.end()-ms, 0)) * time.Millisecond})
		}
	}
	slices.SortFunc(out, func(a, b peer.LeaseInfo) int { return int(a.ExpiresIn - b.ExpiresIn) })
	return out
}

func (l *leases) lentCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lent)
}

// validLease reports whether req's limit may be leased at all: a log
// window must be long enough that a lost lease is moved to its last
// moment long before its placeholders leave the window.
func (l *leases) validLease(req limiter.Request) bool {
	if req.Hits <= 0 || req.Limit < 2 {
		return false
	}
	return req.Algorithm != limiter.SlidingWindowLog || req.Window >= minLogWindowLeases*l.dur
}

// minLogWindowLeases is how many lease durations a log window must span to
// be leased (see validLease).
const minLogWindowLeases = 20

// ctxLease bounds the calls of the lease loop.
func ctxLease(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, max(d, 100*time.Millisecond))
}

// lend records ll and returns its id.
func (l *leases) lend(ll *lentLease) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nextID++
	l.lent[l.nextID] = ll
	return l.nextID
}

// takeLent removes and returns the lease id lent to origin, or nil.
func (l *leases) takeLent(id uint64, origin string) *lentLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	ll := l.lent[id]
	if ll == nil || ll.origin != origin {
		return nil
	}
	delete(l.lent, id)
	return ll
}

// takeExpired removes and returns the leases that ended at or before
// cutoff (ms).
func (l *leases) takeExpired(cutoff int64) []*lentLease {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*lentLease
	for id, ll := range l.lent {
		if ll.end() <= cutoff {
			out = append(out, ll)
			delete(l.lent, id)
		}
	}
	return out
}

// placeholders are the log entries ll took at its grant.
func (ll *lentLease) placeholders() []int64 {
	ph := make([]int64, ll.hits)
	for i := range ph {
		ph[i] = ll.granted
	}
	return ph
}
