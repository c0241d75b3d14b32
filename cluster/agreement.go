package cluster

import (
	"encoding/json"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Ownership moves only on agreement. memberlist declares a member dead on
// this member's evidence alone: its own probes, and a suspicion that no
// other member refuted in time. That is not the same as dead: behind a
// bridge (this member cannot reach it, a third can) or a slow link, the
// member is alive and deciding its keys, and taking them over here would
// make two deciders that each claim to be the owner. So a member
// memberlist declares dead (not one that left) stays in this member's
// ring, doubted (StateUnreachable), while it pings it itself (memberlist
// spreads another member's declaration by gossip: one that still reaches
// the member must not agree) and asks every other live member to ping it:
//   - one reaches it: it is kept, and asked about again every
//     Config.ConfirmInterval until memberlist sees it alive again (its
//     refutation arrives through the others) or nobody reaches it;
//     meanwhile this member's checks for its keys go through a relay;
//   - nobody reaches it, and this member with those that answered are a
//     majority of the cluster (the ring, with the members already gone
//     unconfirmed): it is gone, confirmed, and leaves the ring;
//   - nobody reaches it, but too few answered for a majority (a ring of
//     two, either side of an even split, the small side of a partition):
//     it leaves the ring unconfirmed (Member.Unconfirmed). This member
//     may be cut off itself, with the others deciding its keys, so its
//     node marks every answer degraded until the member returns or a
//     later round, asked every ConfirmInterval, finds a majority.
// A majority cannot form on two sides at once, so at most one side of a
// partition answers without saying it is degraded.
// The cost is detection time, after memberlist's declaration: this
// member's own pings (pingTries × memberlist's ProbeTimeout: 300 ms local,
// 750 ms LAN) and a round, at most Config.ConfirmTimeout (1 s local, 2 s
// LAN).

// probe is a request to ping Target (Reachable unset) or its answer,
// sent over memberlist's reliable user messages (encrypted as gossip is).
type probe struct {
	ID        uint64 `json:"id"`
	From      string `json:"from"`
	Target    string `json:"target"`
	Reachable bool   `json:"reachable,omitempty"`
	// Left: the witness saw the target leave gracefully, or the target,
	// asked about itself, is leaving. A member whose copy of the leaver's
	// dead message reached it before the "leaving" metadata did takes the
	// leave for a failure: memberlist sends the two as separate gossip,
	// and the dead message invalidates what is left of the other's
	// retransmissions (and its Node.State, which would say "left", is
	// never set: only its internal state is). The leaver still answers
	// while it hands off, so it is asked too, and says so at once.
	Left bool `json:"left,omitempty"`
}

const (
	msgProbe      byte = 'p' // a request: ping Target and answer
	msgProbeReply byte = 'r' // an answer
	// pingTries is how many pings a witness sends before it answers that
	// it cannot reach the target: one lost UDP packet or one slow
	// scheduling must not make a live member look dead.
	pingTries = 3
)

// doubt is a member memberlist declared dead that this member has not
// yet agreed to take out of its ring.
type doubt struct {
	m       Member
	since   time.Time
	next    time.Time // when to ask about it again
	asking  bool      // a round is out
	reached string    // the witness that last reached it, for the log
}

// agreement is the protocol above: this member's rounds about the
// members it doubts, and its answers as a witness of others'. It reads
// and changes the membership of the Cluster it belongs to, under that
// Cluster's lock.
type agreement struct {
	*Cluster
	rounds    *rounds
	doubtKick chan struct{} // capacity 1: wakes agree
}

func newAgreement(c *Cluster) *agreement {
	return &agreement{Cluster: c, rounds: newRounds(), doubtKick: make(chan struct{}, 1)}
}

// rounds holds the rounds this member has out and the requests it serves
// as a witness.
type rounds struct {
	mu      sync.Mutex
	seq     uint64
	pending map[uint64]chan probe // round id → its answers
	// requests are the pings other members asked of this one, served by
	// witness in turn; a full queue drops a request (its asker counts it
	// as unanswered).
	requests chan probe
}

func newRounds() *rounds {
	return &rounds{pending: map[uint64]chan probe{}, requests: make(chan probe, 32)}
}

// doubtMember keeps a member memberlist declared dead in the ring until
// another member agrees (see above). Called by the event delegate.
func (c *agreement) doubtMember(m Member) {
	c.mu.Lock()
	if _, ok := c.doubted[m.ID]; !ok {
		c.doubted[m.ID] = &doubt{m: m, since: time.Now()}
	}
	c.mu.Unlock()
	c.log.Info("member unreachable from here; asking the others before taking over its keys", "member", m.ID)
	select {
	case c.doubtKick <- struct{}{}:
	default:
	}
}

// agree runs the rounds: whenever a member is doubted, and every
// ConfirmInterval for those still doubted or gone unconfirmed.
func (c *agreement) agree() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ConfirmInterval)
	defer t.Stop()
	var rounds sync.WaitGroup
	defer rounds.Wait()
	for {
		select {
		case <-c.stop:
			return
		case <-c.doubtKick:
		case <-t.C:
		}
		for _, target := range c.dueRounds(time.Now()) {
			rounds.Go(func() { c.settle(target, c.askWitnesses(target)) })
		}
	}
}

// dueRounds marks and returns the members to ask about now: doubted ones
// without a round out whose time has come, and members gone unconfirmed.
func (c *agreement) dueRounds(now time.Time) []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Member
	for _, d := range c.doubted {
		if !d.asking && !now.Before(d.next) {
			d.asking = true
			out = append(out, d.m)
		}
	}
	for id, f := range c.failed {
		if f.unconfirmed && !f.asking {
			f.asking = true
			c.failed[id] = f
			out = append(out, Member{ID: id, GossipAddr: f.addr, GRPCAddr: f.grpc, State: StateFailed})
		}
	}
	return out
}

// verdict is what a round learnt about a member.
type verdict struct {
	reached  string   // a witness that reached it, or ""
	left     string   // a witness that saw it leave gracefully, or ""
	answered []string // the witnesses that answered
	// cluster is the size a majority is taken of: the ring (with the
	// member asked about) and the members already gone unconfirmed.
	cluster int
}

// majority reports whether this member and the witnesses that answered
// are more than half of the cluster.
func (v verdict) majority() bool { return 2*(1+len(v.answered)) > v.cluster }

// askWitnesses asks every other live member to ping target, and target
// whether it is leaving, and returns what they said within
// ConfirmTimeout.
func (c *agreement) askWitnesses(target Member) verdict {
	witnesses, size := c.witnesses(target.ID)
	v := verdict{cluster: size}
	id, answers := c.rounds.open(len(witnesses) + 1) // and the target's own
	defer c.rounds.close(id)
	req, _ := json.Marshal(probe{ID: id, From: c.cfg.ID, Target: target.ID})
	for _, w := range append(witnesses, target) {
		go c.send(w, msgProbe, req) // bounded by memberlist's TCPTimeout; never blocks the round
	}
	// This member's own pings too, while the witnesses ping (their
	// answers wait in answers, which holds one per witness): memberlist's
	// dead message spreads by gossip, so a member that still reaches the
	// target hears it declared dead by another, and must not agree.
	// The target's own answer is awaited only when it answered those
	// pings: a live target answers in a round trip, and a dead one must
	// not hold a round that its witnesses have already settled.
	awaitTarget := c.reaches(target.ID)
	if awaitTarget {
		v.reached = c.cfg.ID
	}
	timeout := time.NewTimer(c.cfg.ConfirmTimeout)
	defer timeout.Stop()
	for len(v.answered) < len(witnesses) || awaitTarget {
		select {
		case a := <-answers:
			if a.Left {
				v.left = a.From
				return v
			}
			if a.From == target.ID {
				awaitTarget = false // alive and not leaving: its pings said as much; it is no witness
				continue
			}
			v.answered = append(v.answered, a.From)
			if a.Reachable && v.reached == "" {
				v.reached = a.From
			}
		case <-timeout.C:
			return v
		case <-c.stop:
			return v
		}
	}
	return v
}

// witnesses returns the live members that can vouch for target (all but
// this one, target, and those this member doubts itself), and the size
// of the cluster a majority is taken of (verdict.cluster).
func (c *agreement) witnesses(target string) ([]Member, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Member
	size := len(c.members)
	if _, ok := c.members[target]; !ok {
		size++ // a re-check of one gone unconfirmed: counted below too
	}
	for id, m := range c.members {
		if _, doubted := c.doubted[id]; id != c.cfg.ID && id != target && !doubted {
			out = append(out, m)
		}
	}
	for id, f := range c.failed {
		if f.unconfirmed && id != target {
			size++
		}
	}
	return out, size
}

// settle acts on a round's verdict about target (see the rule above).
func (c *agreement) settle(target Member, v verdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.failed[target.ID]; ok && f.unconfirmed { // a re-check of one gone unconfirmed
		f.asking = false
		if v.reached == "" && v.majority() {
			f.unconfirmed = false
			c.log.Info("member gone: confirmed by a majority", "member", target.ID, "by", v.answered)
			c.kickChange()
		}
		c.failed[target.ID] = f
		return
	}
	d, ok := c.doubted[target.ID]
	if !ok {
		return // alive again, or left, meanwhile
	}
	d.asking = false
	if v.left != "" {
		delete(c.doubted, target.ID)
		delete(c.members, target.ID)
		m := d.m
		m.State = StateLeft
		c.left[target.ID] = m
		c.log.Info("member gone: it left, as a member saw (or it said itself)", "member", target.ID, "seen_by", v.left)
		c.kickChange()
		return
	}
	if v.reached != "" {
		d.next = time.Now().Add(c.cfg.ConfirmInterval)
		if d.reached == "" {
			c.log.Warn("member unreachable from here but reachable from another: keeping its keys where they are (checks go through a relay)",
				"member", target.ID, "reached_by", v.reached)
		}
		d.reached = v.reached
		return
	}
	delete(c.doubted, target.ID)
	delete(c.members, target.ID)
	unconfirmed := !v.majority()
	c.failed[target.ID] = failure{addr: d.m.GossipAddr, grpc: d.m.GRPCAddr, boot: d.m.Boot, restored: d.m.Restored, since: d.since, unconfirmed: unconfirmed}
	if unconfirmed {
		c.log.Warn("member gone, unconfirmed: too few members answered for a majority; this side may be cut off, its answers are marked degraded until the member returns or a majority confirms",
			"member", target.ID, "answered", v.answered, "cluster", v.cluster)
	} else {
		c.log.Info("member gone: confirmed by a majority", "member", target.ID, "by", v.answered, "cluster", v.cluster)
	}
	c.kickChange()
}

// open registers a round expecting n answers.
func (a *rounds) open(n int) (uint64, <-chan probe) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	ch := make(chan probe, n)
	a.pending[a.seq] = ch
	return a.seq, ch
}

func (a *rounds) close(id uint64) {
	a.mu.Lock()
	delete(a.pending, id)
	a.mu.Unlock()
}

// answer delivers a witness's answer (From: the witness) to its round, if
// still open.
func (a *rounds) answer(p probe) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ch, ok := a.pending[p.ID]; ok {
		select {
		case ch <- p:
		default: // more answers than witnesses asked: a forgery, dropped
		}
	}
}

// receive handles a user message (the delegate's NotifyMsg): it must not
// block, and b is memberlist's buffer.
func (c *agreement) receive(b []byte) {
	if len(b) < 2 {
		return
	}
	var p probe
	if err := json.Unmarshal(b[1:], &p); err != nil {
		c.log.Debug("dropping an unreadable user message", "err", err)
		return
	}
	switch b[0] {
	case msgProbe:
		select {
		case c.rounds.requests <- p:
		default:
			c.log.Debug("dropping a ping request: too many queued", "from", p.From, "target", p.Target)
		}
	case msgProbeReply:
		c.rounds.answer(p)
	}
}

// witness serves other members' ping requests, one at a time.
func (c *agreement) witness() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case p := <-c.rounds.requests:
			asker, ok := c.liveMember(p.From)
			if !ok {
				continue // not a member this one knows alive: nobody to answer
			}
			answer := probe{ID: p.ID, From: c.cfg.ID, Target: p.Target}
			switch {
			case p.Target == c.cfg.ID: // asked about itself: it answers, so it is reachable
				answer.Left, answer.Reachable = c.leaving(), true
			default:
				if answer.Left = c.hasLeft(p.Target); !answer.Left {
					answer.Reachable = c.reaches(p.Target)
				}
			}
			out, _ := json.Marshal(answer)
			c.send(asker, msgProbeReply, out)
		}
	}
}

// leaving reports whether this member is leaving (Leave has begun).
func (c *agreement) leaving() bool {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	return c.meta.Leaving
}

func (c *agreement) hasLeft(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.left[id]
	return ok
}

func (c *agreement) liveMember(id string) (Member, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.members[id]
	return m, ok
}

// reaches pings target (a member this one knows, alive or doubted) up to
// pingTries times, each waiting memberlist's ProbeTimeout.
func (c *agreement) reaches(target string) bool {
	c.mu.Lock()
	m, ok := c.members[target]
	c.mu.Unlock()
	if !ok {
		return false
	}
	addr, err := net.ResolveUDPAddr("udp", m.GossipAddr)
	if err != nil {
		return false
	}
	for range pingTries {
		select {
		case <-c.stop:
			return false
		default:
		}
		if _, err := c.ml.Ping(target, addr); err == nil {
			return true
		}
	}
	return false
}

// send sends one user message to m over memberlist's reliable transport.
func (c *agreement) send(m Member, kind byte, body []byte) {
	host, port, err := splitHostPort(m.GossipAddr)
	if err != nil {
		return
	}
	msg := append([]byte{kind}, body...)
	node := &memberlist.Node{Name: m.ID, Addr: net.ParseIP(host), Port: uint16(port)}
	if err := c.ml.SendReliable(node, msg); err != nil {
		c.log.Debug("sending to a member", "member", m.ID, "err", err)
	}
}
