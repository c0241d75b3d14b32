package route

import (
	"context"
	"log/slog"
	"math/bits"
	"time"

	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/reset"
)

// core is what the three roles share: the dependencies, and deciding a
// key here, by this node's ownership. Safe for concurrent use.
type core struct {
	cfg     Config
	deps    Deps // with the optional ones defaulted
	store   *limiter.Store
	metrics *Metrics
	log     *slog.Logger
	// heirs: replication is on, so each partition has an heir that holds
	// its replica (Deps.Failover given). Off, no member is any key's heir.
	heirs    bool
	inflight *slots // forwarded checks waiting for their owners
	handoffs *handoff.Receiver
	resets   *reset.Resetter
	// Warnings a fault could repeat for every request: one a second each.
	unreachableLog, overloadLog, refusedLog, peerRefusedLog, lateLog logging.Gate
}

func newCore(cfg Config, deps Deps) (*core, error) {
	if err := deps.validate(); err != nil {
		return nil, err
	}
	heirs := deps.Failover != nil
	rd := reset.Deps{Self: deps.NodeID, Store: deps.Store, Now: deps.Now, Peers: deps.Peers, Logger: deps.Logger}
	if deps.Cluster != nil { // alone, a reset has nobody else to ask
		rd.Members = deps.Cluster
	}
	deps = deps.withDefaults()
	c := &core{cfg: cfg, deps: deps, store: deps.Store, metrics: deps.Metrics, log: deps.Logger, heirs: heirs,
		inflight: &slots{limit: int64(cfg.MaxInflightForwards)}}
	var err error
	if c.handoffs, err = handoff.NewReceiver(handoff.ReceiverDeps{Self: deps.NodeID, Store: deps.Store.Transfer(), Replicas: deps.Failover,
		Leaving: deps.Leaving, Now: deps.Now, Logger: deps.Logger, Metrics: deps.HandoffMetrics}); err != nil {
		return nil, err
	}
	if c.resets, err = reset.New(rd); err != nil {
		return nil, err
	}
	return c, nil
}

// owner returns key's owner, and whether it is this node.
func (c *core) owner(key string) (peer.Route, bool) {
	o := c.deps.Cluster.Owner(key)
	return o, o.ID == c.deps.NodeID || o.ID == ""
}

// heirOf returns the member that inherits key if its owner fails: its
// partition's backup, which holds its replica. False without replication
// or in a ring of one.
func (c *core) heirOf(key string) (peer.Route, bool) {
	if !c.heirs {
		return peer.Route{}, false
	}
	return c.deps.Cluster.Heir(key)
}

// share returns how many members are live and how many this node knows
// (live and recently failed), for FallbackShare.
func (c *core) share() (live, known int) {
	live, known = c.deps.Cluster.Share()
	return max(live, 1), max(known, live, 1)
}

// settledOwner returns key's owner; when that is this node, it first waits
// for the key's partition to settle (awaitSettled) and, after a wait
// (waited), asks again: the ring may have moved on meanwhile (at a heal, a
// partition that came here while the members were coming back goes to one
// of them a moment later), and deciding a key this node no longer owns
// makes two deciders, each sure of itself (jepsen-lite partition-share: 11
// of 10 admitted in a window after the heal, none of them degraded).
func (c *core) settledOwner(ctx context.Context, key string) (owner peer.Route, local, waited bool) {
	owner, local = c.owner(key)
	if local && c.awaitSettled(ctx, key) {
		owner, local = c.owner(key)
		return owner, local, true
	}
	return owner, local, false
}

// awaitSettled waits, at most Config.SettleWait and within ctx, for the
// state of key's partition to arrive if it has just come to this node
// (Cluster.Settling): deciding first would decide from less than the key
// holds. Callers that decide by the owner use settledOwner.
func (c *core) awaitSettled(ctx context.Context, key string) (waited bool) {
	if c.cfg.SettleWait <= 0 {
		return false
	}
	ch := c.deps.Cluster.Settling(key)
	if ch == nil {
		return false
	}
	t := time.NewTimer(c.cfg.SettleWait)
	defer t.Stop()
	// Once one wait ends another may begin: a joining node's ring, once it
	// holds the members, may give it the key's partition, whose state is
	// then on its way. The same deadline bounds them all.
	for ch != nil {
		select {
		case <-ch:
			ch = c.deps.Cluster.Settling(key)
		case <-t.C:
			return true
		case <-ctx.Done():
			return true
		}
	}
	return true
}

// decide decides req on this node's store at now: against this node's
// share of the limit while members have failed (FallbackShare), and
// marked degraded when this node's ownership of the key is contested.
func (c *core) decide(now time.Time, req limiter.Request) peer.Result {
	if c.cfg.Fallback == FallbackShare && req.Op.Admits() {
		if live, known := c.share(); live < known {
			return c.decideShare(now, req, live, known)
		}
	}
	d, err := c.store.Apply(now, req)
	if err != nil {
		return peer.Result{Err: err}
	}
	return peer.Result{Decision: d, Owner: c.deps.NodeID, Degraded: c.deps.Cluster.Contested(req.Key)}
}

// decideShare decides req against part ÷ whole of its limit (at least
// 1), on this node's store; the answer is Degraded and says the limit it
// was held to.
func (c *core) decideShare(now time.Time, req limiter.Request, part, whole int) peer.Result {
	if err := c.store.Validate(req); err != nil {
		return peer.Result{Err: err}
	}
	shared := req
	shared.Limit = max(req.Limit*int64(part)/int64(whole), 1) // no overflow: part ≤ whole, and whole is a member count
	if req.Burst != 0 {
		// A GCRA bucket's burst is its share too, in the shared limit's
		// proportion (as the default burst, the limit, is): each side
		// admitting the whole burst at once would admit it once a side.
		shared.Burst = shareOf(req.Burst, shared.Limit, req.Limit)
	}
	over := req.Hits > shared.BurstOrLimit() // more than the whole share: refused, counting nothing
	if over {
		shared.Op, shared.Hits, shared.TTL = limiter.OpCheck, 0, 0 // a peek: a reservation over the share opens nothing
	}
	d, err := c.store.Apply(now, shared)
	if err != nil {
		return peer.Result{Err: err}
	}
	if over {
		d.Allowed = false
	}
	return peer.Result{Decision: d, Owner: c.deps.NodeID, Degraded: true}
}

// shareOf is max(1, floor(n × part ÷ whole)) for part ≤ whole, computed
// in 128 bits: a burst times a limit may pass int64.
func shareOf(n, part, whole int64) int64 {
	hi, lo := bits.Mul64(uint64(n), uint64(part))
	q, _ := bits.Div64(hi, lo, uint64(whole)) // hi < whole: the quotient is at most n
	return max(int64(q), 1)
}

// asHeir decides req, whose owner cannot be reached, here from the
// owner's replica merged into this node's state, if this node is the
// key's heir; the answer is Degraded (it misses what the owner admitted
// within the replication lag). false if this node is not the heir.
func (c *core) asHeir(now time.Time, req limiter.Request) (peer.Result, bool) {
	h, ok := c.heirOf(req.Key)
	if !ok || h.ID != c.deps.NodeID {
		return peer.Result{}, false
	}
	c.deps.Failover.Promote(req.Key)
	res := c.decide(now, req)
	res.Degraded = res.Err == nil
	return res, res.Err == nil
}

// callerGone reports whether the caller gave up. Past its deadline it has,
// even if ctx does not say so yet: the context's timer fires
// asynchronously, and a forward bounded by the same deadline can fail
// first, which must not count as the owner's unavailability.
func callerGone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
