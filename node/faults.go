package node

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// maxFaults bounds Config.Faults: a handful of kinds exist.
const maxFaults = 8

// faultOpenPeers is the fault a node with Security.OpenPeers shows.
const faultOpenPeers = "insecure_open_peers"

func validFaultName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// faults are what the node shows as injected on purpose: Config.Faults,
// and an open peer port, sorted, without repeats.
func (c Config) faults() []string {
	out := slices.Clone(c.Faults)
	if c.Security.OpenPeers {
		out = append(out, faultOpenPeers)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// registerFaults exposes peerlimit_fault_injection_active{kind}: 1 for
// each fault the node runs with on purpose, no series when none. An
// alert on it (docs/operations.md) catches a node serving real traffic
// with a wrong clock or an open peer port, which its start log says only
// once.
func registerFaults(reg prometheus.Registerer, faults []string) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "peerlimit", Name: "fault_injection_active",
		Help: "1 for each fault injected into this node on purpose (clock_offset, clock_drift, clock_step, insecure_open_peers); never on a node serving real traffic."},
		[]string{"kind"})
	for _, f := range faults {
		g.WithLabelValues(f).Set(1)
	}
	return reg.Register(g)
}
