// Package cluster is a node's membership: who is in the cluster and where
// their gRPC APIs listen. It runs hashicorp/memberlist (SWIM gossip) and
// hides it: no memberlist type leaves this package. Changes reach the
// caller as full membership snapshots through Config.OnChange.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// State is a member's state as this node sees it.
type State string

const (
	StateAlive  State = "alive"  // in the ring (also while merely suspected)
	StateFailed State = "failed" // declared dead; the reconnector retries it
	StateLeft   State = "left"   // left gracefully
	// StateUnreachable: declared dead by this member's failure detector
	// alone; still in the ring while the others are asked whether they
	// reach it (agreement.go).
	StateUnreachable State = "unreachable"
)

// Member is one node of the cluster.
type Member struct {
	ID         string
	GossipAddr string
	GRPCAddr   string
	State      State
	// Since is when a failed member was declared dead, or an unreachable
	// one first doubted (zero otherwise).
	Since time.Time
	// Unconfirmed marks a failed member taken out of the ring on this
	// member's evidence alone: no other member could be asked. It may be
	// alive and deciding its keys on the other side of a partition.
	Unconfirmed bool
	// Config is the digests of the configurations the member serves, by
	// source, as it advertises them (SetConfigDigests). Empty: it serves
	// none; nil: it advertises none (a version before digests, or a
	// member not alive). Shared between copies: read only.
	Config map[string]string
	// Boot names the member's process, a random id it draws at start:
	// a member back under the same id but another boot restarted.
	// Empty: a version that does not say.
	Boot string
	// Restored: at that boot the member restored its counts from its
	// disk (Config.Restored).
	Restored bool
	// CutOff (this member's own entry only): its failure detector finds
	// it is likely the member cut off (watchHealth).
	CutOff bool
	// FaultInjection: the member runs with a fault injected on purpose
	// (Config.FaultInjection). False too for a version that does not say.
	FaultInjection bool
}

// meta is what a member advertises in memberlist's node metadata.
type meta struct {
	GRPC string `json:"grpc"`
	// Leaving is set just before a graceful leave. memberlist's
	// NotifyLeave cannot tell a leave from a death (it passes the embedded
	// Node, whose State field is shadowed by nodeState.State and never
	// updated), but it does pass current metadata.
	Leaving bool `json:"leaving,omitempty"`
	// Config is never nil here, so that it is always sent ("cfg":{} for
	// none): a member that sends no "cfg" predates digests (Member.Config).
	Config map[string]string `json:"cfg"`
	// Boot and Restored are Member's.
	Boot     string `json:"boot,omitempty"`
	Restored bool   `json:"restored,omitempty"`
	// FaultInjection is Member's.
	FaultInjection bool `json:"fault,omitempty"`
}

// Cluster is this node's membership. Its methods are safe for concurrent
// use.
type Cluster struct {
	cfg Config
	log *slog.Logger
	ml  *memberlist.Memberlist

	metaMu sync.Mutex
	meta   meta

	keyMu   sync.Mutex          // serialises SetKeys
	keyring *memberlist.Keyring // nil unless started with Config.Keys

	gossipAddr string // ours, read once: memberlist's LocalNode() is live state

	// Our copy of the membership, kept by the event delegate. memberlist's
	// Members() returns pointers into its live state, which it mutates
	// under its own lock: reading them races. Events are called under that
	// lock, so copying there is safe.
	mu      sync.Mutex
	members map[string]Member  // by ID: live members, doubted ones among them
	failed  map[string]failure // by ID: members to reconnect to
	left    map[string]Member  // by ID: members that left gracefully
	doubted map[string]*doubt  // by ID: declared dead here, not yet agreed

	agreement *agreement

	// cutOff: this member takes itself for cut off (watchHealth).
	cutOff atomic.Bool
	// heard is when this member last heard from another (pings), Unix ns.
	heard atomic.Int64

	kick     chan struct{}      // capacity 1: coalesces change notifications
	sync     chan chan struct{} // Sync's requests: deliver now, then close
	stop     chan struct{}
	ctx      context.Context // canceled by Shutdown: ends seed lookups
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	shutOnce sync.Once
}

type failure struct {
	addr, grpc  string
	boot        string
	restored    bool
	since       time.Time
	unconfirmed bool // taken out on this member's evidence alone
	asking      bool // a round about it is out
}

// Start creates the member, tries the seeds once, and starts the notifier
// and the reconnector. Unreachable seeds are logged, not fatal.
func Start(cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "cluster"),
		members: map[string]Member{},
		failed:  map[string]failure{},
		left:    map[string]Member{},
		doubted: map[string]*doubt{},
		kick:    make(chan struct{}, 1),
		sync:    make(chan chan struct{}),
		stop:    make(chan struct{}),
	}
	c.agreement = newAgreement(c)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	mlc, err := c.memberlistConfig()
	if err != nil {
		return nil, err
	}
	// An unspecified gRPC host is only known once memberlist has chosen
	// its address, after Create; nobody knows this member before it
	// joins, below, so the corrected metadata is what others see.
	c.meta = meta{GRPC: cfg.GRPCAddr, Config: maps.Clone(cfg.ConfigDigests), Boot: cfg.Boot, Restored: cfg.Restored,
		FaultInjection: cfg.FaultInjection}
	if c.meta.Boot == "" {
		c.meta.Boot = NewBoot()
	}
	if c.meta.Config == nil {
		c.meta.Config = map[string]string{}
	}
	if c.ml, err = memberlist.Create(mlc); err != nil {
		c.cancel()
		if mlc.Transport != nil {
			mlc.Transport.Shutdown()
		}
		return nil, fmt.Errorf("cluster: start gossip on %s: %w", cfg.BindAddr, err)
	}
	local := c.ml.LocalNode() // nothing else touches it before we join
	c.gossipAddr = local.Address()
	if host, port, _ := net.SplitHostPort(cfg.GRPCAddr); host == "" || net.ParseIP(host).IsUnspecified() {
		c.setMeta(func(m *meta) { m.GRPC = net.JoinHostPort(local.Addr.String(), port) })
		if err := c.ml.UpdateNode(time.Second); err != nil {
			c.log.Warn("advertising the gRPC address", "err", err)
		}
	}
	c.heard.Store(time.Now().UnixNano())
	c.wg.Add(5)
	go c.watchHealth(mlc.ProbeInterval)
	go c.notify()
	go c.reconnect()
	go c.agreement.agree()
	go c.agreement.witness()
	c.kickChange()
	if len(cfg.Join) > 0 {
		c.joinSeeds(cfg.Join)
	}
	return c, nil
}

func (c *Cluster) memberlistConfig() (*memberlist.Config, error) {
	mlc := profileConfig(c.cfg.Profile)
	mlc.Name = c.cfg.ID
	mlc.Logger = nil
	mlc.LogOutput = &logBridge{log: c.log}
	mlc.Events = &events{c}
	mlc.Delegate = &delegate{c}
	mlc.Ping = pings{c}
	if len(c.cfg.SecretKey) > 0 {
		mlc.SecretKey = c.cfg.SecretKey
	}
	if len(c.cfg.Keys) > 0 {
		var err error
		if mlc.Keyring, err = memberlist.NewKeyring(c.cfg.Keys[1:], c.cfg.Keys[0]); err != nil {
			return nil, fmt.Errorf("cluster: Keys: %w", err)
		}
		c.keyring = mlc.Keyring
	}
	if c.cfg.Network != nil { // in memory: no address to bind
		t := c.cfg.Network.transport(c.cfg.ID)
		mlc.Transport, mlc.BindAddr, mlc.BindPort, mlc.AdvertisePort = t, t.ip.String(), t.port, t.port
		return mlc, nil
	}
	return mlc, c.bind(mlc)
}

// profileConfig is memberlist's configuration for a timing profile.
func profileConfig(p Profile) *memberlist.Config {
	if p == ProfileLocal {
		mlc := memberlist.DefaultLocalConfig()
		mlc.ProbeInterval = 200 * time.Millisecond
		mlc.ProbeTimeout = 100 * time.Millisecond
		mlc.GossipInterval = 50 * time.Millisecond
		mlc.SuspicionMult = 2
		mlc.TCPTimeout = 500 * time.Millisecond
		mlc.PushPullInterval = 2 * time.Second
		mlc.GossipToTheDeadTime = 5 * time.Second
		mlc.DeadNodeReclaimTime = time.Second
		return mlc
	}
	mlc := memberlist.DefaultLANConfig()
	mlc.ProbeInterval = 500 * time.Millisecond
	mlc.ProbeTimeout = 250 * time.Millisecond
	mlc.GossipInterval = 100 * time.Millisecond
	mlc.TCPTimeout = 2 * time.Second
	mlc.PushPullInterval = 15 * time.Second
	mlc.DeadNodeReclaimTime = 10 * time.Second
	return mlc
}

// bind sets mlc's addresses from BindAddr and AdvertiseAddr. A node bound
// to one address also sends from it (boundTransport); a wildcard bind
// leaves the choice to memberlist and the kernel.
func (c *Cluster) bind(mlc *memberlist.Config) error {
	host, port, err := splitHostPort(c.cfg.BindAddr)
	if err != nil {
		return fmt.Errorf("cluster: BindAddr: %w", err)
	}
	mlc.BindAddr, mlc.BindPort = host, port
	mlc.AdvertisePort = port
	if c.cfg.AdvertiseAddr != "" {
		if mlc.AdvertiseAddr, mlc.AdvertisePort, err = splitHostPort(c.cfg.AdvertiseAddr); err != nil {
			return fmt.Errorf("cluster: AdvertiseAddr: %w", err)
		}
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		t, bound, err := newBoundTransport(host, port, mlc.LogOutput)
		if err != nil {
			return err
		}
		mlc.Transport = t
		if mlc.BindPort == 0 {
			mlc.BindPort = bound
			if mlc.AdvertisePort == 0 {
				mlc.AdvertisePort = bound
			}
		}
	}
	return nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	if host == "" {
		host = "0.0.0.0"
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, port, nil
}

// LocalID is this member's ID.
func (c *Cluster) LocalID() string { return c.cfg.ID }

// GossipAddr is the gossip address this member advertises.
func (c *Cluster) GossipAddr() string { return c.gossipAddr }

// Members returns the live members, sorted by ID: the set the ring is
// built from. A suspect member stays in until it is declared dead, so a
// brief hiccup does not move ownership.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	out := make([]Member, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, m)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// View returns every member this node knows of: live ones, failed ones it
// is still trying to reconnect to, and ones that left. For operators.
func (c *Cluster) View() []Member {
	out := c.Members()
	seen := map[string]bool{}
	c.mu.Lock()
	for i, m := range out {
		seen[m.ID] = true
		if d, ok := c.doubted[m.ID]; ok {
			out[i].State, out[i].Since = StateUnreachable, d.since
		}
	}
	for id, f := range c.failed {
		if !seen[id] {
			out = append(out, Member{ID: id, GossipAddr: f.addr, GRPCAddr: f.grpc, State: StateFailed, Since: f.since, Unconfirmed: f.unconfirmed,
				Boot: f.boot, Restored: f.restored})
			seen[id] = true
		}
	}
	for id, m := range c.left {
		if !seen[id] {
			out = append(out, m)
		}
	}
	c.mu.Unlock()
	if c.cutOff.Load() {
		for i := range out {
			if out[i].ID == c.cfg.ID {
				out[i].CutOff = true
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (c *Cluster) setMeta(edit func(*meta)) {
	c.metaMu.Lock()
	edit(&c.meta)
	c.metaMu.Unlock()
}

// NewBoot draws a process's boot id: 64 random bits, which no two
// starts share.
func NewBoot() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return hex.EncodeToString(b[:])
}

func parseMeta(b []byte) meta {
	var md meta
	_ = json.Unmarshal(b, &md) // a member with garbage metadata has no gRPC address
	return md
}

// aliveMember copies a node; call only from the event delegate.
func aliveMember(n *memberlist.Node) Member { return aliveMemberOf(n, parseMeta(n.Meta)) }

// aliveMemberOf is aliveMember with n's metadata already parsed.
func aliveMemberOf(n *memberlist.Node, md meta) Member {
	return Member{ID: n.Name, GossipAddr: n.Address(), GRPCAddr: md.GRPC, State: StateAlive, Config: md.Config, Boot: md.Boot, Restored: md.Restored,
		FaultInjection: md.FaultInjection}
}

func (c *Cluster) kickChange() {
	select {
	case c.kick <- struct{}{}:
	default: // a notification is already pending; it will see this change
	}
}

// notify delivers membership snapshots to OnChange, one at a time, each
// taken when it is delivered: a later delivery never carries an older
// view.
func (c *Cluster) notify() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
			c.deliver()
		case done := <-c.sync:
			c.deliver()
			close(done)
		}
	}
}

func (c *Cluster) deliver() {
	if c.cfg.OnChange != nil {
		c.cfg.OnChange(c.View())
	}
}

// watchHealth follows memberlist's health score (Lifeguard's local health
// awareness) and when this member last heard from another, every
// interval, and delivers a view when its verdict on itself changes. The
// score rises when its probe of a member fails and the members it asked
// to probe for it send no word back either: most likely it is the one cut
// off, not everyone else. The others reach the opposite verdict on it
// only after a suspicion timeout their confirmations shorten and an
// agreement round, while its own suspicions of them, confirmed by nobody,
// take the longest timeout: without this it would go on deciding its
// keys undegraded while their heirs decide them too.
//
// One failed probe is not enough: a member under load misses a nack now
// and then (a node test under the race detector, at a load of 6 on 2
// cores, took itself for cut off when the nack about a killed peer came
// late). So cut off is a rise of the score with no fall since (a fall: a
// probe answered) and nothing heard from any member (an ack of its
// probes, a probe of it: heard) for two probe intervals, which a member
// that reaches anyone is probed or answered within. Hearing from one, or
// the score falling or reaching zero, ends it. The score falls by one per
// probe that succeeds, and takes up to seven to reach zero, so the
// verdict follows its direction, not whether it is above zero.
func (c *Cluster) watchHealth(probe time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(probe / 2)
	defer t.Stop()
	var v selfVerdict
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			silence := now.Sub(time.Unix(0, c.heard.Load()))
			if cut := v.observe(c.ml.GetHealthScore(), silence, probe); c.cutOff.Swap(cut) != cut {
				c.kickChange()
			}
		}
	}
}

// selfVerdict is watchHealth's verdict on this member: cut off or not.
type selfVerdict struct {
	last int  // the last score observed
	rose bool // it rose, with no fall or zero since
}

// observe takes the health score now and how long since this member heard
// from another, and returns whether it takes itself for cut off.
func (v *selfVerdict) observe(score int, silence, probe time.Duration) bool {
	switch {
	case score == 0 || score < v.last:
		v.rose = false
	case score > v.last:
		v.rose = true
	}
	v.last = score
	return v.rose && silence >= cutOffSilence*probe
}

// cutOffSilence is how many probe intervals without a word from any
// member, after a rise of the health score, make a member take itself for
// cut off (watchHealth).
const cutOffSilence = 2

// pings notes when this member last heard from another: an ack of its
// probe, direct or relayed, or a probe of it (memberlist.PingDelegate).
type pings struct{ c *Cluster }

func (p pings) AckPayload() []byte {
	p.c.heard.Store(time.Now().UnixNano())
	return nil
}

func (p pings) NotifyPingComplete(*memberlist.Node, time.Duration, []byte) {
	p.c.heard.Store(time.Now().UnixNano())
}

// Sync delivers the current view to Config.OnChange and returns once it
// has, or when the membership stops. A caller that needs the membership
// applied before it goes on (a node about to serve after its join) calls
// this, never OnChange with a View of its own: that view, taken before a
// change the notifier delivers meanwhile, could be applied after it, and
// stay the last (a ring short of a member until the next change, which
// may never come).
func (c *Cluster) Sync() {
	done := make(chan struct{})
	select {
	case c.sync <- done:
		<-done
	case <-c.stop:
	}
}

// joinSeeds is the first join: every address of every seed, in turn.
func (c *Cluster) joinSeeds(seeds []string) {
	addrs, rerr := c.resolveSeeds(c.ctx, seeds)
	if rerr != nil {
		c.log.Warn("resolving seeds; retrying in the background", "err", rerr)
	}
	if len(addrs) == 0 {
		// Normal for the first member behind a DNS name: the name lists
		// only itself, or nothing yet.
		c.log.Info("no other seed address yet; retrying in the background", "seeds", seeds)
		return
	}
	if n, err := c.ml.Join(addrs); err != nil {
		c.log.Warn("no seed reachable yet; retrying in the background", "seeds", seeds, "addrs", addrs, "err", err)
	} else {
		c.log.Info("joined", "contacted", n, "of", addrs)
	}
}

// reconnect periodically rejoins failed members and, while this member is
// alone, the seeds (resolving their names anew each time); and, every
// SeedRefreshInterval, addresses behind seed names that it does not know. memberlist stops gossiping to a dead member after
// GossipToTheDeadTime, so without this a partition that lasts longer never
// heals.
func (c *Cluster) reconnect() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ReconnectInterval)
	defer t.Stop()
	lastRefresh := time.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		targets := c.reconnectTargets(now)
		// Seed names are resolved again each round: the addresses behind
		// them change as pods restart and services scale.
		targets, err := c.resolveSeeds(c.ctx, targets)
		if err != nil {
			c.log.Debug("resolving seeds", "err", err)
		}
		if now.Sub(lastRefresh) >= c.cfg.SeedRefreshInterval {
			lastRefresh = now
			fresh, err := c.unknownSeedAddrs()
			if err != nil {
				c.log.Debug("refreshing seed names", "err", err)
			}
			for _, a := range fresh {
				if !slices.Contains(targets, a) {
					c.log.Info("seed name lists an unknown member; joining it", "addr", a)
					targets = append(targets, a)
				}
			}
		}
		if len(targets) == 0 {
			continue
		}
		// One Join per target, in parallel: a target behind a DROP rule
		// takes a full TCP timeout, and must not delay the others.
		var wg sync.WaitGroup
		for _, addr := range targets {
			wg.Go(func() {
				if _, err := c.ml.Join([]string{addr}); err == nil {
					c.log.Info("reconnected", "addr", addr)
				} else {
					c.log.Debug("reconnect failed", "addr", addr, "err", err)
				}
			})
		}
		wg.Wait()
	}
}

func (c *Cluster) reconnectTargets(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	alone := len(c.members) <= 1
	var out []string
	for id, f := range c.failed {
		if now.Sub(f.since) > c.cfg.ReconnectTimeout {
			delete(c.failed, id)
			c.log.Info("giving up on failed member", "member", id, "after", c.cfg.ReconnectTimeout)
			continue
		}
		out = append(out, f.addr)
	}
	if alone {
		out = append(out, c.cfg.Join...)
	}
	return out
}

// unknownSeedAddrs resolves the seeds that are host names and returns
// the addresses that are neither a member, nor failed (the reconnector
// retries those anyway), nor left. Empty while this member is alone: the
// seeds are all retried then.
func (c *Cluster) unknownSeedAddrs() ([]string, error) {
	var names []string
	for _, s := range c.cfg.Join {
		if host, _, err := splitSeed(s); err == nil && net.ParseIP(host) == nil {
			names = append(names, s)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	// Alone, the answer is empty: no lookups (up to 5 s each) for nothing.
	c.mu.Lock()
	alone := len(c.members) <= 1
	c.mu.Unlock()
	if alone {
		return nil, nil
	}
	addrs, err := c.resolveSeeds(c.ctx, names)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.members) <= 1 { // alone since
		return nil, err
	}
	known := map[string]bool{}
	for _, m := range c.members {
		known[m.GossipAddr] = true
	}
	for _, f := range c.failed {
		known[f.addr] = true
	}
	for _, m := range c.left {
		known[m.GossipAddr] = true
	}
	var out []string
	for _, a := range addrs {
		if !known[a] {
			out = append(out, a)
		}
	}
	return out, err
}

// leaveStepTimeout bounds each of Leave's two broadcasts.
const leaveStepTimeout = time.Second

// Leave tells the cluster this member is going away, waiting until the
// message has spread or ctx ends. The member keeps running until Shutdown.
func (c *Cluster) Leave(ctx context.Context) error {
	// memberlist blocks until a broadcast reaches some member, up to the
	// timeout. Gossip takes tens of milliseconds; when every peer is
	// leaving too nobody takes it, so a long timeout would only stall.
	timeout := leaveStepTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl)/2)
	}
	// First say we are leaving, so the others do not take the leave for a
	// failure and try to reconnect to us.
	c.setMeta(func(m *meta) { m.Leaving = true })
	if err := c.ml.UpdateNode(timeout); err != nil {
		c.log.Warn("announcing the leave", "err", err)
	}
	if err := c.ml.Leave(timeout); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	return nil
}

// Shutdown stops gossip and every goroutine of the member, without telling
// the others (they will detect the failure). Call Leave first for a
// graceful exit. Safe to call more than once.
func (c *Cluster) Shutdown() error {
	var err error
	c.shutOnce.Do(func() {
		c.cancel()
		close(c.stop)
		err = c.ml.Shutdown()
		c.wg.Wait()
	})
	if err != nil {
		return fmt.Errorf("cluster: shutdown: %w", err)
	}
	return nil
}

// events receives memberlist's membership events. memberlist never calls
// it concurrently, and it must not block: it records what the reconnector
// needs and kicks the notifier.
type events struct{ c *Cluster }

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.c.mu.Lock()
	e.c.members[n.Name] = aliveMember(n)
	delete(e.c.failed, n.Name)
	delete(e.c.left, n.Name)
	delete(e.c.doubted, n.Name)
	e.c.mu.Unlock()
	e.c.log.Info("member joined", "member", n.Name, "addr", n.Address())
	e.c.kickChange()
}

// NotifyLeave takes a member that left out at once; one declared dead
// only once others agree (doubtMember). A member left when its metadata
// said it was leaving. Its "leaving" metadata and memberlist's leave
// travel as two gossip messages, and the leave may come first: the Node
// memberlist hands over then cannot tell (its State is never set, only
// memberlist's internal copy), so the member is doubted, and the
// agreement round asks the leaver itself, which says it is leaving
// (askWitnesses). Kept in the ring instead while it handed off, its keys
// went through a relay to a node about to stop, then to the fallback:
// two deciders for a second or more (jepsen-lite scale, up to 1.8×).
func (e *events) NotifyLeave(n *memberlist.Node) {
	md := parseMeta(n.Meta)
	m := Member{ID: n.Name, GossipAddr: n.Address(), GRPCAddr: md.GRPC, State: StateFailed}
	if !md.Leaving && n.Name != e.c.cfg.ID {
		e.c.agreement.doubtMember(m)
		return
	}
	e.c.memberGone(m, md.Leaving)
}

// memberGone takes m out of the ring, as left or failed; a member already
// out as left (its "leaving" metadata came first) is left alone.
func (c *Cluster) memberGone(m Member, left bool) {
	c.mu.Lock()
	_, listed := c.members[m.ID]
	if _, wasLeft := c.left[m.ID]; !listed && wasLeft {
		c.mu.Unlock()
		return
	}
	delete(c.members, m.ID)
	delete(c.doubted, m.ID)
	if left {
		m.State = StateLeft
		c.left[m.ID] = m
	}
	c.mu.Unlock()
	c.log.Info("member gone", "member", m.ID, "state", m.State)
	c.kickChange()
}

// NotifyUpdate records a member's new metadata. A member that says it is
// leaving is out at once: it owns nothing any more and hands its keys to
// the new owners, and memberlist's leave may never reach this member
// (its retransmissions are few, and end when the leaver stops), which
// would keep the leaver in this ring, its keys forwarded to a node that
// stopped, until memberlist suspects it and times out (a second or more).
func (e *events) NotifyUpdate(n *memberlist.Node) {
	md := parseMeta(n.Meta)
	if md.Leaving && n.Name != e.c.cfg.ID {
		e.c.memberGone(Member{ID: n.Name, GossipAddr: n.Address(), GRPCAddr: md.GRPC}, true)
		return
	}
	e.c.mu.Lock()
	e.c.members[n.Name] = aliveMemberOf(n, md)
	delete(e.c.doubted, n.Name)
	e.c.mu.Unlock()
	e.c.log.Debug("member updated", "member", n.Name)
	e.c.kickChange()
}

// delegate serves our metadata; the rest of memberlist.Delegate is unused.
type delegate struct{ c *Cluster }

func (d *delegate) NodeMeta(limit int) []byte {
	d.c.metaMu.Lock()
	b, _ := json.Marshal(d.c.meta)
	d.c.metaMu.Unlock()
	if len(b) > limit {
		return nil
	}
	return b
}
func (d *delegate) NotifyMsg(b []byte)                         { d.c.agreement.receive(b) }
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

var (
	_ memberlist.EventDelegate = (*events)(nil)
	_ memberlist.Delegate      = (*delegate)(nil)
)
