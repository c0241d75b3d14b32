// Package jepsenlite is peerlimit's chaos harness, after Jepsen: it starts
// real node processes, each on its own loopback address, drives a workload
// of concurrent clients against random nodes while a nemesis kills,
// pauses, partitions (iptables), adds and removes nodes, records every
// operation, and checks the history: availability, over-admission per key
// and per window against explicit bounds, and time to converge after each
// fault.
//
// `make chaos` runs the full profile (cmd/jepsen-lite); the test command
// runs the short profile (chaos_test.go). docs/chaos.md explains the
// scenarios, the bounds and the latest numbers.
package jepsenlite
