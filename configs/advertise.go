package configs

import (
	"log/slog"
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

// changes is what the Set notes each time a configuration is put in
// force, beyond the configuration itself.
type changes struct {
	// mu serialises changed's notes; it guards noDomains.
	mu sync.Mutex
	// kick wakes advertise: the configurations in force changed. One
	// slot: changes while it advertises coalesce into one more round,
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

// Joined tells the Set that the node has joined c: the digests are
// advertised there from now on (from Start on, if it has not run yet),
// and c's members are compared with them (peerlimit_config_disagreement).
// A change that landed while the node was joining is advertised now.
func (s *Set) Joined(c Cluster) {
	s.joined.Store(&c)
	s.changed()
}

// changed is called after any configuration (the policies, the Envoy
// rate limit service's rules) was put in force, whatever brought it:
// SIGHUP, a watched file, a control plane. It notes when, and has
// advertise advertise the new digests to the cluster; Joined calls it
// once too. It does not wait for the broadcast: a control plane's next
// snapshot, or its ACK, must not queue behind gossip (a broadcast counts
// as sent only after several gossip rounds).
func (s *Set) changed() {
	s.changes.mu.Lock()
	if rs := s.EnvoyRLSConfig(); rs != nil && s.rls.rules.Loaded() {
		s.changes.rulesLoaded(rs, s.deps.Now)
		s.changes.warnNoDomains(rs, s.deps.Logger)
	}
	s.changes.mu.Unlock()
	select {
	case s.changes.kick <- struct{}{}:
	default: // a round is due already, and will read what is in force then
	}
}

// advertise advertises the digests of the configurations in force to
// the cluster each time changed kicks it, until Shutdown. One goroutine,
// reading what is in force when it runs: an older set can never be
// advertised after a newer one. A kick from before Start (the join's)
// waits in the channel.
func (s *Set) advertise() {
	for {
		select {
		case <-s.stop:
			return
		case <-s.changes.kick:
		}
		if c := s.joined.Load(); c != nil {
			if err := (*c).SetConfigDigests(s.Digests()); err != nil {
				s.deps.Logger.Warn("advertising the config digests failed; the others see the previous ones", "err", err)
			}
		}
	}
}

// warnNoDomains warns, once each time it happens, that the Envoy rules
// put in force have no domains: an empty directory, or a control plane
// that withdrew every limit, loads as upstream loads it, and then every
// call is answered OK, which an operator should not learn from an
// incident. A control plane's rules before the first are not in force
// (calls are refused), so they are not warned about. Requires mu held.
func (c *changes) warnNoDomains(rs *envoyrls.RuleSet, log *slog.Logger) {
	empty := len(rs.Domains()) == 0
	if empty && !c.noDomains {
		log.Warn("envoy rls config has no domains: every call is answered OK with no limits", "source", rs.Source, "digest", rs.Digest)
	}
	c.noDomains = empty
}

// rulesLoaded returns when cur was put in force: when it was first seen,
// by changed or, had that not run yet, now. A rule set with the digest
// of the one seen is that one, not a new load: the registry keeps the
// one in force when a reload finds the same files, and this keeps
// loaded_at_ms true to that even for one built otherwise.
func (c *changes) rulesLoaded(cur *envoyrls.RuleSet, now func() time.Time) time.Time {
	for {
		old := c.rules.Load()
		if old != nil && (old.set == cur || (cur.Digest != "" && old.set.Digest == cur.Digest)) {
			return old.at
		}
		l := &loadedRules{set: cur, at: now()}
		if c.rules.CompareAndSwap(old, l) {
			return l.at
		}
	}
}

// EnvoyRLSInForce returns the Envoy rules in force and when they were
// put in force (GET /v1/envoy-rls/config, /rlconfig), or nil without the
// service. A control plane's placeholder before its first configuration
// was never put in force: no time (an empty first snapshot has its
// digest, and would otherwise inherit the time it was first looked at).
func (s *Set) EnvoyRLSInForce() (*envoyrls.RuleSet, time.Time) {
	rs := s.EnvoyRLSConfig()
	if rs == nil || !s.rls.rules.Loaded() {
		return rs, time.Time{}
	}
	return rs, s.changes.rulesLoaded(rs, s.deps.Now)
}

// inForce returns the full digests ("sha256:…") of the configurations
// served now, by source; a source not served is absent.
func (s *Set) inForce() map[string]string {
	d := map[string]string{}
	if set := s.Policies(); set != nil {
		d[sourcePolicies] = set.Digest
	}
	if rs := s.EnvoyRLSConfig(); rs != nil {
		d[sourceEnvoyRLS] = rs.Digest
	}
	return d
}

// Digests returns the digests of the configurations in force as they are
// advertised in gossip, by source (policies, envoy_rls): their first 12
// hex digits. A configuration without a digest (one built in code) is
// left out rather than refused by the cluster.
func (s *Set) Digests() map[string]string { return shortDigests(s.inForce()) }

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

// configCollector exposes the configurations in force and the members
// that disagree, computed at scrape time: no gauge to keep in step with
// reloads and gossip, so a scrape can never see a stale digest or two.
type configCollector struct {
	s                  *Set
	info, disagreement *prometheus.Desc
}

func newConfigCollector(s *Set) *configCollector {
	return &configCollector{s: s,
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
	full := c.s.inForce()
	differ := c.differ(shortDigests(maps.Clone(full)))
	for _, src := range configSources {
		if d, ok := full[src]; ok {
			ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, src, d)
		}
		ch <- prometheus.MustNewConstMetric(c.disagreement, prometheus.GaugeValue, float64(differ[src]), src)
	}
}

// differ counts, by source, the live members other than this node whose
// advertised digest differs from own, this node's, a source only one
// side serves included (cluster.Member.ConfigDiffers). Members that
// advertise no digests at all, older versions, are not counted: unknown
// is not different, and a rolling upgrade must not look like a split
// configuration.
func (c *configCollector) differ(own map[string]string) map[string]int {
	out := map[string]int{}
	joined := c.s.joined.Load()
	if joined == nil {
		return out
	}
	for _, m := range (*joined).Members() {
		if m.ID == c.s.deps.Self {
			continue
		}
		for _, src := range m.ConfigDiffers(own) {
			out[src]++
		}
	}
	return out
}

var _ prometheus.Collector = (*configCollector)(nil)
