package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/peerlimit/peerlimit/internal/faultclock"
)

// Plan is what one seed draws: the cluster, its settings, the workload
// and the faults, all before anything runs, so that a seed names one
// schedule exactly (the interleavings of goroutines are the scheduler's:
// see the package doc).
type Plan struct {
	Seed  uint64
	Nodes int // at the start; a join adds one
	// The node settings the seed varies.
	ReplicationInterval time.Duration
	LeaseMinRate        int
	Clocks              map[string]faultclock.Config
	// The workload: Keys per algorithm with Limit per Window, offered at
	// Load × their rate by Workers, HotShare of the checks on key 0.
	KeysPerAlgorithm int
	Limit            int64
	Window           time.Duration
	Load             float64
	Workers          int
	HotShare         float64
	// Ops are the shares of the kinds of operation (the rest: checks).
	BatchShare, AllShare, ReserveShare float64
	// Steps are the faults, in order; every one is undone by Duration.
	Steps    []Step
	Duration time.Duration
	// Settle is the calm after the last step, in which the cluster must
	// converge and answer undegraded again.
	Settle time.Duration
}

// Step is one fault, or its end, at At.
type Step struct {
	At   time.Duration
	Kind Kind
	// Nodes are the members it acts on: one for a node fault, the sides'
	// members for a partition (Groups), two for a link.
	Nodes  []string
	Groups [][]string
	// Loss, Delay and Jitter are a link's.
	Loss          float64
	Delay, Jitter time.Duration
	// OneWay: a link fault from Nodes[0] to Nodes[1] only.
	OneWay bool
}

// Kind is what a step does.
type Kind string

// The kinds of step. Each fault has its end among them.
const (
	Crash     Kind = "crash"        // kill -9, for good (until Restart)
	Restart   Kind = "restart"      // start a crashed node again, from its disk
	PowerLoss Kind = "power-loss"   // kill -9, and what was not synced is lost too
	Pause     Kind = "pause"        // SIGSTOP
	Resume    Kind = "resume"       // SIGCONT
	Partition Kind = "partition"    // cut the groups apart, both ways
	Bridge    Kind = "bridge"       // cut one link, both ways; a third member still reaches both
	Loss      Kind = "loss"         // drop a share of the packets and calls over a link
	Latency   Kind = "latency"      // delay (with jitter) the packets and calls over a link
	Heal      Kind = "heal"         // end every link fault
	Join      Kind = "join"         // a new member
	Leave     Kind = "leave"        // a graceful leave (SIGTERM)
	Rolling   Kind = "rolling"      // every member in turn: leave, start again
	FullStop  Kind = "full-stop"    // every member leaves at once, then all start again
	FullKill  Kind = "full-restart" // every member killed at once, then all start again
)

// ids names n members: n1, n2, …
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("n", i+1)
	}
	return out
}

// NewPlan draws seed's plan.
func NewPlan(seed uint64) Plan {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	p := Plan{Seed: seed, Nodes: 3 + r.IntN(5),
		ReplicationInterval: []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}[r.IntN(3)],
		LeaseMinRate:        []int{10, 50, 200}[r.IntN(3)],
		KeysPerAlgorithm:    2 + r.IntN(3), Limit: int64(5 + r.IntN(16)), Window: time.Second,
		Load: 1.5 + r.Float64()*2, Workers: 4 + r.IntN(8), HotShare: r.Float64() * 0.5,
		BatchShare: 0.1, AllShare: 0.05, ReserveShare: 0.05,
		Duration: 20 * time.Second, Settle: 8 * time.Second}
	p.Clocks = drawClocks(r, ids(p.Nodes))
	if noClocks {
		p.Clocks = nil
	}
	p.Steps = drawSteps(r, p.Nodes, p.Duration)
	return p
}

// drawClocks gives a few members a wrong clock: offsets and steps of whole
// windows (the checker's fixed windows are the true clock's), drifts of a
// few percent.
func drawClocks(r *rand.Rand, members []string) map[string]faultclock.Config {
	out := map[string]faultclock.Config{}
	for _, id := range members {
		switch r.IntN(8) {
		case 0:
			out[id] = faultclock.Config{Offset: time.Duration(r.IntN(5)-2) * time.Second}
		case 1:
			out[id] = faultclock.Config{Drift: (r.Float64() - 0.5) * 0.04}
		case 2:
			out[id] = faultclock.Config{Step: time.Duration(r.IntN(5)-2) * time.Second, StepAfter: time.Duration(2+r.IntN(15)) * time.Second}
		}
	}
	return out
}

// drawSteps draws one to three faults, one at a time, each undone before
// the next begins and all by duration.
func drawSteps(r *rand.Rand, nodes int, duration time.Duration) []Step {
	members := ids(nodes)
	ever := slices.Clone(members) // a join takes a name none ever had
	var out []Step
	at := time.Duration(2+r.IntN(3)) * time.Second
	for n := 1 + r.IntN(3); n > 0 && at < duration-4*time.Second; n-- {
		long := time.Duration(2+r.IntN(6)) * time.Second
		steps := drawFault(r, members, newID(ever), at, long)
		out = append(out, steps...)
		if k := steps[0].Kind; k == Join {
			members, ever = append(members, steps[0].Nodes[0]), append(ever, steps[0].Nodes[0])
		} else if k == Leave {
			members = slices.DeleteFunc(members, func(id string) bool { return id == steps[0].Nodes[0] })
		}
		at = steps[len(steps)-1].At + time.Duration(2+r.IntN(3))*time.Second
	}
	return out
}

// drawFault draws one fault of members starting at at, lasting about
// long, and its end; a member that joins is called fresh.
func drawFault(r *rand.Rand, members []string, fresh string, at, long time.Duration) []Step {
	pick := func() string { return members[r.IntN(len(members))] }
	two := func() (string, string) {
		i := r.IntN(len(members))
		j := (i + 1 + r.IntN(len(members)-1)) % len(members)
		return members[i], members[j]
	}
	end := at + long
	switch r.IntN(13) {
	case 0:
		id := pick()
		return []Step{{At: at, Kind: Crash, Nodes: []string{id}}, {At: end, Kind: Restart, Nodes: []string{id}}}
	case 1:
		id := pick()
		return []Step{{At: at, Kind: PowerLoss, Nodes: []string{id}}, {At: end, Kind: Restart, Nodes: []string{id}}}
	case 2:
		id := pick()
		return []Step{{At: at, Kind: Pause, Nodes: []string{id}}, {At: end, Kind: Resume, Nodes: []string{id}}}
	case 3:
		return []Step{{At: at, Kind: Partition, Groups: split(r, members)}, {At: end, Kind: Heal}}
	case 4:
		if len(members) < 3 {
			return drawFault(r, members, fresh, at, long)
		}
		a, b := two()
		return []Step{{At: at, Kind: Bridge, Nodes: []string{a, b}}, {At: end, Kind: Heal}}
	case 5:
		a, b := two()
		return []Step{{At: at, Kind: Loss, Nodes: []string{a, b}, Loss: 0.02 + r.Float64()*0.3, OneWay: r.IntN(2) == 0}, {At: end, Kind: Heal}}
	case 6, 7:
		a, b := two()
		return []Step{{At: at, Kind: Latency, Nodes: []string{a, b}, Delay: time.Duration(5+r.IntN(60)) * time.Millisecond,
			Jitter: time.Duration(r.IntN(30)) * time.Millisecond, OneWay: r.IntN(3) == 0}, {At: end, Kind: Heal}}
	case 8:
		return []Step{{At: at, Kind: Join, Nodes: []string{fresh}}}
	case 9:
		if len(members) < 3 {
			return drawFault(r, members, fresh, at, long)
		}
		return []Step{{At: at, Kind: Leave, Nodes: []string{pick()}}}
	case 10:
		return []Step{{At: at, Kind: Rolling}}
	case 11:
		return []Step{{At: at, Kind: FullStop}}
	default:
		return []Step{{At: at, Kind: FullKill}}
	}
}

// newID names a member not among members, nor ever among them: the
// next number past the highest.
func newID(members []string) string {
	n := 0
	for _, id := range members {
		var k int
		if _, err := fmt.Sscanf(id, "n%d", &k); err == nil {
			n = max(n, k)
		}
	}
	return fmt.Sprint("n", n+1)
}

// split cuts members into two groups, neither empty.
func split(r *rand.Rand, members []string) [][]string {
	shuffled := slices.Clone(members)
	r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	k := 1 + r.IntN(len(shuffled)-1)
	a, b := slices.Clone(shuffled[:k]), slices.Clone(shuffled[k:])
	slices.Sort(a)
	slices.Sort(b)
	return [][]string{a, b}
}

// String is the plan as a story: what a failing seed's report begins with.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes, %d keys per algorithm of %d per %s at %.1f× their rate, %d workers, %.0f %% on a hot key; replication every %s, leases from %d/s\n",
		p.Seed, p.Nodes, p.KeysPerAlgorithm, p.Limit, p.Window, p.Load, p.Workers, 100*p.HotShare, p.ReplicationInterval, p.LeaseMinRate)
	for _, id := range slices.Sorted(maps.Keys(p.Clocks)) {
		c := p.Clocks[id]
		fmt.Fprintf(&b, "  clock %s: offset %s, drift %+.3f, step %s after %s\n", id, c.Offset, c.Drift, c.Step, c.StepAfter)
	}
	for _, s := range p.Steps {
		fmt.Fprintf(&b, "  %6s %s\n", s.At, s.describe())
	}
	return b.String()
}

func (s Step) describe() string {
	switch s.Kind {
	case Partition:
		return fmt.Sprintf("%s %v", s.Kind, s.Groups)
	case Loss:
		return fmt.Sprintf("%s %.0f %% %v one-way=%v", s.Kind, 100*s.Loss, s.Nodes, s.OneWay)
	case Latency:
		return fmt.Sprintf("%s %s ± %s %v one-way=%v", s.Kind, s.Delay, s.Jitter, s.Nodes, s.OneWay)
	}
	return fmt.Sprintf("%s %v", s.Kind, s.Nodes)
}

// noClocks turns the clock faults off (investigation only).
var noClocks = false

// NoClocks turns the clock faults off, for investigating the others.
func NoClocks() { noClocks = true }
