package jepsenlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	// NeedsFirewall: the scenario partitions the network. Without root
	// and iptables it is skipped, and reported as skipped.
	NeedsFirewall bool
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
}

// Event is a step as it happened.
type Event struct {
	Name   string        `json:"name"`
	Begin  time.Duration `json:"begin_ns"`
	End    time.Duration `json:"end_ns"`
	Steady int           `json:"steady"`
	Fault  bool          `json:"fault"`
	Err    string        `json:"err,omitempty"`
	// Expect is each observable node's expected alive set once converged.
	Expect map[string][]string `json:"expect"`
	// Sides maps each observable node to its side of the network.
	Sides map[string]int `json:"sides"`
}

// Env is what a step acts on: the node processes, the firewall, the
// clients, and the topology the harness has made, from which the expected
// membership views follow.
type Env struct {
	procs   *Procs
	fw      *Firewall // nil: no partitions here
	clients *Clients
	start   time.Time
	ids     []string // every defined node, in order
	log     *slog.Logger

	mu      sync.Mutex
	cut     map[[2]string]bool // node ids whose link is cut
	left    map[string]bool    // gracefully removed
	started map[string]bool    // ever started
	up      map[string][]span  // when each node was running and answering
}

type span struct{ From, To time.Duration } // To 0: still up

func (e *Env) now() time.Duration { return time.Since(e.start) }

// ID returns the i-th defined node (0-based).
func (e *Env) ID(i int) string { return e.ids[i] }

// Kill kill -9s a node.
func (e *Env) Kill(ctx context.Context, id string) error {
	e.markDown(id)
	return e.procs.Kill(id)
}

// Start starts (or restarts, with the same id and addresses) a node and
// makes it a target of the workload.
func (e *Env) Start(ctx context.Context, id string) error {
	if err := e.procs.Start(ctx, id, e.seeds(id)); err != nil {
		return err
	}
	e.mu.Lock()
	e.started[id] = true
	delete(e.left, id)
	e.mu.Unlock()
	if err := e.clients.Add(id, e.procs.Spec(id).GRPCAddr()); err != nil {
		return err
	}
	e.markUp(id)
	return nil
}

// Pause SIGSTOPs a node.
func (e *Env) Pause(ctx context.Context, id string) error {
	e.markDown(id)
	return e.procs.Pause(id)
}

// Resume SIGCONTs a paused node.
func (e *Env) Resume(ctx context.Context, id string) error {
	if err := e.procs.Resume(id); err != nil {
		return err
	}
	e.markUp(id)
	return nil
}

// Leave removes a node gracefully (SIGTERM: leave, hand off, drain), as an
// operator scaling down would, after draining clients from it.
func (e *Env) Leave(ctx context.Context, id string) error {
	e.clients.Retire(id)
	e.markDown(id)
	e.mu.Lock()
	e.left[id] = true
	e.mu.Unlock()
	return e.procs.Leave(id, 15*time.Second)
}

// Partition splits the nodes into groups that cannot reach each other.
func (e *Env) Partition(groups ...[]string) error {
	if e.fw == nil {
		return ErrNoFirewall
	}
	ips := make([][]string, len(groups))
	e.mu.Lock()
	for i, g := range groups {
		for _, id := range g {
			ips[i] = append(ips[i], e.procs.Spec(id).IP)
		}
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					e.cut[pair(a, b)] = true
				}
			}
		}
	}
	e.mu.Unlock()
	return e.fw.Partition(ips)
}

// Cut cuts the link between two nodes only.
func (e *Env) Cut(a, b string) error {
	if e.fw == nil {
		return ErrNoFirewall
	}
	e.mu.Lock()
	e.cut[pair(a, b)] = true
	e.mu.Unlock()
	return e.fw.Cut(e.procs.Spec(a).IP, e.procs.Spec(b).IP)
}

// Heal removes every cut.
func (e *Env) Heal() error {
	if e.fw == nil {
		return ErrNoFirewall
	}
	e.mu.Lock()
	clear(e.cut)
	e.mu.Unlock()
	return e.fw.Heal()
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

func (e *Env) seeds(self string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, id := range e.ids {
		if id != self && !e.left[id] {
			out = append(out, e.procs.Spec(id).GossipAddr())
		}
	}
	return out
}

func (e *Env) markDown(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.up[id]; len(s) > 0 && s[len(s)-1].To == 0 {
		s[len(s)-1].To = e.now()
	}
}

func (e *Env) markUp(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.up[id] = append(e.up[id], span{From: e.now()})
}

// observable lists the nodes that run and answer (not paused, not gone).
func (e *Env) observable() []string {
	var out []string
	for _, id := range e.ids {
		if e.procs.State(id) == Running {
			out = append(out, id)
		}
	}
	return out
}

// expectation is what every answering node should see once the cluster
// has converged: the answering nodes it can reach, directly or through
// another (memberlist probes indirectly), and the side it is on.
func (e *Env) expectation() (map[string][]string, map[string]int) {
	obs := e.observable()
	e.mu.Lock()
	defer e.mu.Unlock()
	side := map[string]int{}
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
				if side[y] < 0 && !e.cut[pair(x, y)] {
					side[y] = n
					queue = append(queue, y)
				}
			}
		}
		n++
	}
	expect := map[string][]string{}
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
	// KeysPerAlgorithm keys use each algorithm, all with Limit per Window.
	KeysPerAlgorithm int
	Limit            int64
	Window           time.Duration
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

// Config is a run: which binary, where to write, which addresses.
type Config struct {
	Bin     string
	OutDir  string
	Profile Profile
	// BaseIP is the first node's loopback address; the others follow
	// (127.0.0.11, .12, ...). Runs that may overlap need distinct bases:
	// firewall rules are by address.
	BaseIP string
	Seed   uint64
	Logger *slog.Logger
}

func (c Config) nodeIP(i int) (string, error) {
	var a, b, cc, d int
	if _, err := fmt.Sscanf(c.BaseIP, "%d.%d.%d.%d", &a, &b, &cc, &d); err != nil || a != 127 {
		return "", fmt.Errorf("BaseIP must be a 127.x.y.z loopback address, got %q", c.BaseIP)
	}
	if d+i > 254 {
		return "", fmt.Errorf("BaseIP %s leaves no room for %d nodes", c.BaseIP, i+1)
	}
	return fmt.Sprintf("%d.%d.%d.%d", a, b, cc, d+i), nil
}

// Run runs one scenario from a fresh cluster to teardown and returns its
// history, analysed. Every process it started is stopped and every
// firewall rule it added removed before it returns, whatever happened.
func Run(ctx context.Context, cfg Config, sc Scenario) (res *Result, err error) {
	p := cfg.Profile
	dir := filepath.Join(cfg.OutDir, sc.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("scenario", sc.Name)

	var fw *Firewall
	if sc.NeedsFirewall {
		if fw, err = NewFirewall("PLJEPSEN-" + strings.ReplaceAll(cfg.BaseIP, ".", "-")[len("127-"):]); err != nil {
			return &Result{Scenario: sc.Name, About: sc.About, Skipped: err.Error()}, nil
		}
		defer func() {
			if cerr := fw.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}()
	}
	procs, err := NewProcs(cfg.Bin, dir, p.NodeArgs)
	if err != nil {
		return nil, err
	}
	defer procs.Close()
	clients := NewClients()
	defer clients.Close()

	env := &Env{procs: procs, fw: fw, clients: clients, log: log,
		cut: map[[2]string]bool{}, left: map[string]bool{}, started: map[string]bool{}, up: map[string][]span{}}
	for i := range sc.Nodes + sc.Extra {
		ip, err := cfg.nodeIP(i)
		if err != nil {
			return nil, err
		}
		id := fmt.Sprintf("n%d", i+1)
		if _, err := procs.Define(id, ip); err != nil {
			return nil, err
		}
		env.ids = append(env.ids, id)
	}
	env.start = time.Now()
	for _, id := range env.ids[:sc.Nodes] {
		if err := env.Start(ctx, id); err != nil {
			return nil, err
		}
	}
	if err := waitConverged(ctx, env, 20*time.Second); err != nil {
		return nil, err
	}
	log.Info("cluster up", "nodes", sc.Nodes)

	keys := make([]KeySpec, 0, 2*p.KeysPerAlgorithm)
	for _, alg := range []pb.Algorithm{pb.Algorithm_SLIDING_WINDOW_COUNTER, pb.Algorithm_SLIDING_WINDOW_LOG} {
		for i := range p.KeysPerAlgorithm {
			keys = append(keys, KeySpec{Name: fmt.Sprintf("jepsen:%s:%s:%d", sc.Name, algName(alg), i), Algorithm: alg, Limit: p.Limit, Window: p.Window})
		}
	}
	wl := Workload{Keys: keys, Workers: p.Workers, Timeout: p.ClientTimeout,
		Rate: p.Load * float64(p.Limit) * float64(len(keys)) / p.Window.Seconds()}

	// The run's clock starts with the workload; the cluster's startup is
	// before zero.
	start := time.Now()
	shift := start.Sub(env.start)
	env.mu.Lock()
	for id, spans := range env.up {
		for i := range spans {
			spans[i].From -= shift
		}
		env.up[id] = spans
	}
	env.start = start
	env.mu.Unlock()

	expect, sides := env.expectation()
	events := []Event{{Name: "start", Steady: 1, Expect: expect, Sides: sides}}
	mon := &Monitor{Interval: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, Nodes: func() []string { return env.ids }}
	runCtx, cancel := context.WithTimeout(ctx, time.Duration(float64(sc.Duration)*p.Scale))
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); mon.Run(runCtx, clients, start) }()
	var history []Op
	go func() { defer wg.Done(); history = wl.Run(runCtx, clients, start, cfg.Seed) }()

	var stepErr error
	for _, st := range sc.Steps {
		at := time.Duration(float64(st.At) * p.Scale)
		select {
		case <-runCtx.Done():
		case <-time.After(time.Until(start.Add(at))):
		}
		if runCtx.Err() != nil {
			stepErr = fmt.Errorf("step %q: the run ended first", st.Name)
			break
		}
		ev := Event{Name: st.Name, Begin: time.Since(start), Steady: st.Steady, Fault: st.Fault}
		if err := st.Do(runCtx, env); err != nil {
			ev.Err = err.Error()
			stepErr = errors.Join(stepErr, fmt.Errorf("step %q: %w", st.Name, err))
		}
		ev.End = time.Since(start)
		ev.Expect, ev.Sides = env.expectation()
		events = append(events, ev)
		log.Info("nemesis", "step", st.Name, "at", ev.Begin.Round(time.Millisecond), "took", (ev.End - ev.Begin).Round(time.Millisecond))
	}
	<-runCtx.Done()
	wg.Wait()
	end := time.Since(start)
	env.mu.Lock()
	up := env.up
	env.mu.Unlock()

	res = Analyze(History{Scenario: sc.Name, About: sc.About, Start: start, End: end, Nodes: env.ids, Keys: keys,
		Ops: history, Views: mon.Views(), Events: events, Up: up})
	if stepErr != nil {
		res.Errors = append(res.Errors, stepErr.Error())
	}
	if err := writeHistory(dir, res.History); err != nil {
		return res, err
	}
	return res, nil
}

// waitConverged waits until every running node sees every running node.
func waitConverged(ctx context.Context, e *Env, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var why string
	for {
		expect, _ := e.expectation()
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
