package jepsenlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Scenario is a workload run against a fresh cluster while a nemesis
// applies Steps at fixed offsets from the workload's start.
type Scenario struct {
	Name  string
	About string
	// Nodes is how many nodes start before the workload; Extra more are
	// defined (addresses chosen) for steps that add nodes.
	Nodes, Extra int
	Duration     time.Duration
	Steps        []Step
	// Needs is the kind of network fault the scenario makes. A backend
	// that cannot make it (no root for iptables; docker cannot cut one
	// link) skips the scenario, and the report says so.
	Needs Need
	// Args are flags this scenario's nodes get after the profile's (a
	// fallback policy, say). The docker backend cannot give them, and
	// skips such a scenario.
	Args []string
	// NodeArgs are flags one node gets after Args, by node id ("n1"): a
	// wrong clock (--fault-clock-*). The docker backend skips such a
	// scenario too.
	NodeArgs map[string][]string
	// MaxDegraded, if set, is the most of the answers that may be
	// degraded: a slow or lossy link that works must not make a storm of
	// fallbacks.
	MaxDegraded float64
	// ClockRate is how much faster (or, negative, slower) than real time
	// a node's clock runs in this scenario (a drift, or the slew that
	// follows a step): its windows are that much shorter (longer) in real
	// time, and not aligned with the harness's. The checker takes sliding
	// windows shorter by a positive rate (the other nodes' are the
	// shortest otherwise), and holds the counter's fixed windows to its
	// rolling bound.
	ClockRate float64
	// Load, if set, is the offered rate per key as a multiple of
	// Limit/Window, instead of the profile's: hot keys.
	Load float64
	// MaxWorst, if set, is what the scenario promises beyond the
	// deciders' bound: no log window, no fixed counter window and no
	// calendar period admits more than MaxWorst × the limit, no GCRA
	// interval more than MaxWorst × one decider's bound, and no
	// concurrency key holds more than MaxWorst × its limit, whatever the
	// fault. (peerlimit's replicas, relays, the share policy and the data
	// directory hold faults to that.)
	MaxWorst float64
	// DayKeys, if set, adds that many calendar-day keys to the workload
	// (counters per day, one in each of calendarZones in turn), offered
	// at the same rate per key as the others, each with the limit that
	// rate reaches in one of DaySpends (in turn for each round of zones;
	// times the profile's Scale). A budget spent out before the nemesis
	// strikes must stay spent after it; one still being spent then and
	// spent out before the run ends shows, as admissions over the day's
	// limit, the counts the fault lost.
	DayKeys   int
	DaySpends []time.Duration
	// P99WithinForward, if set, promises that the 99th percentile of the
	// answered checks' latency is at most the nodes' forward timeout (the
	// last --forward-timeout of the profile's and the scenario's flags,
	// so -node-args moves it) plus P99Slack: over a slow link that works,
	// answers come within the forward timeout, not from the fallback
	// after it.
	P99WithinForward bool
	// P99Slack is what that promise allows beyond the forward timeout:
	// on a lossy link, one TCP retransmission.
	P99Slack time.Duration
	// FullOnly keeps the scenario out of the test command's short
	// profile (its time, or its flakiness on a loaded machine); make chaos
	// runs it.
	FullOnly bool
	// Defect, if set, names a defect of the node that this scenario finds
	// and that is not fixed yet (docs/chaos.md, "Found and not fixed"):
	// the test command skips the scenario, saying so and why; make chaos
	// runs it, and fails until the defect is fixed.
	Defect string
	// ReportedWorst is the MaxWorst of a scenario held to its bounds
	// only (WithoutPromises): the report states it, the run is not
	// failed on it.
	ReportedWorst float64
}

// WithoutPromises is the scenario held to its bounds only: no promised
// worst, degraded share or p99, which the run then reports without
// failing on them (docker mode: containers are killed and detected more
// slowly than processes).
func (sc Scenario) WithoutPromises() Scenario {
	sc.ReportedWorst = sc.MaxWorst
	sc.MaxWorst, sc.MaxDegraded = 0, 0
	sc.P99WithinForward, sc.P99Slack = false, 0
	return sc
}

// Step is one nemesis action.
type Step struct {
	At   time.Duration
	Name string
	Do   func(ctx context.Context, e *Env) error
	// Steady is how many nodes may decide a key independently once the
	// cluster has converged after this step, until the next one: 1 when
	// every node agrees on one owner, k for a partition into k sides.
	// Fallback decisions (degraded answers) seen in a window add their
	// deciders on top; see the checker.
	Steady int
	// Fault is true while the step leaves the cluster faulted (a node
	// down or paused, links cut), for the chart.
	Fault bool
	// Loses, for a step that kills nodes with their data directories, is
	// how long before the kill what they admitted may be lost: what a
	// killed node had not yet written. The checker lets a calendar period
	// hold the admissions that may have been decided then on top of its
	// bound, unmarked (Result.lost).
	Loses time.Duration
}

// Event is a step as it happened.
type Event struct {
	Name   string        `json:"name"`
	Begin  time.Duration `json:"begin_ns"`
	End    time.Duration `json:"end_ns"`
	Steady int           `json:"steady"`
	Fault  bool          `json:"fault"`
	Loses  time.Duration `json:"loses_ns,omitempty"`
	Err    string        `json:"err,omitempty"`
	// Expect is each observable node's expected alive set once converged.
	Expect map[string][]string `json:"expect"`
	// Sides maps each observable node to its side of the network.
	Sides map[string]int `json:"sides"`
}

// Env is what a step acts on: the backend's nodes, the clients, and the
// topology the harness has made, from which the expected membership views
// follow.
type Env struct {
	b       Backend
	clients *Clients
	start   time.Time
	ids     []string // every slot, in order
	log     *slog.Logger

	mu   sync.Mutex
	cut  map[[2]string]bool // node ids whose link is cut
	up   map[string][]Span  // when each node was answering
	seen map[string]bool    // answering after the last step
}

// Span is a stretch of the run when a node was answering; To 0: still up.
type Span struct{ From, To time.Duration }

func (e *Env) now() time.Duration { return time.Since(e.start) }

// ID returns the i-th node (0-based).
func (e *Env) ID(i int) string { return e.ids[i] }

// Kill kill -9s a node.
func (e *Env) Kill(ctx context.Context, id string) error { return e.b.Kill(ctx, id) }

// Start starts (or restarts, with the same id) a node and makes it a
// target of the workload.
func (e *Env) Start(ctx context.Context, id string) error {
	if err := e.b.Start(ctx, id); err != nil {
		return err
	}
	return e.clients.Add(id, e.b.GRPCAddr(id))
}

// KillAll kill -9s every given node as nearly at once as the backend
// can (a power cut to the whole cluster).
func (e *Env) KillAll(ctx context.Context, ids ...string) error { return e.b.KillAll(ctx, ids) }

// StopAll stops every given node gracefully at once (SIGTERM to all: a
// whole cluster shut down), and waits until they have exited. The
// clients keep sending to them: they have nowhere else to go.
func (e *Env) StopAll(ctx context.Context, ids ...string) error { return e.b.StopAll(ctx, ids) }

// StartAll starts (or restarts) every given node at once, as a cluster's
// machines come back together, and makes each a target of the workload.
func (e *Env) StartAll(ctx context.Context, ids ...string) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = e.Start(ctx, id) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Pause freezes a node.
func (e *Env) Pause(ctx context.Context, id string) error { return e.b.Pause(ctx, id) }

// Resume unfreezes a paused node.
func (e *Env) Resume(ctx context.Context, id string) error { return e.b.Resume(ctx, id) }

// Leave removes a node gracefully (SIGTERM: leave, hand off, drain), as an
// operator scaling down would, after draining clients from it.
func (e *Env) Leave(ctx context.Context, id string) error {
	e.clients.Retire(id)
	return e.b.Leave(ctx, id)
}

// Partition splits the nodes into groups that cannot reach each other.
func (e *Env) Partition(ctx context.Context, groups ...[]string) error {
	if err := e.b.Partition(ctx, groups); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					e.cut[pair(a, b)] = true
				}
			}
		}
	}
	return nil
}

// Cut cuts the link between two nodes only.
func (e *Env) Cut(ctx context.Context, a, b string) error {
	if err := e.b.Cut(ctx, a, b); err != nil {
		return err
	}
	e.mu.Lock()
	e.cut[pair(a, b)] = true
	e.mu.Unlock()
	return nil
}

// Lose makes the link between a and b drop each packet with probability
// p, both ways. It is not a cut: the link works, slowly, and the harness
// still expects both sides to see each other.
func (e *Env) Lose(ctx context.Context, a, b string, p float64) error { return e.b.Lose(ctx, a, b, p) }

// Delay slows the links from every node of from to every node of to, one
// way, as l says. A slow link is not a cut: the harness still expects both
// sides to see each other.
func (e *Env) Delay(ctx context.Context, from, to []string, l Link) error {
	return e.b.Delay(ctx, from, to, l)
}

// DelayBoth slows the links between the nodes of a and those of b, both
// ways.
func (e *Env) DelayBoth(ctx context.Context, a, b []string, l Link) error {
	return errors.Join(e.b.Delay(ctx, a, b, l), e.b.Delay(ctx, b, a, l))
}

// Heal removes every cut and slow link.
func (e *Env) Heal(ctx context.Context) error {
	if err := e.b.Heal(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	clear(e.cut)
	e.mu.Unlock()
	return nil
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// track records who answers after a step (obs, from observable): a node
// that stopped answering went down when the step began, one that started
// answering came up when the step ended (a restart is up once healthy).
func (e *Env) track(begin, end time.Duration, obs []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := map[string]bool{}
	for _, id := range obs {
		now[id] = true
		if !e.seen[id] {
			e.up[id] = append(e.up[id], Span{From: end})
		}
	}
	for id := range e.seen {
		if s := e.up[id]; !now[id] && len(s) > 0 && s[len(s)-1].To == 0 {
			s[len(s)-1].To = begin
		}
	}
	e.seen = now
}

// observable lists the nodes that answer. It asks every node (in docker
// mode, docker inspect for each), so a step asks once for track and
// expectation both.
func (e *Env) observable() []string {
	var out []string
	for _, id := range e.ids {
		if e.b.Answering(id) {
			out = append(out, id)
		}
	}
	return out
}

// expectation is what every answering node (obs, from observable) should
// see once the cluster has converged: the answering nodes it can reach,
// directly or through another (memberlist probes indirectly), and the side
// it is on.
func (e *Env) expectation(obs []string) (map[string][]string, map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Expectation(obs, func(a, b string) bool { return e.cut[pair(a, b)] })
}

// Expectation returns, for the observable nodes obs, each one's side of
// the network (the nodes it reaches, through others or directly, over
// links cut does not cut) and the alive set its view must converge to:
// its side's nodes, sorted. A member cut from one other but reached
// through a third (a bridge) stays on the one side: agreement keeps it.
func Expectation(obs []string, cut func(a, b string) bool) (expect map[string][]string, side map[string]int) {
	side = map[string]int{}
	for _, id := range obs {
		side[id] = -1
	}
	n := 0
	for _, root := range obs {
		if side[root] >= 0 {
			continue
		}
		queue := []string{root}
		side[root] = n
		for len(queue) > 0 {
			x := queue[0]
			queue = queue[1:]
			for _, y := range obs {
				if side[y] < 0 && !cut(x, y) {
					side[y] = n
					queue = append(queue, y)
				}
			}
		}
		n++
	}
	expect = map[string][]string{}
	for _, x := range obs {
		for _, y := range obs {
			if side[y] == side[x] {
				expect[x] = append(expect[x], y)
			}
		}
		slices.Sort(expect[x])
	}
	return expect, side
}

// Profile is the workload and node settings shared by all scenarios of a
// run.
type Profile struct {
	Name string
	// KeysPerAlgorithm keys use each window algorithm (the counter, the
	// log), all with Limit per Window.
	KeysPerAlgorithm int
	Limit            int64
	Window           time.Duration
	// GCRAKeys are GCRA buckets of gcraBurst refilled at gcraLimit per
	// gcraWindow, offered what the others are; the last is hot, offered
	// hotWeight times as much.
	GCRAKeys int
	// ConcurrencyKeys hold at most concurrencyLimit slots each, freed by
	// their release or concurrencyWindow after they were taken (the
	// Workload's holds), offered as many acquires as the others checks.
	ConcurrencyKeys int
	// Load is the offered rate per key as a multiple of Limit/Window:
	// above 1, every key is saturated and over-admission shows.
	Load    float64
	Workers int
	// ClientTimeout is the workload's deadline per check.
	ClientTimeout time.Duration
	// NodeArgs are the flags every node gets.
	NodeArgs []string
	// Scale multiplies every scenario's offsets and duration.
	Scale float64
}

// Config is a run: where the nodes come from, where to write.
type Config struct {
	// Backend makes each scenario's nodes: Local (processes on loopback
	// addresses) or Docker (a compose project).
	Backend BackendFactory
	OutDir  string
	Profile Profile
	Seed    uint64
	Logger  *slog.Logger
}

// Run runs one scenario from a fresh cluster to teardown and returns its
// history, analysed. The backend undoes what it did (processes stopped,
// firewall rules removed, containers reconnected) before Run returns,
// whatever happened.
func Run(ctx context.Context, cfg Config, sc Scenario) (res *Result, err error) {
	dir := filepath.Join(cfg.OutDir, sc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("scenario", sc.Name)

	b, err := cfg.Backend(ctx, sc, dir)
	if errors.Is(err, ErrUnsupported) {
		return &Result{Scenario: sc.Name, About: sc.About, Skipped: err.Error()}, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := b.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", cerr))
		}
	}()
	if err := b.Supports(sc.Needs); err != nil {
		return &Result{Scenario: sc.Name, About: sc.About, Skipped: err.Error()}, nil
	}
	clients := NewClients()
	defer clients.Close()

	env := &Env{b: b, clients: clients, log: log, ids: b.Nodes(),
		cut: map[[2]string]bool{}, up: map[string][]Span{}, seen: map[string]bool{}}
	if err := startCluster(ctx, env, sc.Nodes); err != nil {
		return nil, err
	}
	log.Info("cluster up", "nodes", sc.Nodes)

	var before nodeMetrics
	if sc.Needs == NeedSlowLink {
		before = scrapeNodes(ctx, metricsURLs(b, env.ids[:sc.Nodes]))
	}
	h, stepErr := runWorkload(ctx, env, cfg, sc)
	res = Analyze(h)
	res.MaxWorst, res.MaxDegraded, res.Defect = sc.MaxWorst, sc.MaxDegraded, sc.Defect
	res.ReportedWorst = sc.ReportedWorst
	if sc.Needs == NeedSlowLink {
		after := scrapeNodes(ctx, metricsURLs(b, env.ids[:sc.Nodes]))
		var dl DelayerReport
		if d, ok := b.(interface{ DelayerReport() (DelayerReport, bool) }); ok {
			dl, _ = d.DelayerReport()
		}
		args := slices.Concat(cfg.Profile.NodeArgs, sc.Args)
		res.Link = linkResult(sc, h, offeredRate(sc, cfg.Profile), flagDuration(args, "forward-timeout", 0), before, after, dl)
	}
	if stepErr != nil {
		res.Errors = append(res.Errors, stepErr.Error())
	}
	if err := writeHistory(dir, res.History); err != nil {
		return res, err
	}
	return res, nil
}

// metricsURLs are the nodes' /metrics, where the backend can tell.
func metricsURLs(b Backend, ids []string) []string {
	m, ok := b.(interface{ MetricsURL(id string) string })
	if !ok {
		return nil
	}
	var out []string
	for _, id := range ids {
		out = append(out, m.MetricsURL(id))
	}
	return out
}

// offeredRate is the workload's checks per second, as runWorkload paces
// it.
func offeredRate(sc Scenario, p Profile) float64 {
	load := p.Load
	if sc.Load > 0 {
		load = sc.Load
	}
	return load * float64(p.Limit) * float64(TotalWeight(workloadKeys(sc, p, load))) / p.Window.Seconds()
}

// startCluster starts the first n nodes and waits until they all see
// each other.
func startCluster(ctx context.Context, env *Env, n int) error {
	for _, id := range env.ids[:n] {
		if err := env.Start(ctx, id); err != nil {
			return err
		}
	}
	return waitConverged(ctx, env, 30*time.Second)
}

// The GCRA and concurrency keys' own numbers (Profile.GCRAKeys,
// Profile.ConcurrencyKeys). Offered the profile's 25 checks/s per key
// (2.5 × 10 per second), a bucket of 20 per second is saturated (1.25×),
// the hot one 3.75×; 25 acquires/s held 275 ms on average want about 7
// slots of 5.
const (
	gcraLimit, gcraBurst = 20, 10
	gcraWindow           = time.Second
	hotWeight            = 3
	concurrencyLimit     = 5
	concurrencyWindow    = 2 * time.Second
)

// workloadKeys are the scenario's keys: KeysPerAlgorithm for each window
// algorithm, all with the profile's limit and window, the profile's GCRA
// and concurrency keys, and the scenario's calendar-day keys
// (Scenario.DayKeys). load is the offered rate per key as a multiple of
// the profile's Limit/Window.
func workloadKeys(sc Scenario, p Profile, load float64) []KeySpec {
	keys := make([]KeySpec, 0, 2*p.KeysPerAlgorithm+p.GCRAKeys+p.ConcurrencyKeys+sc.DayKeys)
	for _, alg := range []pb.Algorithm{pb.Algorithm_SLIDING_WINDOW_COUNTER, pb.Algorithm_SLIDING_WINDOW_LOG} {
		for i := range p.KeysPerAlgorithm {
			keys = append(keys, KeySpec{Name: fmt.Sprintf("jepsen:%s:%s:%d", sc.Name, algName(alg), i), Algorithm: alg, Limit: p.Limit, Window: p.Window})
		}
	}
	for i := range p.GCRAKeys {
		ks := KeySpec{Name: fmt.Sprintf("jepsen:%s:gcra:%d", sc.Name, i), Algorithm: pb.Algorithm_GCRA, Limit: gcraLimit, Window: gcraWindow, Burst: gcraBurst}
		if i == p.GCRAKeys-1 {
			ks.Name, ks.Weight = fmt.Sprintf("jepsen:%s:gcra:hot:%d", sc.Name, i), hotWeight
		}
		keys = append(keys, ks)
	}
	for i := range p.ConcurrencyKeys {
		keys = append(keys, KeySpec{Name: fmt.Sprintf("jepsen:%s:concurrency:%d", sc.Name, i), Algorithm: pb.Algorithm_CONCURRENCY,
			Limit: concurrencyLimit, Window: concurrencyWindow})
	}
	// Each key is offered the same rate; a day's limit is what that rate
	// reaches in the key's spend of the run's time.
	perKey := load * float64(p.Limit) / p.Window.Seconds()
	for i := range sc.DayKeys {
		zone := calendarZones[i%len(calendarZones)]
		spend := sc.DaySpends[i/len(calendarZones)%len(sc.DaySpends)]
		keys = append(keys, KeySpec{Name: fmt.Sprintf("jepsen:%s:day:%d", sc.Name, i), Algorithm: pb.Algorithm_SLIDING_WINDOW_COUNTER,
			Limit: int64(math.Ceil(perKey * spend.Seconds() * p.Scale)), Calendar: pb.CalendarUnit_DAY, TimeZone: zone})
	}
	return keys
}

// calendarZones are the zones of the calendar keys, in turn: UTC, one an
// hour off it with daylight saving, and the farthest ahead (UTC+14), so
// that a day is counted in its own zone, not the nodes' nor UTC's.
var calendarZones = []string{"UTC", "Europe/Paris", "Pacific/Kiritimati"}

// runWorkload runs the workload and the monitor for the scenario's
// duration while the nemesis applies its steps, and returns what
// happened. The error is the steps' that failed or never ran.
func runWorkload(ctx context.Context, env *Env, cfg Config, sc Scenario) (History, error) {
	p := cfg.Profile
	load := p.Load
	if sc.Load > 0 {
		load = sc.Load
	}
	keys := workloadKeys(sc, p, load)
	wl := Workload{Keys: keys, Workers: p.Workers, Timeout: p.ClientTimeout,
		Rate: load * float64(p.Limit) * float64(TotalWeight(keys)) / p.Window.Seconds()}

	// The run's clock starts with the workload.
	start := time.Now()
	env.start = start
	obs := env.observable()
	env.track(0, 0, obs)

	expect, sides := env.expectation(obs)
	events := []Event{{Name: "start", Steady: 1, Expect: expect, Sides: sides}}
	mon := &Monitor{Interval: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, Nodes: func() []string { return env.ids }}
	runCtx, cancel := context.WithTimeout(ctx, time.Duration(float64(sc.Duration)*p.Scale))
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); mon.Run(runCtx, env.clients, start) }()
	var history []Op
	go func() { defer wg.Done(); history = wl.Run(runCtx, env.clients, start, cfg.Seed) }()

	events, stepErr := runSteps(runCtx, env, sc.Steps, p.Scale, events)
	<-runCtx.Done()
	wg.Wait()
	end := time.Since(start)
	env.mu.Lock()
	up := env.up
	env.mu.Unlock()

	return History{Scenario: sc.Name, About: sc.About, Start: start, End: end, Nodes: env.ids, Keys: keys,
		Ops: history, Views: mon.Views(), Events: events, Up: up, ClockRate: sc.ClockRate}, stepErr
}

// runSteps applies each step at its offset (times scale) from the run's
// start, appending what happened to events, until the steps or the run
// end.
func runSteps(runCtx context.Context, env *Env, steps []Step, scale float64, events []Event) ([]Event, error) {
	var stepErr error
	for _, st := range steps {
		at := time.Duration(float64(st.At) * scale)
		select {
		case <-runCtx.Done():
		case <-time.After(time.Until(env.start.Add(at))):
		}
		if runCtx.Err() != nil {
			stepErr = fmt.Errorf("step %q: the run ended first", st.Name)
			break
		}
		ev, err := applyStep(runCtx, env, st)
		if err != nil {
			stepErr = errors.Join(stepErr, fmt.Errorf("step %q: %w", st.Name, err))
		}
		events = append(events, ev)
	}
	return events, stepErr
}

// applyStep does one step and records it with the membership views
// expected after it.
func applyStep(runCtx context.Context, env *Env, st Step) (Event, error) {
	ev := Event{Name: st.Name, Begin: env.now(), Steady: st.Steady, Fault: st.Fault, Loses: st.Loses}
	err := st.Do(runCtx, env)
	if err != nil {
		ev.Err = err.Error()
	}
	ev.End = env.now()
	obs := env.observable()
	env.track(ev.Begin, ev.End, obs)
	ev.Expect, ev.Sides = env.expectation(obs)
	env.log.Info("nemesis", "step", st.Name, "at", ev.Begin.Round(time.Millisecond), "took", (ev.End - ev.Begin).Round(time.Millisecond))
	return ev, err
}

// waitConverged waits until every running node sees every running node.
func waitConverged(ctx context.Context, e *Env, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var why string
	for {
		// Asked again at every poll: a node that stops answering while the
		// cluster starts drops out of what the others should see.
		expect, _ := e.expectation(e.observable())
		why = ""
		for id, want := range expect {
			cl := e.clients.client(id)
			cctx, c := context.WithTimeout(ctx, time.Second)
			resp, err := cl.Members(cctx, &pb.MembersRequest{})
			c()
			if err != nil {
				why = fmt.Sprintf("%s: %v", id, err)
				break
			}
			if got, _ := summarize(resp); !slices.Equal(got, want) {
				why = fmt.Sprintf("%s sees %v, want %v", id, got, want)
				break
			}
		}
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster did not converge within %s: %s", within, why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func writeHistory(dir string, h History) error {
	f, err := os.Create(filepath.Join(dir, "history.json"))
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", " ")
	if err := enc.Encode(h); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func algName(a pb.Algorithm) string {
	if a == pb.Algorithm_SLIDING_WINDOW_LOG {
		return "log"
	}
	return "counter"
}
