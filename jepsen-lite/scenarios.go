package jepsenlite

import (
	"context"
	"errors"
	"slices"
	"time"
)

// FullProfile is `make chaos`: 12 saturated window keys, 2.5× their
// limits, 2 GCRA keys (one hot) and 2 concurrency keys.
func FullProfile() Profile {
	return Profile{
		Name:             "full",
		KeysPerAlgorithm: 6,
		Limit:            10,
		Window:           time.Second,
		GCRAKeys:         2,
		ConcurrencyKeys:  2,
		Load:             2.5,
		Workers:          16,
		ClientTimeout:    time.Second,
		NodeArgs:         NodeArgs(),
		Scale:            1,
	}
}

// ShortProfile is the same scenarios at 40 % of the time, for the test
// command.
func ShortProfile() Profile {
	p := FullProfile()
	p.Name, p.Scale = "short", 0.4
	return p
}

// NodeArgs are the node settings of every scenario: gossip timed for one
// host, a forward deadline well under the client's, handoff every second.
func NodeArgs() []string {
	return []string{
		"--gossip-profile", "local",
		"--forward-timeout", "250ms",
		"--handoff-interval", "1s",
		"--shutdown-timeout", "10s",
		"--fallback", "local",
		"--log-level", "info",
	}
}

// Scenarios lists every scenario, in the order they run. Offsets are for
// Scale 1.
func Scenarios() []Scenario {
	return slices.Concat(faultScenarios(), hotScenarios(), reserveScenarios(), restartScenarios())
}

// faultScenarios are the faults, against the profile's load.
func faultScenarios() []Scenario {
	return slices.Concat(nodeScenarios(), linkScenarios(), slowLinkScenarios(), clockScenarios())
}

// slowLinkScenarios slow links down for the whole run (the Delayer:
// netfilter queue, no netem). The promise: a link that is slow but works
// is not taken for a cut (no storm of degraded answers, no over-admission
// beyond 1.2×), and checks are answered within the forward timeout the
// nodes run with (p99; -node-args moves it), by their owners. Each is
// measured (LinkResult) for docs/chaos.md.
func slowLinkScenarios() []Scenario {
	jittery := Link{Delay: 20 * time.Millisecond, Jitter: 10 * time.Millisecond}
	n1 := func(e *Env) ([]string, []string) { return []string{e.ID(0)}, []string{e.ID(1), e.ID(2)} }
	// slowAt leaves the monitor time to see the cluster converge
	// before the links slow down (the start's convergence is checked).
	const slowAt = 2 * time.Second
	return []Scenario{
		{
			Name: "latency", About: "20 ms ± 10 ms each way between n1 and the others (n2 – n3 fast), for the whole run",
			Nodes: 3, Duration: 20 * time.Second, Needs: NeedSlowLink, MaxWorst: 1.2, MaxDegraded: 0.01, P99WithinForward: true,
			Steps: []Step{{At: slowAt, Name: "slow n1 ↔ n2 n3: " + jittery.String(), Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error {
				a, b := n1(e)
				return e.DelayBoth(ctx, a, b, jittery)
			}}},
		},
		{
			Name: "asymmetric", About: "20 ms ± 10 ms from n1 to the others only; their answers come back at once",
			// In make chaos only: the test command's budget is tight, and
			// latency covers the delayer (8.5 s there, reliable too).
			Nodes: 3, Duration: 20 * time.Second, Needs: NeedSlowLink, MaxWorst: 1.2, MaxDegraded: 0.01, P99WithinForward: true, FullOnly: true,
			Steps: []Step{{At: slowAt, Name: "slow n1 → n2 n3: " + jittery.String(), Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error {
				a, b := n1(e)
				return e.Delay(ctx, a, b, jittery)
			}}},
		},
		{
			Name: "latency-loss", About: "20 ms ± 10 ms and 2 % loss each way between n1 and the others, for the whole run",
			// A lost segment waits for TCP's retransmission (≥ 200 ms on
			// Linux, more than the round trip), so some forwards time out
			// and their checks are answered degraded: few may be. A
			// check whose forward lost a segment waits for its
			// retransmission (Linux's 200 ms minimum RTO and the 40 ±
			// 20 ms round trip) within the forward timeout, or is
			// relayed after it, over a link as lossy: p99 ≤ the timeout
			// + one retransmission, 250 ms (docs/chaos.md measured 234 ms
			// at a 250 ms timeout, 307 ms at 1 s).
			Nodes: 3, Duration: 20 * time.Second, Needs: NeedSlowLink, MaxWorst: 1.2, MaxDegraded: 0.02,
			P99WithinForward: true, P99Slack: 250 * time.Millisecond, FullOnly: true,
			Steps: []Step{{At: slowAt, Name: "slow, lossy n1 ↔ n2 n3", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error {
				a, b := n1(e)
				return e.DelayBoth(ctx, a, b, Link{Delay: 20 * time.Millisecond, Jitter: 10 * time.Millisecond, Loss: 0.02})
			}}},
		},
		{
			Name: "wan", About: "six nodes in three regions of two (n1 n2 | n3 n4 | n5 n6), 40 ms round trip between regions (20 ms ± 2 ms each way), none within",
			Nodes: 6, Duration: 25 * time.Second, Needs: NeedSlowLink, MaxWorst: 1.2, MaxDegraded: 0.01, P99WithinForward: true, FullOnly: true,
			Steps: []Step{{At: slowAt, Name: "three regions 40 ms apart", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error {
				region := func(i int) []string { return []string{e.ID(2 * i), e.ID(2*i + 1)} }
				l := Link{Delay: 20 * time.Millisecond, Jitter: 2 * time.Millisecond}
				var errs []error
				for i := range 3 {
					for j := range 3 {
						if i != j {
							errs = append(errs, e.Delay(ctx, region(i), region(j), l))
						}
					}
				}
				return errors.Join(errs...)
			}}},
		},
	}
}

// linkScenarios are single links that fail or work badly.
func linkScenarios() []Scenario {
	return []Scenario{
		{
			Name: "bridge", About: "cut n1 from n3 only; n2 still reaches both (a bridge), for 12 s",
			Nodes: 3, Duration: 35 * time.Second, Needs: NeedLinkCut, MaxWorst: 1.2,
			Steps: []Step{
				// Gossip probes n1↔n3 indirectly through n2, so nobody
				// is declared dead and the ring stays; forwards between
				// n1 and n3 fail and are relayed through n2 (the keys'
				// heir, or the other member): one decider still.
				{At: 10 * time.Second, Name: "cut n1 – n3", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.Cut(ctx, e.ID(0), e.ID(2)) }},
				{At: 22 * time.Second, Name: "heal", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Heal(ctx) }},
			},
		},
		{
			Name: "lossy-link", About: "5 % of the packets between n1 and n3 dropped, both ways, for 12 s: a link that works, badly",
			// Forwards across it that lose a packet wait for TCP's
			// retransmission (≥ 200 ms) and some time out; nothing may
			// take the link for a cut, and few answers may be degraded.
			Nodes: 3, Duration: 35 * time.Second, Needs: NeedLinkCut, MaxWorst: 1.2, MaxDegraded: 0.02,
			Steps: []Step{
				{At: 10 * time.Second, Name: "5 % loss n1 – n3", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.Lose(ctx, e.ID(0), e.ID(2), 0.05) }},
				{At: 22 * time.Second, Name: "heal", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Heal(ctx) }},
			},
		},
		{
			Name: "link-stall", About: "every packet between n1 and n3 dropped for 2 s, then the link recovers",
			// FullOnly: the test command's budget; lossy-link keeps a link
			// fault in it, and the simulation cuts links in most seeds.
			Nodes: 3, Duration: 25 * time.Second, Needs: NeedLinkCut, MaxWorst: 1.2, FullOnly: true,
			Steps: []Step{
				{At: 10 * time.Second, Name: "stall n1 – n3", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.Cut(ctx, e.ID(0), e.ID(2)) }},
				{At: 12 * time.Second, Name: "recover", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Heal(ctx) }},
			},
		},
	}
}

// clockScenarios give one node a wrong wall clock (--fault-clock-*).
func clockScenarios() []Scenario {
	return []Scenario{
		{
			Name: "clock-skew", About: "n1's clock 2 s behind, n3's 2 s ahead for the whole run: a forwarder and an owner disagree by up to 4 s",
			// A check is stamped by its owner's clock alone, and a forward
			// carries how long its sender waits, never until when.
			Nodes: 3, Duration: 20 * time.Second, MaxWorst: 1.2,
			NodeArgs: map[string][]string{"n1": {"--fault-clock-offset", "-2s"}, "n3": {"--fault-clock-offset", "2s"}},
		},
		{
			Name: "clock-drift", About: "n3's clock runs 1 % fast for the whole run",
			// FullOnly: the test command's budget; the simulation's seeds
			// draw drifting clocks (make test's hundred among them).
			Nodes: 3, Duration: 20 * time.Second, MaxWorst: 1.2, ClockRate: 0.01, FullOnly: true,
			NodeArgs: map[string][]string{"n3": {"--fault-clock-drift", "0.01"}},
		},
		{
			Name: "clock-step-back", About: "n2's clock steps 5 s back 6 s after it starts (an NTP step): its keys' entries lie in its future",
			// The node's clock never steps (internal/wallclock): it slews
			// back at 1 %, a clock 1 % slow while it lasts.
			// FullOnly: the test command's budget; clock-step keeps a step
			// in it, and the simulation's seeds draw steps both ways.
			Nodes: 3, Duration: 20 * time.Second, MaxWorst: 1.2, ClockRate: -0.01, FullOnly: true,
			NodeArgs: map[string][]string{"n2": {"--fault-clock-step", "-5s", "--fault-clock-step-after", "6s"}},
		},
		{
			Name: "clock-step", About: "n2's clock steps 5 s ahead 6 s after it starts (an NTP step, a VM resumed): every key it owns looks idle",
			// The node's clock never steps (internal/wallclock): it slews
			// forward at 1 %, a clock 1 % fast while it lasts. Read
			// directly, the step let every key n2 owns admit a limit more
			// at once (1.90× in the first run).
			Nodes: 3, Duration: 20 * time.Second, MaxWorst: 1.2, ClockRate: 0.01,
			NodeArgs: map[string][]string{"n2": {"--fault-clock-step", "5s", "--fault-clock-step-after", "6s"}},
		},
	}
}

// nodeScenarios are nodes that die, stop, leave or join, and cuts.
func nodeScenarios() []Scenario {
	return []Scenario{
		{
			Name: "calm", About: "no fault: the baseline every bound is measured against",
			Nodes: 3, Duration: 20 * time.Second,
		},
		{
			Name: "kill", About: "kill -9 a node, restart it 10 s later with the same id (its own state is lost; its heirs hold the replicas)",
			// The crash's promise: until the heirs have handed the
			// restarted node its counts back (HandoffDone), its keys stay
			// with them.
			Nodes: 3, Duration: 35 * time.Second, MaxWorst: 1.5,
			Steps: []Step{
				{At: 10 * time.Second, Name: "kill -9 n2", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.Kill(ctx, e.ID(1)) }},
				{At: 20 * time.Second, Name: "restart n2", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Start(ctx, e.ID(1)) }},
			},
		},
		{
			Name: "crash", About: "kill -9 a node for good: its heirs go on from its replicas",
			// Measured 1.0–1.2 in processes, 1.3 in docker mode
			// (docs/chaos.md); 1.5 leaves room for the replication lag on
			// a loaded machine and still fails a cluster without replicas
			// (2.0–2.3).
			Nodes: 3, Duration: 25 * time.Second, MaxWorst: 1.5,
			Steps: []Step{
				{At: 10 * time.Second, Name: "kill -9 n2", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.Kill(ctx, e.ID(1)) }},
			},
		},
		{
			Name: "pause", About: "SIGSTOP a node for 8 s, then SIGCONT: it comes back with its old state",
			Nodes: 3, Duration: 32 * time.Second,
			Steps: []Step{
				{At: 10 * time.Second, Name: "pause n3", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.Pause(ctx, e.ID(2)) }},
				{At: 18 * time.Second, Name: "resume n3", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Resume(ctx, e.ID(2)) }},
			},
		},
		{
			Name: "partition", About: "cut n1 off from n2 and n3 (2|1) for 12 s, then heal",
			Nodes: 3, Duration: 38 * time.Second, Needs: NeedPartition,
			Steps: []Step{
				{At: 10 * time.Second, Name: "partition n1 | n2 n3", Steady: 2, Fault: true, Do: func(ctx context.Context, e *Env) error {
					return e.Partition(ctx, []string{e.ID(0)}, []string{e.ID(1), e.ID(2)})
				}},
				{At: 22 * time.Second, Name: "heal", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Heal(ctx) }},
			},
		},
		{
			Name: "partition-share", About: "partition 2|1 for 12 s, as above, with --fallback share: each side keeps to its share of each limit",
			Nodes: 3, Duration: 38 * time.Second, Needs: NeedPartition, Args: []string{"--fallback", "share"}, MaxWorst: 1.5,
			Steps: []Step{
				{At: 10 * time.Second, Name: "partition n1 | n2 n3", Steady: 2, Fault: true, Do: func(ctx context.Context, e *Env) error {
					return e.Partition(ctx, []string{e.ID(0)}, []string{e.ID(1), e.ID(2)})
				}},
				{At: 22 * time.Second, Name: "heal", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Heal(ctx) }},
			},
		},
		{
			Name: "scale", About: "add n4 under load, then gracefully remove n1 (SIGTERM: leave and hand off)",
			// The crash's promise: a newcomer's partitions stay with their
			// previous owners until handed over, and the leaver's wait for
			// its handoff.
			Nodes: 3, Extra: 1, Duration: 32 * time.Second, MaxWorst: 1.5,
			Steps: []Step{
				{At: 10 * time.Second, Name: "add n4", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Start(ctx, e.ID(3)) }},
				{At: 20 * time.Second, Name: "remove n1", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.Leave(ctx, e.ID(0)) }},
			},
		},
	}
}

// leaseArgs make the hot scenarios' keys leased: at 10× a limit of 10 per
// second, each node forwards a key about 33 times a second, far below the
// default --lease-min-rate (200) and too often for 250 ms leases in 1 s
// windows (a log must span 20 lease durations).
var leaseArgs = []string{"--lease-duration", "50ms", "--lease-min-rate", "10"}

// hotScenarios offer every key at 10× its limit, with budget leases.
func hotScenarios() []Scenario {
	return []Scenario{
		{
			Name: "hot", About: "every key hot: offered at 10× its limit through all nodes, with budget leases at a rate the workload reaches; no fault: no window over its limit",
			Nodes: 3, Duration: 20 * time.Second, Load: 10, Args: leaseArgs, MaxWorst: 1.0,
		},
		{
			Name: "hot-kill", About: "as hot, and kill -9 a node for good: the leases it held are lost (its owners count them as used: under-admission only); its own keys go on from their replicas",
			// 1.5: the crash scenario's promise, for the killed node's own
			// keys (replication lag); the lost leases add none (docs/chaos.md).
			Nodes: 3, Duration: 25 * time.Second, Load: 10, Args: leaseArgs, MaxWorst: 1.5,
			Steps: []Step{
				{At: 10 * time.Second, Name: "kill -9 n2", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.Kill(ctx, e.ID(1)) }},
			},
		},
	}
}

// restartScenarios stop the whole cluster and start it again: every node
// keeps its counts in its data directory (--data-dir), and restores them
// before it serves. Calendar-day keys are in the workload: a day's budget
// is what a restart must not give back. Three of them (one per zone) are
// spent out 6 s into the run, before the fault, and must stay spent;
// three are still being spent then, and spent out after the restart.
func restartScenarios() []Scenario {
	all := func(e *Env) []string { return []string{e.ID(0), e.ID(1), e.ID(2)} }
	days := []time.Duration{6 * time.Second, 18 * time.Second}
	return []Scenario{
		{
			Name: "full-restart", About: "kill -9 every node at once, and start them all again 3 s later from their data directories; calendar-day keys (UTC, Paris, Kiritimati) beside the sliding ones",
			// 1.1×: the promise with the defaults (#36). What a
			// kill loses is what its owner counted after the take of the
			// last round it wrote: a hit counted just after a take waits
			// a full --replication-interval (20 ms) for the next round,
			// which writes it to the page cache (that outlives the
			// process) before it replicates. So one interval plus a
			// round's write, two intervals at most while a write keeps
			// within one (docs/operations.md, "Persistence"): the checker
			// lets a day hold the admissions of those 40 ms over its
			// limit (Step.Loses), about one per key at the profile's 25
			// checks/s, and no more.
			// The first node back decides the others' keys from the
			// replicas it restored (replica.Failover.TakeOverAbsent), and
			// marks its answers degraded while it is alone
			// (ownership.Config.Rejoining): what it holds no replica of
			// is on the others' disks.
			Nodes: 3, Duration: 30 * time.Second, MaxWorst: 1.1, DayKeys: 6, DaySpends: days,
			Steps: []Step{
				{At: 10 * time.Second, Name: "kill -9 n1 n2 n3", Steady: 1, Fault: true, Loses: 2 * replicationRound,
					Do: func(ctx context.Context, e *Env) error { return e.KillAll(ctx, all(e)...) }},
				{At: 13 * time.Second, Name: "restart n1 n2 n3", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.StartAll(ctx, all(e)...) }},
			},
		},
		{
			Name: "full-stop", About: "SIGTERM to every node at once (each leaves, hands off what it can, writes the rest to its data directory), and start them all again 3 s later; calendar-day keys beside the sliding ones",
			// A graceful stop loses no count: every day spent before it
			// is spent after it. While every member leaves at once, each
			// one's ring is the others, which are leaving too: a check
			// is forwarded from leaver to leaver and decided where it
			// lands, from state that may have been handed off already,
			// marked degraded (docs/chaos.md, "Found and not fixed").
			// Windows that end in the stop's second: 1.1–1.2× on a quiet
			// machine, up to 2.0× on a loaded one. No promise beyond the
			// checker's bound (limit × deciders while the members leave,
			// and no unmarked over-admission): issue 36 asked for
			// exactly 1.00×, which this does not meet.
			// After the fix of one cause (a leaving member takes no
			// handoff, 2026-11-29), three local full-profile runs: log
			// 1.20–1.40×, calendar 1.05–1.08×, every excess answer
			// degraded. The other cause stays (a member back first
			// deciding for an owner and heir still down, undegraded once
			// it is not alone), so the defect stands.
			Defect: "after a stop of the whole cluster a calendar-day key admitted 63 of its 60, no answer degraded (compose-test in docker mode, 1 of 2 runs on 2026-11-29; a leaver kept 25 keys on its disk when its handoff to a member already stopped failed: leavers handing keys to leavers, since fixed); a second cause, a member back first deciding keys whose owner and heir are still down, is not fixed (docs/chaos.md, \"Found and not fixed\")",
			Nodes:  3, Duration: 30 * time.Second, DayKeys: 6, DaySpends: days,
			Steps: []Step{
				{At: 10 * time.Second, Name: "stop n1 n2 n3 (SIGTERM)", Steady: 1, Fault: true, Do: func(ctx context.Context, e *Env) error { return e.StopAll(ctx, all(e)...) }},
				{At: 13 * time.Second, Name: "start n1 n2 n3", Steady: 1, Do: func(ctx context.Context, e *Env) error { return e.StartAll(ctx, all(e)...) }},
			},
		},
	}
}

// replicationRound is the nodes' --replication-interval (its default):
// how often a node takes what changed and writes it to its data
// directory.
const replicationRound = 20 * time.Millisecond
