// Package sim simulates the whole cluster in one process, on simulated
// time, from a seed: the deterministic simulation docs/chaos.md
// ("Simulation") describes, as FoundationDB's and TigerBeetle's VOPR are
// for theirs.
//
// One seed draws a Plan (NewPlan) before anything runs: 3 to 7 members,
// their settings and clocks, a workload and one to three faults. Run
// runs it in the caller's testing/synctest bubble and judges the history
// with jepsen-lite's checker (jepsenlite.Analyze: the limit × deciders
// bound, silent over-admission, the degraded answers after convergence,
// convergence after each step) and, in hunting plans (Hunt), the promises
// jepsen-lite's scenarios make for the plan's faults.
//
// What is simulated is the nodes' own code:
//   - each member is a node.Core (the store and its disk on
//     internal/testkit/crashfs, ownership and its agreement, route,
//     replicas and failover, handoff, budget leases, reservations), its
//     clock internal/faultclock (skewed, stepping, drifting) under
//     wallclock.Steady;
//   - peer calls go over internal/testkit/memnet, to the members'
//     peer.Handlers, through the links' faults (cut, loss, latency and
//     jitter, a paused member);
//   - membership is memberlist itself over cluster.MemNetwork, an
//     in-memory memberlist transport whose packets and streams the same
//     link faults decide;
//   - the workload: closed-loop workers checking keys of the counter,
//     the log, GCRA and concurrency (single checks, batches,
//     all-or-nothing batches, reservations settled later, slots acquired
//     and released), on a hot key, leased in half the plans, and cold
//     ones;
//   - the faults: crash, crash and restart from disk, power loss, pause,
//     partition, bridge, loss and latency per link, join, graceful leave,
//     rolling restart, full stop, full kill; one at a time, never
//     overlapping.
//
// What is not: the kernel (sockets, UDP packet sizes and loss, TCP, the
// scheduler: a pause stops a member's traffic, not its goroutines);
// memberlist's real timing over UDP; gRPC and peerrpc (the wire, streams,
// keepalives, batching); the production gossip transport
// (cluster's boundTransport, which MemNetwork replaces); the faces (rpc,
// httpapi, envoyrls), TLS, the console; a real disk's fsync; calendar
// limits; overlapping faults.
//
// A seed replays its plan exactly, and its workload's draws (each
// operation draws from its own stream of the seed, each link from its
// own): not the goroutines' interleaving, memberlist's own randomness,
// nor the answers and latencies the closed-loop workload reacts to. A
// failure that needs a race may not fail again on a replay
// (docs/chaos.md measures how often each did).
package sim
