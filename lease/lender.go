package lease

import (
	"math"
	"slices"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// The lender's side: an owner lends part of a key's limit, takes it from
// the key at once, and gives back what the holder did not use.

// lentLease is a lease this node lent as an owner, until it is settled or
// expires.
type lentLease struct {
	origin   string
	key      string
	window   time.Duration
	algo     limiter.Algorithm
	cal      limiter.Calendar
	hits     int64
	granted  int64 // ms, this node's clock: the log's placeholders are here
	windowID int64 // the counter's fixed window (a calendar's period) at the grant
	dur      time.Duration
}

// end is the last moment the holder may admit under l (ms): the holder's
// clock started before the grant, so it stops before this.
func (ll *lentLease) end() int64 { return ll.granted + ll.dur.Milliseconds() }

// On returns the leases lent on key at now; none on a nil Book.
func (b *Book) On(now time.Time, key string) []peer.LeaseInfo {
	if b == nil {
		return nil
	}
	ms := now.UnixMilli()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []peer.LeaseInfo
	for _, ll := range b.lent {
		if ll.key == key {
			out = append(out, peer.LeaseInfo{Holder: ll.origin, Hits: ll.hits, ExpiresIn: time.Duration(max(ll.end()-ms, 0)) * time.Millisecond})
		}
	}
	slices.SortFunc(out, func(a, b peer.LeaseInfo) int { return int(a.ExpiresIn - b.ExpiresIn) })
	return out
}

// Lent returns how many leases this node has lent and not yet seen
// settled or expired.
func (b *Book) Lent() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lent)
}

// record records ll and returns its id.
func (b *Book) record(ll *lentLease) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	b.lent[b.nextID] = ll
	return b.nextID
}

// takeLent removes and returns the lease id lent to origin, or nil.
func (b *Book) takeLent(id uint64, origin string) *lentLease {
	b.mu.Lock()
	defer b.mu.Unlock()
	ll := b.lent[id]
	if ll == nil || ll.origin != origin {
		return nil
	}
	delete(b.lent, id)
	return ll
}

// takeExpired removes and returns the leases whose grace after their end
// has passed at now (ms).
func (b *Book) takeExpired(now int64) []*lentLease {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*lentLease
	for id, ll := range b.lent {
		if ll.end()+b.grace(ll).Milliseconds() <= now {
			out = append(out, ll)
			delete(b.lent, id)
		}
	}
	return out
}

// settleGraceLeases is how many of a lease's durations (at least
// Config.Duration) after it ends its owner waits for the holder's
// settlement before counting it all used. The holder settles within a
// quarter of Config.Duration of the end, in a call it gives one Duration
// (at least 100 ms), so one duration of grace would do on an idle
// machine; on a loaded one a settlement arriving a few hundred
// milliseconds late found its lease expired, and the hits it gave back
// stayed taken: under-admission in a healthy cluster. Ten durations (2.5 s
// for the shortest lease by default, 50 s for the longest) outlast any
// stall short of a failure, and a lease's own duration stays well inside
// the log window it may be lent from (at least minLogWindowLeases of
// them, and of Config.Duration: logLeaseCap), so the placeholders move,
// at end + grace ≤ grant + 11/20 of the window, before they could leave
// it. Waiting longer costs nothing but the record: a lost lease's hits
// count the same until it expires.
const settleGraceLeases = 10

// grace is how long after ll ends its owner waits for its settlement.
func (b *Book) grace(ll *lentLease) time.Duration {
	return settleGraceLeases * max(ll.dur, b.cfg.Duration)
}

// placeholders are the log entries ll took at its grant.
func (ll *lentLease) placeholders() []int64 {
	ph := make([]int64, ll.hits)
	for i := range ph {
		ph[i] = ll.granted
	}
	return ph
}

// Lend lends origin up to want.Hits hits of req's limit for up to
// want.Duration (0, a member's from before durations were asked for:
// Config.Duration), which the owner's store has just allowed req under
// with room hits left, and returns the grant (none: a zero ID). It takes
// the hits from the key at once, with an ordinary decision of that many,
// so that what this node admits and what it lent never exceed the limit:
// at most half of room and 1/maxLeaseShare of the limit, and none for a
// limit that may not be leased (Leasable). The duration is capped (leaseFor), and the hits with it.
func (b *Book) Lend(now time.Time, origin string, req limiter.Request, want peer.LeaseWant, room int64) peer.LeaseGrant {
	if b == nil || want.Hits < 1 || !b.Leasable(req) { // a nil Book lends nothing: leases off
		return peer.LeaseGrant{}
	}
	ms := max(now.UnixMilli(), 0)
	dur, hits := b.leaseFor(ms, req, want)
	if hits = min(hits, room/2, req.Limit/maxLeaseShare); hits < 1 {
		return peer.LeaseGrant{}
	}
	ll := &lentLease{origin: clone(origin), key: clone(req.Key), window: req.Window, algo: req.Algorithm, cal: req.Calendar,
		hits: hits, dur: dur}
	take := req
	take.Hits = hits
	// Where the store put the hits, not this clock's now: the key may
	// have moved past it while the lock was waited for.
	d, at, err := b.store.CheckPlaced(now, take)
	if err != nil || !d.Allowed {
		return peer.LeaseGrant{}
	}
	ll.granted = at
	ll.windowID, _ = req.FixedWindow(at)
	id := b.record(ll)
	b.metrics.event(eventGranted)
	b.metrics.hits(hitsLent, hits)
	return peer.LeaseGrant{ID: id, Hits: hits, Duration: ll.dur, ResetAfter: d.ResetAfter, RefillAfter: d.RefillAfter}
}

// leaseFor is the lease this owner lends for want at ms (none: 0 hits):
// as long as asked (0: Config.Duration), at most Config.MaxDuration, for
// the log at most 1/minLogWindowLeases of its window (logLeaseCap), and
// for the counter until the fixed window (a calendar limit's period) it
// is taken in ends, so that its hits cannot move to another; one shorter
// than a quarter of Config.Duration is not worth a call and is not lent.
// A lease cut shorter than asked keeps the hits its holder's rate needs
// for what is left of it, no more: the rest would sit unused.
func (b *Book) leaseFor(ms int64, req limiter.Request, want peer.LeaseWant) (time.Duration, int64) {
	asked := want.Duration
	if asked <= 0 {
		asked = b.cfg.Duration
	}
	dur := min(asked, b.cfg.MaxDuration, logLeaseCap(req))
	if req.Algorithm == limiter.SlidingWindowCounter {
		_, end := req.FixedWindow(ms)
		dur = min(dur, time.Duration(end-ms-1)*time.Millisecond)
	}
	if dur < b.cfg.Duration/4 {
		return 0, 0
	}
	hits := want.Hits
	if dur < asked { // ⌈hits × dur ÷ asked⌉, in floats: no overflow, whatever a member asks
		hits = min(max(int64(math.Ceil(float64(want.Hits)*(float64(dur)/float64(asked))-1e-9)), 1), want.Hits)
	}
	return dur, hits
}

// Settle settles the leases origin reports on, at now: for each lease it
// holds from this node, give back what it did not use and, for the log,
// move what it used to when it was admitted. A lease already expired here
// (counted as all used) or not origin's is skipped; it returns how many
// it settled.
func (b *Book) Settle(now time.Time, origin string, uses []peer.LeaseUse) int {
	if b == nil { // leases off: nothing was lent
		return 0
	}
	settled := 0
	for _, u := range uses {
		ll := b.takeLent(u.ID, origin)
		if ll == nil {
			continue
		}
		b.settle(now, ll, u)
		settled++
	}
	return settled
}

// settle applies u, a holder's report, to ll. What a holder says is
// clamped to what was lent: a member cannot make the owner count less
// than the hits it admitted.
func (b *Book) settle(now time.Time, ll *lentLease, u peer.LeaseUse) {
	used := min(max(u.Used, 0), ll.hits)
	b.metrics.event(eventSettled)
	b.metrics.hits(hitsReturned, ll.hits-used)
	if ll.algo != limiter.SlidingWindowLog {
		if unused := ll.hits - used; unused > 0 {
			b.store.Transfer().Forget(now, []limiter.KeyState{{Key: ll.key, Window: ll.window, Algorithm: ll.algo, Calendar: ll.cal,
				WindowID: ll.windowID, Curr: unused}})
		}
		return
	}
	times := make([]int64, used)
	for i := range times {
		off := ll.dur // a hit the holder did not time: its lease's last moment
		if i < len(u.Offsets) {
			off = min(max(u.Offsets[i], 0), ll.dur)
		}
		times[i] = ll.granted + off.Milliseconds()
	}
	b.store.Transfer().MoveLog(now, ll.key, ll.window, ll.placeholders(), times)
}

// Expire counts every lease lent that its holder has not settled
// settleGraceLeases of its durations after it ended (grace), at now, as
// all used,
// at its last moment: the log's placeholders move there, where they
// outlast any hit the holder can have admitted, so a lost lease costs
// under-admission only. It returns how many it expired. The node runs it
// with SettleWithOwners.
func (b *Book) Expire(now time.Time) int {
	expired := b.takeExpired(now.UnixMilli())
	for _, ll := range expired {
		b.metrics.event(eventExpired)
		if ll.algo == limiter.SlidingWindowLog {
			last := make([]int64, ll.hits)
			for i := range last {
				last[i] = ll.end()
			}
			b.store.Transfer().MoveLog(now, ll.key, ll.window, ll.placeholders(), last)
		}
	}
	return len(expired)
}
