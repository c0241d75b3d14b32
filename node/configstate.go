package node

import (
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/peerlimit/peerlimit/envoyrls"
)

// One config, visibly, across the cluster: a node advertises in gossip
// the digests of the configurations it serves, so that every node can
// show which members would decide a request differently (GET /v1/members,
// the console) and count them (peerlimit_config_disagreement). Each node
// reloads on its own (SIGHUP, a watched file, a control plane), so a
// rolling change disagrees for a moment by design; one that lasts is a
// node that missed it.

// The configurations' sources: the names they are advertised under and
// the metrics' source label.
const (
	sourcePolicies = "policies"
	sourceEnvoyRLS = "envoy_rls"
)

var configSources = []string{sourcePolicies, sourceEnvoyRLS}

// shortDigestLen is how many hex digits of a configuration's SHA-256 go
// into gossip: 48 bits tell a cluster's few versions apart (a chance
// collision among 1,000 versions is about 2e-9), and the metadata they
// share with the gRPC address is 512 bytes (cluster.MaxConfigDigestLen).
const shortDigestLen = 12

// configState is what the node keeps about the configurations it serves
// beyond the configurations themselves.
type configState struct {
	// advertise serialises configChanged's notes; it guards noDomains.
	advertise sync.Mutex
	// kick wakes advertiseConfigs: the configurations in force changed.
	// One slot: changes while it advertises coalesce into one more round,
	// which reads what is in force then.
	kick chan struct{}
	// rules is the Envoy rules last seen in force and since when
	// (GET /v1/envoy-rls/config).
	rules atomic.Pointer[loadedRules]
	// noDomains: the Envoy rules in force have no domains, and the log
	// said so.
	noDomains bool
}

type loadedRules struct {
	set *envoyrls.RuleSet
	at  time.Time
}

// configChanged is called after any configuration the node serves from
// (the policies, the Envoy rate limit service's rules) was put in force,
// whatever brought it: SIGHUP, a watched file, a control plane. It notes
// when, and has advertiseConfigs advertise the new digests to the
// cluster; joinCluster calls it once too, for a change that landed while
// the node was joining. It does not wait for the broadcast: a control
// plane's next snapshot, or its ACK, must not queue behind gossip (a
// broadcast counts as sent only after several gossip rounds).
func (n *Node) configChanged() {
	n.cfgState.advertise.Lock()
	if rs := n.EnvoyRLSConfig(); rs != nil && n.rls.rules.Loaded() {
		n.cfgState.rulesLoaded(rs, n.cfg.Now)
		n.warnNoDomains(rs)
	}
	n.cfgState.advertise.Unlock()
	select {
	case n.cfgState.kick <- struct{}{}:
	default: // a round is due already, and will read what is in force then
	}
}

// advertiseConfigs advertises the digests of the configurations in force
// to the cluster each time configChanged kicks it, until the node stops.
// One goroutine, reading what is in force when it runs: an older set can
// never be advertised after a newer one. Started by startServing; a kick
// from before (the join's) waits in the channel.
func (n *Node) advertiseConfigs() {
	for {
		select {
		case <-n.stop:
			return
		case <-n.cfgState.kick:
		}
		if c := n.cluster.Load(); c != nil {
			if err := c.SetConfigDigests(n.configDigests()); err != nil {
				n.log.Warn("advertising the config digests failed; the others see the previous ones", "err", err)
			}
		}
	}
}

// warnNoDomains warns, once each time it happens, that the Envoy rules
// put in force have no domains: an empty directory, or a control plane
// that withdrew every limit, loads as upstream loads it, and then every
// call is answered OK, which an operator should not learn from an
// incident. A control plane's rules before the first are not in force
// (calls are refused), so they are not warned about. Requires
// cfgState.advertise held.
func (n *Node) warnNoDomains(rs *envoyrls.RuleSet) {
	empty := len(rs.Domains()) == 0
	if empty && !n.cfgState.noDomains {
		n.log.Warn("envoy rls config has no domains: every call is answered OK with no limits", "source", rs.Source, "digest", rs.Digest)
	}
	n.cfgState.noDomains = empty
}

// rulesLoaded returns when cur was put in force: when it was first seen,
// by configChanged or, had that not run yet, now. A rule set with the
// digest of the one seen is that one, not a new load: the registry keeps
// the one in force when a reload finds the same files, and this keeps
// loaded_at_ms true to that even for one built otherwise.
func (s *configState) rulesLoaded(cur *envoyrls.RuleSet, now func() time.Time) time.Time {
	for {
		old := s.rules.Load()
		if old != nil && (old.set == cur || (cur.Digest != "" && old.set.Digest == cur.Digest)) {
			return old.at
		}
		l := &loadedRules{set: cur, at: now()}
		if s.rules.CompareAndSwap(old, l) {
			return l.at
		}
	}
}

// envoyRLSLoaded serves GET /v1/envoy-rls/config: the Envoy rules in
// force and when they were put in force, or nil without the service. A
// control plane's placeholder before its first configuration was never
// put in force: no time (an empty first snapshot has its digest, and
// would otherwise inherit the time it was first looked at).
func (n *Node) envoyRLSLoaded() (*envoyrls.RuleSet, time.Time) {
	rs := n.EnvoyRLSConfig()
	if rs == nil || !n.rls.rules.Loaded() {
		return rs, time.Time{}
	}
	return rs, n.cfgState.rulesLoaded(rs, n.cfg.Now)
}

// configInForce returns the full digests ("sha256:…") of the
// configurations the node serves now, by source; a source it does not
// serve is absent.
func (n *Node) configInForce() map[string]string {
	d := map[string]string{}
	if set := n.policySet(); set != nil {
		d[sourcePolicies] = set.Digest
	}
	if rs := n.EnvoyRLSConfig(); rs != nil {
		d[sourceEnvoyRLS] = rs.Digest
	}
	return d
}

// configDigests is configInForce as advertised: short digests. A
// configuration without a digest (one built in code) is left out rather
// than refused by the cluster.
func (n *Node) configDigests() map[string]string { return shortDigests(n.configInForce()) }

// shortDigests shortens full digests in place, leaving out those without
// one, and returns them.
func shortDigests(d map[string]string) map[string]string {
	for src, full := range d {
		if s := shortDigest(full); s != "" {
			d[src] = s
		} else {
			delete(d, src)
		}
	}
	return d
}

// shortDigest is the first shortDigestLen hex digits of "sha256:<hex>".
func shortDigest(full string) string {
	_, hex, ok := strings.Cut(full, ":")
	if !ok {
		hex = full
	}
	return hex[:min(len(hex), shortDigestLen)]
}

// configDisagreement counts, by source, the live members other than this
// node whose advertised digest differs from own, this node's, a source
// only one side serves included (cluster.Member.ConfigDiffers). Members
// that advertise no digests at all, older versions, are not counted:
// unknown is not different, and a rolling upgrade must not look like a
// split configuration.
func (n *Node) configDisagreement(own map[string]string) map[string]int {
	out := map[string]int{}
	c := n.cluster.Load()
	if c == nil {
		return out
	}
	for _, m := range c.Members() {
		if m.ID == n.cfg.ID {
			continue
		}
		for _, src := range m.ConfigDiffers(own) {
			out[src]++
		}
	}
	return out
}

// configCollector exposes the configurations in force and the members
// that disagree, computed at scrape time: no gauge to keep in step with
// reloads and gossip, so a scrape can never see a stale digest or two.
type configCollector struct {
	n                  *Node
	info, disagreement *prometheus.Desc
}

func newConfigCollector(n *Node) *configCollector {
	return &configCollector{n: n,
		info: prometheus.NewDesc("peerlimit_config_info",
			"1 for each configuration this node serves now, by source (policies, envoy_rls) and its digest (sha256:…, as GET /v1/policies "+
				"and /v1/envoy-rls/config show it); no series for a source the node does not serve.", []string{"source", "digest"}, nil),
		disagreement: prometheus.NewDesc("peerlimit_config_disagreement",
			"Live members whose advertised digest of the source's configuration differs from this node's (one serving it while the other "+
				"does not included; members too old to advertise digests not): 0 when the cluster agrees.", []string{"source"}, nil),
	}
}

func (c *configCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.disagreement
}

func (c *configCollector) Collect(ch chan<- prometheus.Metric) {
	// One read of the configurations for both: a reload in between
	// cannot make the two describe different ones.
	full := c.n.configInForce()
	differ := c.n.configDisagreement(shortDigests(maps.Clone(full)))
	for _, src := range configSources {
		if d, ok := full[src]; ok {
			ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, src, d)
		}
		ch <- prometheus.MustNewConstMetric(c.disagreement, prometheus.GaugeValue, float64(differ[src]), src)
	}
}

var _ prometheus.Collector = (*configCollector)(nil)
