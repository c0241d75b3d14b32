package envoyrls_test

// A compatibility suite against envoyproxy/ratelimit (commit f2fb157): its
// configuration tests (test/config), its integration test
// (test/integration) and the scripts of its example
// (integration-test/scripts), re-created in testdata/compat/, each file
// naming what it re-creates. Loading is checked on the loader; answers on
// a real node, through Envoy's generated client, on a clock that moves
// only when a sequence moves it. Where peerlimit answers differently on
// purpose, the subtest is named Differs/... and asserts peerlimit's answer.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/metrictest"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
)

const compatDir = "testdata/compat"

// Part 1: loading. Every configuration upstream's tests load, re-created,
// loads here too.
func TestCompatLoadsUpstreamConfigs(t *testing.T) {
	for _, c := range []struct {
		name    string
		path    string // under compatDir
		merge   bool
		domains []string
		// matches: request entries ("k=v,k=v") and the requests_per_unit
		// of the rule they select in the first domain.
		matches map[string]uint32
	}{
		{name: "basic config", path: "basic_config.yaml", domains: []string{"config-basic"},
			matches: map[string]uint32{"key1=value1,subkey1=x": 5, "key2=x": 20, "key5=value5,subkey5=subvalue5": 25}},
		{name: "wildcards", path: "wildcard.yaml", domains: []string{"config-wildcard"},
			matches: map[string]uint32{"midWild=barab": 20, "multiWild=foobarbaz": 10, "nestedWild=val1,wild=goo2": 20}},
		{name: "matching rules", path: "matching.yaml", domains: []string{"matching"}},
		{name: "metadata", path: "metadata.yaml", domains: []string{"config-metadata"}},
		{name: "shadow mode", path: "shadow_mode.yaml", domains: []string{"config-shadow"}},
		{name: "share_threshold", path: "share_threshold.yaml", domains: []string{"config-share"},
			matches: map[string]uint32{"tenant=t1prod,resource=resAv2": 60, "path=path/a,file=file/b,type=c": 120}},
		{name: "value_to_metric", path: "value_to_metric.yaml",
			domains: []string{"vtm-runtime", "vtm-default", "vtm-mid", "vtm-none", "vtm-detailed", "vtm-wildcard"}},
		{name: "detailed_metric", path: "detailed_metric.yaml", domains: []string{"detailed-on", "detailed-off", "detailed-nested"}},
		{name: "quota_mode", path: "quota_mode.yaml", domains: []string{"quota"}, matches: map[string]uint32{"quota=x": 1}},
		{name: "example", path: "example.yaml", domains: []string{"rl"},
			matches: map[string]uint32{"foo=x": 2, "foo=x,bar=banned": 0, "service=service_2": 2}},
		{name: "token quota", path: "tokenquota.yaml", domains: []string{"tokenquota"}},
		{name: "integration basic", path: "integration_basic.yaml", domains: []string{"basic"}},
		{name: "integration another", path: "integration_another.yaml", domains: []string{"another"}},
		{name: "integration share_threshold", path: "integration_share_threshold.yaml", domains: []string{"share-threshold-test"}},
		{name: "response metadata", path: "response_metadata.yaml", domains: []string{"metadata-merge"}},
		{name: "differences", path: "differs.yaml", domains: []string{"differs"}},
		{name: "one domain in two files, merged", path: "merge", merge: true, domains: []string{"merged"},
			matches: map[string]uint32{"key1=value1": 10, "key2=value2": 20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := envoyrls.Load(filepath.Join(compatDir, c.path), envoyrls.LoadOptions{MergeDomains: c.merge})
			require.NoError(t, err)
			var names []string
			for _, d := range cfg.Domains() {
				names = append(names, d.Name)
			}
			assert.Equal(t, c.domains, names)
			for entries, rpu := range c.matches {
				m := envoyrls.Match(cfg.Domain(c.domains[0]), entriesOf(entries).GetEntries())
				if assert.NotNil(t, m.Rule, "%s matches nothing", entries) {
					assert.Equal(t, rpu, m.Rule.RequestsPerUnit, "the rule %s matches", entries)
				}
			}
		})
	}
}

// Every configuration upstream's tests refuse, re-created, is refused
// here too, with the file, the line and what is wrong.
func TestCompatRefusesUpstreamConfigs(t *testing.T) {
	for _, c := range []struct {
		name   string
		path   string // under compatDir/refused
		merge  bool
		at     string // the file and line named
		phrase string // what is wrong, said at that line
	}{
		{"bad unit", "bad_limit_unit.yaml", false, "bad_limit_unit.yaml:7:", `unknown unit "foo"`},
		{"bad YAML", "bad_yaml.yaml", false, "bad_yaml.yaml:2:", "found unexpected end of stream"},
		{"duplicate domain", "duplicate_domain", false, "duplicate.yaml:3:", `domain "twice": defined twice`},
		{"one domain in two files, not merged", "../merge", false, "key2.yaml:3:", `domain "merged": defined twice`},
		{"duplicate descriptor", "duplicate_key.yaml", false, "duplicate_key.yaml:7:", "defined twice at this level"},
		{"key a_b beside key a with value b", "duplicate_composite_key.yaml", false, "duplicate_composite_key.yaml:8:", `key_value "a_b" is also that of the descriptor at line 6`},
		{"empty domain", "empty_domain.yaml", false, "empty_domain.yaml:2:", "domain is missing"},
		{"empty key", "empty_key.yaml", false, "empty_key.yaml:4:", "key is missing"},
		{"misspelled descriptor field", "misspelled_key.yaml", false, "misspelled_key.yaml:7:", `unknown field "ratelimit"`},
		{"misspelled rate_limit field", "misspelled_key2.yaml", false, "misspelled_key2.yaml:9:", `unknown field "requestsperunit" in rate_limit`},
		{"list item not a mapping", "non_map_list.yaml", false, "non_map_list.yaml:4:", "a descriptor must be a mapping"},
		{"field name not a string", "non_string_key.yaml", false, "non_string_key.yaml:2:", `unknown field "0.25"`},
		{"replaces naming itself", "replaces_self.yaml", false, "replaces_self.yaml:11:", `replaces itself ("self")`},
		{"replaces with an empty name", "replaces_empty.yaml", false, "replaces_empty.yaml:11:", "name must be a non-empty string"},
		{"unlimited with a unit", "unlimited_with_unit.yaml", false, "unlimited_with_unit.yaml:7:", "unit has no use with unlimited: true"},
		{"share_threshold without a wildcard", "share_threshold_without_wildcard.yaml", false, "share_threshold_without_wildcard.yaml:8:", "share_threshold needs a wildcard"},
		{"merged domain defining a descriptor twice", "merge_duplicate", true, "key1_again.yaml:6:", "defined twice at this level (first at "},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := envoyrls.Load(filepath.Join(compatDir, "refused", c.path), envoyrls.LoadOptions{MergeDomains: c.merge})
			require.Error(t, err)
			assert.True(t, saysAt(err, c.at, c.phrase), "want %q said at %s, got:\n%v", c.phrase, c.at, err)
		})
	}
}

// saysAt reports whether one of err's lines names the file and line at
// (a whole file name) and says phrase.
func saysAt(err error, at, phrase string) bool {
	for _, line := range strings.Split(err.Error(), "\n") {
		if strings.Contains(line, string(filepath.Separator)+at+" ") && strings.Contains(line, phrase) {
			return true
		}
	}
	return false
}

// Part 2: answers, on real nodes, each on a clock that stands still until
// a test moves it, so a sequence never crosses a window edge by accident.

// compatStart is a few seconds into a minute, an hour and a day.
var compatStart = time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)

// toNextMinute moves c forward to offset into the next minute.
func toNextMinute(c *fakeclock.Clock, offset time.Duration) {
	c.Set(c.Now().Truncate(time.Minute).Add(time.Minute + offset))
}

// compatNode is one node serving every configuration of testdata/compat.
type compatNode struct {
	clk     *fakeclock.Clock
	rls     rlspb.RateLimitServiceClient
	metrics prometheus.Gatherer // the node's registry, as its /metrics serves it
}

// startCompatNode starts a node with the settings s (nil: the defaults,
// which are upstream's), on a clock at compatStart.
func startCompatNode(t *testing.T, s func(*envoyrls.Config)) *compatNode {
	t.Helper()
	dir := compatConfigDir(t)
	settings := envoyrls.DefaultConfig()
	if s != nil {
		s(&settings)
	}
	clk := fakeclock.At(compatStart)
	c := testcluster.New(t, 1, func(cfg *node.Config) {
		cfg.EnvoyRLSConfig, cfg.EnvoyRLS, cfg.Now = dir, settings, clk.Now
	})
	conn, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &compatNode{clk: clk, rls: rlspb.NewRateLimitServiceClient(conn), metrics: metrictest.Scrape("http://" + c.Node(0).HTTPAddr() + "/metrics")}
}

// compatConfigDir copies the configurations of testdata/compat (not its
// subdirectories) into a directory of their own.
func compatConfigDir(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(compatDir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	dir := t.TempDir()
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600))
	}
	return dir
}

// ask sends req and checks what every answer holds: a status per
// descriptor, and duration_until_reset within the window exactly when
// the status has a current_limit. step names the call in failures.
func (n *compatNode) ask(t *testing.T, step string, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := n.rls.ShouldRateLimit(context.Background(), req)
	require.NoError(t, err, step)
	require.Len(t, resp.GetStatuses(), len(req.GetDescriptors()), step)
	for i, st := range resp.GetStatuses() {
		checkDuration(t, fmt.Sprintf("%s, descriptor %d", step, i), st)
	}
	return resp
}

// expect sends descs to domain and requires the answer's summary to be
// want.
func (n *compatNode) expect(t *testing.T, step, domain, want string, descs ...*rlscommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp := n.ask(t, step, &rlspb.RateLimitRequest{Domain: domain, Descriptors: descs})
	require.Equal(t, want, summary(resp), step)
	return resp
}

// stat is upstream's statistic ratelimit_service_rate_limit_<name> of
// statistics key ("domain.key1.key2"), labelled as its Prometheus exporter
// labels it: the domain and the key's first two parts.
func (n *compatNode) stat(t *testing.T, name, key string) float64 {
	t.Helper()
	domain, key1, key2 := statLabels(key)
	return metrictest.Value(t, n.metrics, "ratelimit_service_rate_limit_"+name, "domain", domain, "key1", key1, "key2", key2)
}

func statLabels(key string) (domain, key1, key2 string) {
	parts := append(strings.SplitN(key, ".", 4), "", "")
	return parts[0], parts[1], parts[2]
}

// summary is an answer in one line: the overall code, then each status
// as its code, its current_limit (requests_per_unit/UNIT, (name) when it
// has one) and its limit_remaining, e.g.
// "OVER_LIMIT: [OVER_LIMIT 0/MINUTE(banned_limit) r=0] [OK 1/MINUTE r=0]".
// A status without a limit is "OK r=0"; an unlimited one "OK r=4294967295".
func summary(resp *rlspb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.GetOverallCode().String() + ":")
	for _, st := range resp.GetStatuses() {
		b.WriteString(" [" + st.GetCode().String())
		if l := st.GetCurrentLimit(); l != nil {
			fmt.Fprintf(&b, " %d/%s", l.GetRequestsPerUnit(), l.GetUnit())
			if m := l.GetUnitMultiplier(); m != nil {
				fmt.Fprintf(&b, "×%d", m.GetValue())
			}
			if l.GetName() != "" {
				b.WriteString("(" + l.GetName() + ")")
			}
		}
		fmt.Fprintf(&b, " r=%d]", st.GetLimitRemaining())
	}
	return b.String()
}

// codesOf is an answer's overall code and statuses' codes, in summary's
// layout.
func codesOf(resp *rlspb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(resp.GetOverallCode().String() + ":")
	for _, st := range resp.GetStatuses() {
		b.WriteString(" [" + st.GetCode().String() + "]")
	}
	return b.String()
}

func checkDuration(t *testing.T, where string, st *rlspb.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	l, d := st.GetCurrentLimit(), st.GetDurationUntilReset()
	if l == nil {
		assert.Nil(t, d, "%s: a duration_until_reset without a current_limit", where)
		return
	}
	unit, _ := envoyrls.UnitDuration(l.GetUnit())
	w := unit * time.Duration(max(l.GetUnitMultiplier().GetValue(), 1))
	if assert.NotNil(t, d, "%s: no duration_until_reset", where) {
		assert.True(t, d.AsDuration() > 0 && d.AsDuration() <= w, "%s: duration_until_reset %v outside (0, %v]", where, d.AsDuration(), w)
	}
}

// untilWindowEnd is the sliding window counter's duration_until_reset at
// now: the rest of the epoch-aligned window W − (now mod W).
func untilWindowEnd(now time.Time, w time.Duration) time.Duration {
	return w - time.Duration(now.UnixMilli()%w.Milliseconds())*time.Millisecond
}

// entriesOf is a request descriptor of "key=value" entries, separated by
// commas.
func entriesOf(entries string) *rlscommon.RateLimitDescriptor {
	return descOf(strings.Split(entries, ",")...)
}

// descOf is a request descriptor of "key=value" entries.
func descOf(entries ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for _, kv := range entries {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// withHits sets d's own hits_addend; 0 is a peek.
func withHits(d *rlscommon.RateLimitDescriptor, hits uint64) *rlscommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

const (
	noLimit   = "OK r=0"
	unlimited = "OK r=4294967295"
)

// upstreamLookups are the lookups of upstream's configuration tests, each
// as the status a single request gets (the first on its counter, but for
// shared ones), and the statistics key upstream counts it under ("" for
// none).
var upstreamLookups = []struct {
	domain, entries string
	want            string // the status, as summary writes it
	stats           string
}{
	// TestBasicConfig.
	{"foo_domain", "key1=value1", noLimit, ""},
	{"config-basic", "key1=something", noLimit, ""},
	{"config-basic", "key1=value1", noLimit, ""},
	{"config-basic", "key2=value2,subkey=subvalue", noLimit, ""},
	{"config-basic", "key5=value5,subkey5=subvalue", noLimit, ""},
	{"config-basic", "key1=value1,subkey1=something", "OK 5/SECOND r=4", "config-basic.key1_value1.subkey1"},
	{"config-basic", "key1=value1,subkey1=subvalue1", "OK 10/SECOND r=9", "config-basic.key1_value1.subkey1_subvalue1"},
	{"config-basic", "key2=something", "OK 20/MINUTE r=19", "config-basic.key2"},
	{"config-basic", "key2=value2", "OK 30/MINUTE r=29", "config-basic.key2_value2"},
	{"config-basic", "key2=value3", noLimit, ""},
	{"config-basic", "key3=foo", "OK 1/HOUR r=0", "config-basic.key3"},
	{"config-basic", "key4=foo", "OK 1/DAY(key4_rate_limit) r=0", "config-basic.key4"},
	{"config-basic", "key5=value5", "OK 15/DAY r=14", "config-basic.key5_value5"},
	{"config-basic", "key5=value5,subkey5=subvalue5", "OK 25/DAY r=24", "config-basic.key5_value5.subkey5_subvalue5"},
	{"config-basic", "key6=foo", unlimited, ""},
	{"config-basic", "key7=unspecified_value", "OK 70/MINUTE r=69", "config-basic.key7_unspecified_value"},
	{"config-basic", "key7=another_value", "OK 70/MINUTE r=69", "config-basic.key7_another_value"},

	// TestWildcardConfig. A wildcard without share_threshold counts each
	// value apart, under one statistics key.
	{"config-wildcard", "noVal=foo1", "OK 20/MINUTE r=19", "config-wildcard.noVal"},
	{"config-wildcard", "noVal=foo2", "OK 20/MINUTE r=19", "config-wildcard.noVal"},
	{"config-wildcard", "wild=foo1", "OK 20/MINUTE r=19", "config-wildcard.wild_foo*"},
	{"config-wildcard", "wild=foo2", "OK 20/MINUTE r=19", "config-wildcard.wild_foo*"},
	{"config-wildcard", "nestedWild=val1,wild=goo2", "OK 20/MINUTE r=19", "config-wildcard.nestedWild_val1.wild_goo*"},
	{"config-wildcard", "wild=bar", noLimit, ""},
	{"config-wildcard", "noWild=foo1", noLimit, ""},
	{"config-wildcard", "midWild=barab", "OK 20/MINUTE r=19", "config-wildcard.midWild_bar*b"},
	{"config-wildcard", "midWild=bar123b", "OK 20/MINUTE r=19", "config-wildcard.midWild_bar*b"},
	{"config-wildcard", "midWild=barb", "OK 20/MINUTE r=19", "config-wildcard.midWild_bar*b"},
	{"config-wildcard", "midWild=bara", noLimit, ""},
	{"config-wildcard", "midWild=xbarb", noLimit, ""},
	{"config-wildcard", "multiWild=foo123bar456baz", "OK 10/MINUTE r=9", "config-wildcard.multiWild_foo*bar*baz"},
	{"config-wildcard", "multiWild=foobarbaz", "OK 10/MINUTE r=9", "config-wildcard.multiWild_foo*bar*baz"},
	{"config-wildcard", "multiWild=foo123baz", noLimit, ""},
	{"config-wildcard", "multiWild=bar456baz", noLimit, ""},

	// GetLimit's precedence and quirks (matching.yaml).
	{"matching", "order1=abd", "OK 11/MINUTE r=10", "matching.order1_ab*"},
	{"matching", "order1=axe", "OK 12/MINUTE r=11", "matching.order1_a*"},
	{"matching", "order2=abd", "OK 21/MINUTE r=20", "matching.order2_a*"},
	{"matching", "prec=abc", "OK 31/MINUTE r=30", "matching.prec_abc"},
	{"matching", "prec=abd", "OK 32/MINUTE r=31", "matching.prec_ab*"},
	{"matching", "prec=zzz", "OK 33/MINUTE r=32", "matching.prec"},
	{"matching", "p=v1", "OK 41/MINUTE r=40", "matching.p_v1"},
	{"matching", "p=v1,q=1", noLimit, ""},
	{"matching", "p=v2,q=1", "OK 42/MINUTE r=41", "matching.p.q"},
	{"matching", "m=mm", "OK 51/MINUTE r=50", "matching.m_mm"},
	{"matching", "m=mm,n=1", noLimit, ""},
	{"matching", "m=mx,n=1", "OK 52/MINUTE r=51", "matching.m_m*.n"},
	{"matching", "outer=o1,inner=iabz", "OK 61/MINUTE r=60", "matching.outer_o1.inner_i*z"},
	{"matching", "outer=o1,inner=iz", "OK 61/MINUTE r=60", "matching.outer_o1.inner_i*z"},
	{"matching", "outer=o1,inner=iab", noLimit, ""},
	{"matching", "u=v", "OK 71/MINUTE r=70", "matching.u_v"},
	{"matching", "u_v=w", "OK 71/MINUTE r=70", "matching.u_v"},
	{"matching", "star_q=1", "OK 81/MINUTE r=80", "matching.star_*"},
	{"matching", "star=", "OK 81/MINUTE r=80", "matching.star_*"},

	// TestShareThreshold: the values of a shared wildcard share one
	// counter, hence the remaining count falling from one to the next.
	{"config-share", "files=files/a.pdf", "OK 100/MINUTE r=99", "config-share.files_files/*"},
	{"config-share", "files=files/b.csv", "OK 100/MINUTE r=98", "config-share.files_files/*"},
	{"config-share", "files=files/c.txt", "OK 100/MINUTE r=97", "config-share.files_files/*"},
	{"config-share", "route=api/v1,method=GET", "OK 60/MINUTE r=59", "config-share.route_api/*.method"},
	{"config-share", "service=svc/user,endpoint=get", "OK 80/MINUTE r=79", "config-share.service_svc/*.endpoint_get"},
	{"config-share", "nested=parent,files=nested/file1.txt", "OK 200/MINUTE r=199", "config-share.nested_parent.files_nested/*"},
	{"config-share", "files=top/file1.txt,files=nested/file1.txt", "OK 300/MINUTE r=299", "config-share.files_top/*.files_nested/*"},
	{"config-share", "path=path/foo,file=file/doc1,type=pdf", "OK 120/MINUTE r=119", "config-share.path_path/*.file_file/*.type"},
	{"config-share", "user=user/alice,resource=res/file1,action=read", "OK 150/MINUTE r=149", "config-share.user_user/*.resource_res/*.action"},
	{"config-share", "file=test1", "OK 50/MINUTE r=49", "config-share.file_test1"},
	{"config-share", "file=test2", "OK 100/MINUTE r=99", "config-share.file_test*"},
	{"config-share", "file=test23", "OK 100/MINUTE r=98", "config-share.file_test*"},
	{"config-share", "file=test123", "OK 100/MINUTE r=97", "config-share.file_test*"},
	{"config-share", "midpath=/api/v1", "OK 100/MINUTE r=99", "config-share.midpath_/api*v1"},
	{"config-share", "midpath=/api-beta-v1", "OK 100/MINUTE r=98", "config-share.midpath_/api*v1"},
	{"config-share", "midpath=/apiXYZv1", "OK 100/MINUTE r=97", "config-share.midpath_/api*v1"},
	{"config-share", "midpath=/api/v2", noLimit, ""},
	{"config-share", "multiroute=svcAepBrpc", "OK 50/MINUTE r=49", "config-share.multiroute_svc*ep*rpc"},
	{"config-share", "multiroute=svcXXXepYYYrpc", "OK 50/MINUTE r=48", "config-share.multiroute_svc*ep*rpc"},
	{"config-share", "multiroute=svceprpc", "OK 50/MINUTE r=47", "config-share.multiroute_svc*ep*rpc"},
	{"config-share", "multiroute=svcABCrpc", noLimit, ""},
	{"config-share", "midroute=/api/v2", "OK 80/MINUTE r=79", "config-share.midroute_/api*v2"},
	{"config-share", "midroute=/api-beta-v2", "OK 80/MINUTE r=78", "config-share.midroute_/api*v2"},
	{"config-share", "tenant=t1prod,resource=resAv2", "OK 60/MINUTE r=59", "config-share.tenant_t*prod.resource_res*v2"},
	{"config-share", "tenant=t99prod,resource=resBBBv2", "OK 60/MINUTE r=58", "config-share.tenant_t*prod.resource_res*v2"},

	// TestValueToMetric_*. Upstream's exporter keeps the key's first two
	// parts as labels: deeper ones are dropped.
	{"vtm-runtime", "route=draw,http_method=GET,subject_id=123", "OK 60/MINUTE r=59", "vtm-runtime.route_draw.http_method_GET.subject_id"},
	{"vtm-runtime", "route=,http_method=GET,subject_id=123", "OK 60/MINUTE r=59", "vtm-runtime.route.http_method_GET.subject_id"},
	{"vtm-runtime", "route=draw,http_method=,subject_id=123", "OK 60/MINUTE r=59", "vtm-runtime.route_draw.http_method.subject_id"},
	{"vtm-runtime", "route=,http_method=,subject_id=123", "OK 60/MINUTE r=59", "vtm-runtime.route.http_method.subject_id"},
	{"vtm-default", "k1=A,k2=foo", "OK 1/SECOND r=0", "vtm-default.k1_A.k2"},
	{"vtm-mid", "k1=X,k2=Y,k3=Z", "OK 1/SECOND r=0", "vtm-mid.k1.k2_Y.k3"},
	{"vtm-none", "k1=X,k2=Y", "OK 1/SECOND r=0", "vtm-none.k1.k2"},
	{"vtm-detailed", "route=draw,http_method=GET,subject_id=123", "OK 60/MINUTE r=59", "vtm-detailed.route_draw.http_method_GET.subject_id_123"},
	{"vtm-wildcard", "user=alice,action=readfile,resource=documents", "OK 60/MINUTE r=59", "vtm-wildcard.user_alice.action_readfile.resource"},
	{"vtm-wildcard", "user=bob,action=readdata,resource=database", "OK 60/MINUTE r=59", "vtm-wildcard.user_bob.action_readdata.resource"},

	// TestDetailedMetric.
	{"detailed-on", "key-1=value-1", "OK 100/MINUTE r=99", "detailed-on.key-1_value-1"},
	{"detailed-on", "key-1=value-1,key-2=value-2", "OK 5/MINUTE r=4", "detailed-on.key-1_value-1.key-2_value-2"},
	{"detailed-off", "key-1=value-1", "OK 100/MINUTE r=99", "detailed-off.key-1"},
	{"detailed-off", "key-1=value-1,key-2=value-2", "OK 5/MINUTE r=4", "detailed-off.key-1.key-2"},
	{"detailed-nested", "key_1=value-for-key-1", "OK 500/MINUTE r=499", "detailed-nested.key_1_value-for-key-1"},
	{"detailed-nested", "key_2=key-2-value", "OK 5000/MINUTE r=4999", "detailed-nested.key_2_key-2-value"},
	{"detailed-nested", "key_2=key-2-value,key_3=requested-key3-value", "OK 5/MINUTE r=4", "detailed-nested.key_2_key-2-value.key_3_requested-key3-value"},

	// The example's lookups, on values its scripts do not use (their
	// statistics are the scripts').
	{"rl", "foo=lookup", "OK 2/MINUTE r=1", ""},
	{"rl", "foo=lookup,bar=other", "OK 3/MINUTE r=2", ""},
	{"rl", "foo=lookup,baz=other", "OK 1/SECOND r=0", ""},
	{"rl", "foo=lookup,bay=any", unlimited, ""},
	{"rl", "qux=any", unlimited, ""},
	{"rl", "source_cluster=proxy,destination_cluster=other", noLimit, ""},
}

// The answers of a node with upstream's default settings.
func TestCompatAnswers(t *testing.T) {
	t.Parallel()
	n := startCompatNode(t, nil)
	for _, seq := range []struct {
		name string
		run  func(*testing.T, *compatNode)
	}{
		{"config_test.go lookups", checkLookups},
		{"shadowmode_config.yaml over its limits", checkShadowModeConfig},
		{"integration testShareThreshold", checkIntegrationShareThreshold},
		{"integration testBasicBaseConfig", checkIntegrationBasicBaseConfig},
		{"replaces.sh", checkReplacesScript},
		{"trigger-ratelimit.sh", checkTriggerRateLimitScript},
		{"trigger-shadow-mode-key.sh", checkTriggerShadowModeScript},
		{"simple-get.sh", checkSimpleGetScript},
		{"value-included-in-stats-key-when-unspecified.sh", checkValueInStatsKeyScript},
		{"quota.sh", checkQuotaScript},
		{"ratelimit_test.go quota_mode", checkQuotaMode},
		{"usage reported after the fact beyond the limit", checkUsageBeyondLimit},
		{"Differs/sliding window across a window edge", checkDiffersWindowEdge},
		{"Differs/refused hits are not counted", checkDiffersRefusedNotCounted},
		{"Differs/token-quota.sh", checkDiffersTokenQuota},
		{"Differs/descriptor without entries", checkDiffersEmptyDescriptor},
	} {
		t.Run(seq.name, func(t *testing.T) { seq.run(t, n) })
	}
}

// checkLookups sends each of upstreamLookups once, then compares the
// total_hits statistics of their domains with upstream's keys.
func checkLookups(t *testing.T, n *compatNode) {
	want, domains := map[string]float64{}, map[string]bool{}
	for _, l := range upstreamLookups {
		step := fmt.Sprintf("%s in domain %s", l.entries, l.domain)
		resp := n.ask(t, step, &rlspb.RateLimitRequest{Domain: l.domain, Descriptors: []*rlscommon.RateLimitDescriptor{entriesOf(l.entries)}})
		assert.Equal(t, "OK: ["+l.want+"]", summary(resp), step)
		if l.stats != "" {
			d, k1, k2 := statLabels(l.stats)
			want[strings.TrimSuffix(d+"."+k1+"."+k2, ".")]++
			domains[d] = true
		}
	}
	assert.Equal(t, want, n.totalHits(t, domains), "ratelimit_service_rate_limit_total_hits by domain.key1.key2")
}

// totalHits is every non-zero ratelimit_service_rate_limit_total_hits
// series of domains, by "domain.key1.key2" ("domain.key1" when key2 is
// empty).
func (n *compatNode) totalHits(t *testing.T, domains map[string]bool) map[string]float64 {
	t.Helper()
	mfs, err := n.metrics.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ratelimit_service_rate_limit_total_hits" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if domains[l["domain"]] && m.GetCounter().GetValue() > 0 {
				got[strings.TrimSuffix(l["domain"]+"."+l["key1"]+"."+l["key2"], ".")] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}

// TestShadowModeConfig's rules taken over their limits: a shadow_mode
// rule answers OK with nothing remaining, the others OVER_LIMIT; the
// flag reaches neither siblings nor nested descriptors.
func checkShadowModeConfig(t *testing.T, n *compatNode) {
	for _, c := range []struct {
		entries, limit, stats string
		rpu                   int
		shadow                bool
	}{
		{"key1=value1,subkey1=something", "5/SECOND", "config-shadow.key1_value1.subkey1", 5, false},
		{"key1=value1,subkey1=subvalue1", "10/SECOND", "config-shadow.key1_value1.subkey1_subvalue1", 10, true},
		{"key2=something", "20/MINUTE", "config-shadow.key2", 20, true},
		{"key2=value2", "30/MINUTE", "config-shadow.key2_value2", 30, false},
	} {
		for i := range c.rpu {
			n.expect(t, fmt.Sprintf("%s, request %d", c.entries, i+1), "config-shadow",
				fmt.Sprintf("OK: [OK %s r=%d]", c.limit, c.rpu-1-i), entriesOf(c.entries))
		}
		want, shadowed := fmt.Sprintf("OVER_LIMIT: [OVER_LIMIT %s r=0]", c.limit), 0.0
		if c.shadow {
			want, shadowed = fmt.Sprintf("OK: [OK %s r=0]", c.limit), 1
		}
		n.expect(t, fmt.Sprintf("%s, request %d, over the limit", c.entries, c.rpu+1), "config-shadow", want, entriesOf(c.entries))
		assert.Equal(t, 1.0, n.stat(t, "over_limit", c.stats), "%s: over_limit", c.entries)
		assert.Equal(t, shadowed, n.stat(t, "shadow_mode", c.stats), "%s: shadow_mode", c.entries)
	}
}

// testShareThreshold: the values one share_threshold wildcard matches
// share its limit; those of a wildcard without it each have their own.
func checkIntegrationShareThreshold(t *testing.T, n *compatNode) {
	const domain = "share-threshold-test"
	for i := range 10 {
		n.expect(t, fmt.Sprintf("files/*, value %d", i+1), domain, fmt.Sprintf("OK: [OK 10/HOUR r=%d]", 9-i),
			descOf(fmt.Sprintf("files=files/%d.pdf", i)))
	}
	n.expect(t, "files/*, an 11th value", domain, "OVER_LIMIT: [OVER_LIMIT 10/HOUR r=0]", descOf("files=files/b.csv"))
	assert.Equal(t, 11.0, n.stat(t, "total_hits", domain+".files_files/*"), "one statistics key for the shared values")
	for i := range 10 {
		n.expect(t, fmt.Sprintf("files_no_share/*, value %d", i+1), domain, "OK: [OK 10/HOUR r=9]",
			descOf(fmt.Sprintf("files_no_share=files_no_share/%d", i)))
	}
}

// testBasicBaseConfig, steps 1 to 5, and the statistics upstream counts.
func checkIntegrationBasicBaseConfig(t *testing.T, n *compatNode) {
	n.expect(t, "step 1, an unknown domain", "foo", "OK: [OK r=0]", descOf("hello=world"))

	n.expect(t, "step 2", "basic", "OK: [OK 50/SECOND r=49]", descOf("key1=foo"))
	assert.Equal(t, 1.0, n.stat(t, "total_hits", "basic.key1"), "step 2: total_hits")

	for i := range 25 {
		want := fmt.Sprintf("OK: [OK 20/MINUTE r=%d]", 19-i)
		if i >= 20 {
			want = "OVER_LIMIT: [OVER_LIMIT 20/MINUTE r=0]"
		}
		n.expect(t, fmt.Sprintf("step 3, request %d", i+1), "another", want, descOf("key2=step3"))
	}
	// Limit 20 and ratio 0.8: hits 17 to 20 were near the limit.
	for stat, want := range map[string]float64{"total_hits": 25, "over_limit": 5, "within_limit": 20, "near_limit": 4} {
		assert.Equal(t, want, n.stat(t, stat, "another.key2"), "after step 3: %s", stat)
	}

	// key2 keeps consuming while key3 is over: the request is refused,
	// but descriptors under their limit are counted all the same.
	for i := range 15 {
		overall, key3 := "OK", fmt.Sprintf("OK 10/HOUR r=%d", 9-i)
		if i >= 10 {
			overall, key3 = "OVER_LIMIT", "OVER_LIMIT 10/HOUR r=0"
		}
		n.expect(t, fmt.Sprintf("step 4, request %d", i+1), "another",
			fmt.Sprintf("%s: [OK 20/MINUTE r=%d] [%s]", overall, 19-i, key3), descOf("key2=step4"), descOf("key3=step4"))
	}
	for key, want := range map[string][2]float64{"another.key2": {40, 5}, "another.key3": {15, 5}} {
		assert.Equal(t, want[0], n.stat(t, "total_hits", key), "after step 4: %s total_hits", key)
		assert.Equal(t, want[1], n.stat(t, "over_limit", key), "after step 4: %s over_limit", key)
	}

	checkDurationRunsDown(t, n)
}

// checkDurationRunsDown is testBasicBaseConfig's step 5: two requests 2 s
// apart, the second's duration_until_reset 2 s smaller. For the counter
// it is the rest of the epoch-aligned window; for the log, the time until
// the oldest hit counted leaves the window.
func checkDurationRunsDown(t *testing.T, n *compatNode) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		key   string
		first func(now time.Time) time.Duration
	}{
		{"key4", func(now time.Time) time.Duration { return untilWindowEnd(now, day) }},
		{"key4_log", func(time.Time) time.Duration { return day }},
	} {
		want := c.first(n.clk.Now())
		first := n.expect(t, "step 5, "+c.key+", request 1", "another", "OK: [OK 20/DAY r=19]", descOf(c.key+"=durTest"))
		assert.Equal(t, want, first.GetStatuses()[0].GetDurationUntilReset().AsDuration(), "step 5, %s, request 1", c.key)
		n.clk.Advance(2 * time.Second)
		second := n.expect(t, "step 5, "+c.key+", request 2", "another", "OK: [OK 20/DAY r=18]", descOf(c.key+"=durTest"))
		assert.Equal(t, want-2*time.Second, second.GetStatuses()[0].GetDurationUntilReset().AsDuration(), "step 5, %s, request 2", c.key)
	}
}

// replaces.sh, with the descriptors Envoy's routes send for its headers
// (examples/envoy/proxy.yaml): /twoheader sends (foo, bar), /fourheader
// adds (source_cluster, destination_cluster), /fiveheader (category).
func checkReplacesScript(t *testing.T, n *compatNode) {
	const rl = "rl"
	banned := descOf("foo=bkthomps", "bar=banned")
	cluster := func(dest string) *rlscommon.RateLimitDescriptor {
		return descOf("source_cluster=proxy", "destination_cluster="+dest)
	}

	// A rule replacing banned_limit lifts the 0 limit.
	n.expect(t, "banned", rl, "OVER_LIMIT: [OVER_LIMIT 0/MINUTE(banned_limit) r=0]", banned)
	n.expect(t, "banned + mock", rl, "OVER_LIMIT: [OVER_LIMIT 0/MINUTE(banned_limit) r=0] [OK 1/MINUTE r=0]", banned, cluster("mock"))
	n.expect(t, "banned + override, 1", rl, "OK: [OK r=0] [OK 2/MINUTE r=1]", banned, cluster("override"))
	n.expect(t, "banned + override, 2", rl, "OK: [OK r=0] [OK 2/MINUTE r=0]", banned, cluster("override"))
	n.expect(t, "banned + override, 3", rl, "OVER_LIMIT: [OK r=0] [OVER_LIMIT 2/MINUTE r=0]", banned, cluster("override"))

	// Replacing does not touch the replaced rule's own count.
	bkthomps := descOf("foo=my_foo", "bar=bkthomps")
	n.expect(t, "bkthomps + cluster bkthomps, 1", rl, "OK: [OK r=0] [OK 2/MINUTE r=1]", bkthomps, cluster("bkthomps"))
	n.expect(t, "bkthomps + cluster bkthomps, 2", rl, "OK: [OK r=0] [OK 2/MINUTE r=0]", bkthomps, cluster("bkthomps"))
	n.expect(t, "bkthomps + cluster bkthomps, 3", rl, "OVER_LIMIT: [OK r=0] [OVER_LIMIT 2/MINUTE r=0]", bkthomps, cluster("bkthomps"))
	n.expect(t, "bkthomps + not_bkthomps, 1", rl, "OK: [OK 1/MINUTE(bkthomps) r=0] [OK r=0]", bkthomps, cluster("not_bkthomps"))
	n.expect(t, "bkthomps + not_bkthomps, 2", rl, "OVER_LIMIT: [OVER_LIMIT 1/MINUTE(bkthomps) r=0] [OK r=0]", bkthomps, cluster("not_bkthomps"))
	n.expect(t, "bkthomps + cluster bkthomps, 4", rl, "OVER_LIMIT: [OK r=0] [OVER_LIMIT 2/MINUTE r=0]", bkthomps, cluster("bkthomps"))

	// One rule replacing two.
	account := descOf("category=account")
	for i := range 4 {
		n.expect(t, fmt.Sprintf("five headers, %d", i+1), rl, fmt.Sprintf("OK: [OK r=0] [OK r=0] [OK 4/MINUTE r=%d]", 3-i),
			bkthomps, cluster("fake"), account)
	}
	n.expect(t, "five headers, 5", rl, "OVER_LIMIT: [OK r=0] [OK r=0] [OVER_LIMIT 4/MINUTE r=0]", bkthomps, cluster("fake"), account)
	foo2 := descOf("foo=foo_2", "bar=bkthomps")
	n.expect(t, "foo_2/bkthomps, 1", rl, "OK: [OK 1/MINUTE(bkthomps) r=0]", foo2)
	n.expect(t, "foo_2/bkthomps, 2", rl, "OVER_LIMIT: [OVER_LIMIT 1/MINUTE(bkthomps) r=0]", foo2)
	foo3 := descOf("foo=foo_3", "bar=bar_3")
	n.expect(t, "foo_3/bar_3 + fake, 1", rl, "OK: [OK 3/MINUTE r=2] [OK 2/MINUTE(fake_name) r=1]", foo3, cluster("fake"))
	n.expect(t, "foo_3/bar_3 + fake, 2", rl, "OK: [OK 3/MINUTE r=1] [OK 2/MINUTE(fake_name) r=0]", foo3, cluster("fake"))
	n.expect(t, "foo_3/bar_3 + fake, 3", rl, "OVER_LIMIT: [OK 3/MINUTE r=0] [OVER_LIMIT 2/MINUTE(fake_name) r=0]", foo3, cluster("fake"))
	n.expect(t, "five headers, 6", rl, "OVER_LIMIT: [OK r=0] [OK r=0] [OVER_LIMIT 4/MINUTE r=0]", bkthomps, cluster("fake"), account)
}

// trigger-ratelimit.sh: (foo=pelle, baz=not-so-shady), 3 a minute.
func checkTriggerRateLimitScript(t *testing.T, n *compatNode) {
	d := descOf("foo=pelle", "baz=not-so-shady")
	for i := range 5 {
		want := fmt.Sprintf("OK: [OK 3/MINUTE r=%d]", 2-i)
		if i >= 3 {
			want = "OVER_LIMIT: [OVER_LIMIT 3/MINUTE r=0]"
		}
		n.expect(t, fmt.Sprintf("request %d", i+1), "rl", want, d)
	}
}

// trigger-shadow-mode-key.sh: (foo=pelle, baz=shady), 3 a minute in shadow
// mode: always OK, nothing remaining once over (Envoy's
// x-ratelimit-remaining: 0).
func checkTriggerShadowModeScript(t *testing.T, n *compatNode) {
	d := descOf("foo=pelle", "baz=shady")
	for i := range 6 {
		n.expect(t, fmt.Sprintf("request %d", i+1), "rl", fmt.Sprintf("OK: [OK 3/MINUTE r=%d]", max(2-i, 0)), d)
	}
	assert.Equal(t, 3.0, n.stat(t, "shadow_mode", "rl.foo.baz_shady"), "shadow_mode")
}

// simple-get.sh: (foo=test, baz=shady).
func checkSimpleGetScript(t *testing.T, n *compatNode) {
	n.expect(t, "request 1", "rl", "OK: [OK 3/MINUTE r=2]", descOf("foo=test", "baz=shady"))
}

// value-included-in-stats-key-when-unspecified.sh: detailed_metric puts
// the value in the statistics key.
func checkValueInStatsKeyScript(t *testing.T, n *compatNode) {
	d := descOf("unspec=unspecified_value")
	n.expect(t, "request 1", "rl", "OK: [OK 2/MINUTE r=1]", d)
	n.expect(t, "request 2", "rl", "OK: [OK 2/MINUTE r=0]", d)
	n.expect(t, "request 3", "rl", "OVER_LIMIT: [OVER_LIMIT 2/MINUTE r=0]", d)
	assert.Equal(t, 1.0, n.stat(t, "over_limit", "rl.unspec_unspecified_value"),
		`ratelimit_service_rate_limit_over_limit{key1="unspec_unspecified_value"}`)
}

// quota.sh: two quota_mode descriptors fail the request only when both
// are over.
func checkQuotaScript(t *testing.T, n *compatNode) {
	toNextMinute(n.clk, 5*time.Second)
	s1, s2 := descOf("service=service_1"), descOf("service=service_2")
	n.expect(t, "request 1", "rl", "OK: [OK 1/MINUTE r=0] [OK 2/MINUTE r=1]", s1, s2)
	n.expect(t, "request 2", "rl", "OK: [OVER_LIMIT 1/MINUTE r=0] [OK 2/MINUTE r=0]", s1, s2)
	n.expect(t, "request 3", "rl", "OVER_LIMIT: [OVER_LIMIT 1/MINUTE r=0] [OVER_LIMIT 2/MINUTE r=0]", s1, s2)
	// "Waiting 1 minute for quota buckets to be refreshed". Only the codes
	// are upstream's: its fixed window starts afresh, while the sliding
	// window still weighs the last minute (Differs/sliding window...).
	n.clk.Advance(time.Minute)
	resp := n.ask(t, "request 4, a minute later", &rlspb.RateLimitRequest{Domain: "rl", Descriptors: []*rlscommon.RateLimitDescriptor{s1, s2}})
	assert.Equal(t, "OK: [OK] [OK]", codesOf(resp), "request 4, a minute later")
}

// ratelimit_test.go's quota mode cases, each on values of its own: a
// request fails when a regular descriptor is over, or when every
// quota_mode one is.
func checkQuotaMode(t *testing.T, n *compatNode) {
	const q = "quota"
	spend := func(t *testing.T, d *rlscommon.RateLimitDescriptor) {
		t.Helper()
		n.expect(t, "spending "+d.GetEntries()[0].GetValue(), q, "OK: [OK 1/MINUTE r=0]", d)
	}
	t.Run("regular over, quota OK", func(t *testing.T) {
		spend(t, descOf("regular=c1"))
		n.expect(t, "request", q, "OVER_LIMIT: [OVER_LIMIT 1/MINUTE r=0] [OK 1/MINUTE r=0]", descOf("regular=c1"), descOf("quota=c1"))
	})
	t.Run("regular OK, quota over", func(t *testing.T) {
		spend(t, descOf("quota=c2"))
		n.expect(t, "request", q, "OVER_LIMIT: [OK 1/MINUTE r=0] [OVER_LIMIT 1/MINUTE r=0]", descOf("regular=c2"), descOf("quota=c2"))
	})
	t.Run("both OK", func(t *testing.T) {
		n.expect(t, "request", q, "OK: [OK 1/MINUTE r=0] [OK 1/MINUTE r=0]", descOf("regular=c3"), descOf("quota=c3"))
	})
	t.Run("two quota, one over", func(t *testing.T) {
		spend(t, descOf("quota=c4a"))
		n.expect(t, "request", q, "OK: [OVER_LIMIT 1/MINUTE r=0] [OK 1/MINUTE r=0]", descOf("quota=c4a"), descOf("quota=c4b"))
	})
	t.Run("two quota, both over", func(t *testing.T) {
		spend(t, descOf("quota=c5a"))
		spend(t, descOf("quota=c5b"))
		n.expect(t, "request", q, "OVER_LIMIT: [OVER_LIMIT 1/MINUTE r=0] [OVER_LIMIT 1/MINUTE r=0]", descOf("quota=c5a"), descOf("quota=c5b"))
	})
}

// Usage reported after the response (Envoy's apply_on_stream_done, a
// model's tokens as one hits_addend) can be more than what is left. The
// count stops at the limit here, where upstream's goes past it; either
// way the next peek is refused.
func checkUsageBeyondLimit(t *testing.T, n *compatNode) {
	const tq = "tokenquota"
	peek := func() *rlscommon.RateLimitDescriptor { return withHits(descOf("tokens=u1"), 0) }
	used := func() *rlscommon.RateLimitDescriptor { return withHits(descOf("tokens=u1"), 700) }
	n.expect(t, "request 1, peek", tq, "OK: [OK 2000/MINUTE r=2000]", peek())
	n.expect(t, "request 1, usage", tq, "OK: [OK 2000/MINUTE r=1300]", used())
	n.expect(t, "request 2, peek", tq, "OK: [OK 2000/MINUTE r=1300]", peek())
	n.expect(t, "request 2, usage", tq, "OK: [OK 2000/MINUTE r=600]", used())
	n.expect(t, "request 3, peek", tq, "OK: [OK 2000/MINUTE r=600]", peek())
	n.expect(t, "request 3, usage beyond what is left", tq, "OVER_LIMIT: [OVER_LIMIT 2000/MINUTE r=0]", used())
	n.expect(t, "request 4, peek", tq, "OVER_LIMIT: [OVER_LIMIT 2000/MINUTE r=0]", peek())
}

// Upstream's windows are fixed: at the minute's edge its count starts from
// zero, and 20 a minute lets 40 through in a few seconds around the edge.
// The sliding window counter weighs the previous minute's hits by the
// part of that minute still in the window: 15 s after the edge, 45/60 of
// the 20 hits still count, so 5 more pass, not 20.
func checkDiffersWindowEdge(t *testing.T, n *compatNode) {
	toNextMinute(n.clk, 30*time.Second)
	d := descOf("edge=e1")
	for i := range 20 {
		n.expect(t, fmt.Sprintf("at :30, request %d", i+1), "differs", fmt.Sprintf("OK: [OK 20/MINUTE r=%d]", 19-i), d)
	}
	n.expect(t, "at :30, request 21", "differs", "OVER_LIMIT: [OVER_LIMIT 20/MINUTE r=0]", d)
	toNextMinute(n.clk, 15*time.Second)
	for i := range 5 {
		resp := n.expect(t, fmt.Sprintf("past the edge, at :15, request %d", i+1), "differs", fmt.Sprintf("OK: [OK 20/MINUTE r=%d]", 4-i), d)
		assert.Equal(t, 45*time.Second, resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(), "the rest of the window")
	}
	n.expect(t, "past the edge, at :15, request 6", "differs", "OVER_LIMIT: [OVER_LIMIT 20/MINUTE r=0]", d)
}

// Upstream counts every hit, refused ones included (INCRBY): the count of a
// client that keeps retrying while refused goes on growing past the
// limit, and a sliding window counting the same way would keep it out for
// as long as it retried faster than the limit allows. Here a refused hit
// consumes nothing: with the exact log, the moment the first admitted hit
// leaves the window (duration_until_reset says when), exactly one request
// passes, however hard the client hammered.
func checkDiffersRefusedNotCounted(t *testing.T, n *compatNode) {
	d := descOf("hammer=h1")
	for i := range 3 {
		n.expect(t, fmt.Sprintf("t+%ds", 10*i), "differs", fmt.Sprintf("OK: [OK 3/MINUTE r=%d]", 2-i), d)
		n.clk.Advance(10 * time.Second)
	}
	// Retrying every 2 s from t+30s to t+58s: 15 refusals.
	for i := range 15 {
		at := 30 + 2*i
		resp := n.expect(t, fmt.Sprintf("t+%ds", at), "differs", "OVER_LIMIT: [OVER_LIMIT 3/MINUTE r=0]", d)
		assert.Equal(t, time.Duration(60-at)*time.Second, resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(),
			"t+%ds: until the hit of t+0s leaves the window", at)
		n.clk.Advance(2 * time.Second)
	}
	n.expect(t, "t+60s, the first hit gone", "differs", "OK: [OK 3/MINUTE r=0]", d)
	n.expect(t, "t+60s, again", "differs", "OVER_LIMIT: [OVER_LIMIT 3/MINUTE r=0]", d)
	n.clk.Advance(10 * time.Second)
	n.expect(t, "t+70s, the second hit gone", "differs", "OK: [OK 3/MINUTE r=0]", d)
	n.expect(t, "t+70s, again", "differs", "OVER_LIMIT: [OVER_LIMIT 3/MINUTE r=0]", d)
}

// token-quota.sh: Envoy peeks (hits_addend 0) before the request and
// reports the hit when the stream is done. Upstream refuses a peek only
// once its count is past the limit, which only the hits it counts anyway
// make possible: a quota of 2 passes 3 requests there. Here the count
// stops at the limit, and a peek is refused when nothing is left: a quota
// of N passes N requests.
func checkDiffersTokenQuota(t *testing.T, n *compatNode) {
	const tq = "tokenquota"
	toNextMinute(n.clk, 5*time.Second)
	peek := func() *rlscommon.RateLimitDescriptor { return withHits(descOf("service=service_2"), 0) }
	done := func() *rlscommon.RateLimitDescriptor { return withHits(descOf("service=service_2"), 1) }
	n.expect(t, "request 1", tq, "OK: [OK 2/MINUTE r=2]", peek())
	n.expect(t, "request 1, stream done", tq, "OK: [OK 2/MINUTE r=1]", done())
	n.expect(t, "request 2", tq, "OK: [OK 2/MINUTE r=1]", peek())
	n.expect(t, "request 2, stream done", tq, "OK: [OK 2/MINUTE r=0]", done())
	n.expect(t, "request 3 (upstream passes it)", tq, "OVER_LIMIT: [OVER_LIMIT 2/MINUTE r=0]", peek())
	// A minute later, 55/60 of the 2 hits still weigh: 1.
	n.clk.Advance(time.Minute)
	n.expect(t, "request 4, a minute later", tq, "OK: [OK 2/MINUTE r=1]", peek())
}

// Upstream answers a descriptor without entries as unmatched (OK, no
// limit). Here it fails the call with INVALID_ARGUMENT naming it: Envoy
// never sends one, so it is a client's mistake worth saying.
func checkDiffersEmptyDescriptor(t *testing.T, n *compatNode) {
	_, err := n.rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "config-basic",
		Descriptors: []*rlscommon.RateLimitDescriptor{descOf("key2=x"), {}}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "descriptors[1].entries")
}

// With RESPONSE_DYNAMIC_METADATA: every answer carries the request and the
// merged metadata of the descriptors that passed.
func TestCompatResponseMetadata(t *testing.T) {
	t.Parallel()
	n := startCompatNode(t, func(s *envoyrls.Config) { s.ResponseMetadata = true })
	t.Run("metadata.yaml lookups", func(t *testing.T) { checkMetadataLookups(t, n) })
	t.Run("ratelimit_test.go merged metadata", func(t *testing.T) { checkMergedMetadata(t, n) })
	t.Run("Differs/multiservice-tokenquota.sh", func(t *testing.T) { checkDiffersMultiserviceTokenQuota(t, n) })
}

// metadataOf is an answer's dynamic metadata as plain Go values.
func metadataOf(resp *rlspb.RateLimitResponse) map[string]any {
	return resp.GetDynamicMetadata().AsMap()
}

// entriesMetadata is upstream's dynamic metadata of a descriptor without
// hits_addend: its entries, as given.
func entriesMetadata(entries ...string) map[string]any {
	list := make([]any, len(entries))
	for i, e := range entries {
		list[i] = e
	}
	return map[string]any{"entries": list}
}

// TestMetadata: the rule's metadata, flat or nested; none for a rule
// without.
func checkMetadataLookups(t *testing.T, n *compatNode) {
	const domain = "config-metadata"
	resp := n.expect(t, "key1=value1,subkey1=something", domain, "OK: [OK 5/SECOND r=4]", descOf("key1=value1", "subkey1=something"))
	assert.Equal(t, map[string]any{"domain": domain, "descriptors": []any{entriesMetadata("key1=value1", "subkey1=something")},
		"metadata": map[string]any{"name": "service_1"}}, metadataOf(resp))

	resp = n.expect(t, "key2=something", domain, "OK: [OK 20/MINUTE r=19]", descOf("key2=something"))
	assert.Equal(t, map[string]any{"domain": domain, "descriptors": []any{entriesMetadata("key2=something")},
		"metadata": map[string]any{"service_with_quota": map[string]any{"name": "service_2"}}}, metadataOf(resp))

	resp = n.expect(t, "key1=value1,subkey1=subvalue1", domain, "OK: [OK 10/SECOND r=9]", descOf("key1=value1", "subkey1=subvalue1"))
	assert.Equal(t, map[string]any{"domain": domain, "descriptors": []any{entriesMetadata("key1=value1", "subkey1=subvalue1")}},
		metadataOf(resp))
}

// TestMetadataReturnedForPassedDescriptors and its neighbours: metadata
// merges in request order, the first value winning and structs merging;
// a descriptor over its limit adds nothing, one in shadow mode passes;
// each answer's merge starts from the configuration as loaded.
func checkMergedMetadata(t *testing.T, n *compatNode) {
	const domain = "metadata-merge"
	regularOnly := map[string]any{"name": "service_1", "shared": map[string]any{"a": "from_regular"}}

	resp := n.expect(t, "regular + quota", domain, "OK: [OK 10/MINUTE r=9] [OK 5/MINUTE r=3]",
		descOf("regular=m1"), withHits(descOf("quota=m1"), 2))
	quotaEntries := entriesMetadata("quota=m1")
	quotaEntries["hitsAddend"] = 2.0
	assert.Equal(t, map[string]any{"domain": domain, "descriptors": []any{entriesMetadata("regular=m1"), quotaEntries},
		"metadata": map[string]any{"name": "service_1", "some_other_name": "service_2",
			"shared": map[string]any{"a": "from_regular", "b": "from_quota"}}}, metadataOf(resp), "regular + quota")

	// Upstream's merge writes into the configuration's own structs, so
	// this answer would carry shared.b from the call before.
	resp = n.ask(t, "regular alone, after", &rlspb.RateLimitRequest{Domain: domain, HitsAddend: 2,
		Descriptors: []*rlscommon.RateLimitDescriptor{descOf("regular=m2")}})
	assert.Equal(t, "OK: [OK 10/MINUTE r=8]", summary(resp), "regular alone, after")
	assert.Equal(t, map[string]any{"domain": domain, "descriptors": []any{entriesMetadata("regular=m2")}, "hitsAddend": 2.0,
		"metadata": regularOnly}, metadataOf(resp), "regular alone, after")

	resp = n.expect(t, "regular, a peek", domain, "OK: [OK 10/MINUTE r=10]", withHits(descOf("regular=m3"), 0))
	peekEntries := entriesMetadata("regular=m3")
	peekEntries["hitsAddend"] = 0.0
	assert.Equal(t, []any{peekEntries}, metadataOf(resp)["descriptors"], "regular, a peek: its hits_addend, set to 0")

	n.expect(t, "tight, spent", domain, "OK: [OK 1/MINUTE r=0]", descOf("tight=m3"))
	resp = n.expect(t, "tight over + regular", domain, "OVER_LIMIT: [OVER_LIMIT 1/MINUTE r=0] [OK 10/MINUTE r=9]",
		descOf("tight=m3"), descOf("regular=m3"))
	assert.Equal(t, regularOnly, metadataOf(resp)["metadata"], "tight over + regular: the descriptor over its limit adds nothing")

	n.expect(t, "shadowed, spent", domain, "OK: [OK 1/MINUTE r=0]", descOf("shadowed=m4"))
	resp = n.expect(t, "shadowed over + regular", domain, "OK: [OK 1/MINUTE r=0] [OK 10/MINUTE r=9]",
		descOf("shadowed=m4"), descOf("regular=m4"))
	assert.Equal(t, map[string]any{"shadowed": true, "name": "service_1", "shared": map[string]any{"a": "from_regular"}},
		metadataOf(resp)["metadata"], "shadowed over + regular: shadow mode passes")
}

// multiservice-tokenquota.sh: Envoy peeks at both services' quotas, routes
// to the service named by the merged metadata (the first passing one),
// and reports the hit to that service when the stream is done. Upstream
// passes a peek until the count is past the limit: Service 1 twice, then
// Service 2 three times, then 429. Here a peek with nothing left is
// refused: Service 1 once, Service 2 twice, then 429.
func checkDiffersMultiserviceTokenQuota(t *testing.T, n *compatNode) {
	const tq = "tokenquota"
	toNextMinute(n.clk, 5*time.Second)
	// route peeks at both quotas and checks the service the metadata
	// routes to ("": none passed).
	route := func(step, want, service string) {
		t.Helper()
		resp := n.expect(t, step, tq, want, withHits(descOf("service=service_1"), 0), withHits(descOf("service=service_2"), 0))
		if service == "" {
			assert.NotContains(t, metadataOf(resp), "metadata", "%s: no service passed", step)
			return
		}
		assert.Equal(t, map[string]any{"service_with_quota": map[string]any{"name": service}}, metadataOf(resp)["metadata"], step)
	}
	done := func(service string) *rlscommon.RateLimitDescriptor { return withHits(descOf("service="+service), 1) }

	route("request 1", "OK: [OK 1/MINUTE r=1] [OK 2/MINUTE r=2]", "service_1")
	n.expect(t, "request 1, stream done", tq, "OK: [OK 1/MINUTE r=0]", done("service_1"))
	route("request 2 (upstream routes it to Service 1)", "OK: [OVER_LIMIT 1/MINUTE r=0] [OK 2/MINUTE r=2]", "service_2")
	n.expect(t, "request 2, stream done", tq, "OK: [OK 2/MINUTE r=1]", done("service_2"))
	route("request 3", "OK: [OVER_LIMIT 1/MINUTE r=0] [OK 2/MINUTE r=1]", "service_2")
	n.expect(t, "request 3, stream done", tq, "OK: [OK 2/MINUTE r=0]", done("service_2"))
	route("request 4 (upstream routes it to Service 2)", "OVER_LIMIT: [OVER_LIMIT 1/MINUTE r=0] [OVER_LIMIT 2/MINUTE r=0]", "")
	// A minute later service_1's hit weighs 55/60 of 1, nothing, and
	// service_2's 55/60 of 2, one.
	n.clk.Advance(time.Minute)
	route("request 5, a minute later", "OK: [OK 1/MINUTE r=1] [OK 2/MINUTE r=1]", "service_1")
}

// With QUOTA_MODE every descriptor but the unlimited ones is a quota one,
// unmatched ones included: a request fails only when all of them are over.
func TestCompatGlobalQuotaMode(t *testing.T) {
	t.Parallel()
	n := startCompatNode(t, func(s *envoyrls.Config) { s.QuotaMode = true })
	const q = "quota"
	spent := descOf("regular=g1")
	n.expect(t, "spending", q, "OK: [OK 1/MINUTE r=0]", spent)
	n.expect(t, "the only descriptor, over", q, "OVER_LIMIT: [OVER_LIMIT 1/MINUTE r=0]", spent)
	n.expect(t, "one of two over", q, "OK: [OVER_LIMIT 1/MINUTE r=0] [OK 1/MINUTE r=0]", spent, descOf("regular=g2"))
	n.expect(t, "over, beside an unmatched one", q, "OK: [OVER_LIMIT 1/MINUTE r=0] [OK r=0]", spent, descOf("unmatched=x"))
	n.expect(t, "over, beside an unlimited one", q, "OVER_LIMIT: [OVER_LIMIT 1/MINUTE r=0] [OK r=4294967295]", spent, descOf("free=x"))
}

// With SHADOW_MODE every answer is OK; the statuses still say which
// descriptors are over, and the calls turned OK are counted.
func TestCompatGlobalShadowMode(t *testing.T) {
	t.Parallel()
	n := startCompatNode(t, func(s *envoyrls.Config) { s.ShadowMode = true })
	const q = "quota"
	n.expect(t, "request 1", q, "OK: [OK 1/MINUTE r=0]", descOf("regular=s1"))
	n.expect(t, "request 2, over", q, "OK: [OVER_LIMIT 1/MINUTE r=0] [OK 1/MINUTE r=0]", descOf("regular=s1"), descOf("regular=s2"))
	n.expect(t, "request 3, not over", q, "OK: [OK 1/MINUTE r=0]", descOf("regular=s3"))
	assert.Equal(t, 1.0, metrictest.Value(t, n.metrics, "peerlimit_envoy_rls_global_shadow_mode_total", "domain", q),
		"calls turned OK by the global shadow mode")
}
