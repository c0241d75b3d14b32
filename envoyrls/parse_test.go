package envoyrls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/reloads"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

// storeCheck is what a node passes: its store's validation, default caps.
// storeCheck loads with a default store's checks.
func storeCheck(t testing.TB) LoadOptions {
	t.Helper()
	s, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	return LoadOptions{Check: s.Validate}
}

// The README of envoyproxy/ratelimit, examples 1-9, plus this service's
// additions, loads as written.
const upstreamExamples = `domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
---
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        algorithm: SLIDING_WINDOW_LOG
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
---
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
---
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
---
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
---
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
---
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
---
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
---
domain: windows
descriptors:
  - key: burst
    rate_limit: {unit: second, requests_per_unit: 60, unit_multiplier: 30}
  - key: monthly
    rate_limit: {unit: Month, requests_per_unit: 1000}
  - key: weekly
    rate_limit: {unit: WEEK, requests_per_unit: 70}
`

func TestParseUpstreamExamples(t *testing.T) {
	cfg, err := Parse("rls.yaml", []byte(upstreamExamples), storeCheck(t))
	require.NoError(t, err)
	var names []string
	for _, d := range cfg.Domains() {
		names = append(names, d.Name)
	}
	assert.Equal(t, []string{"mongo_cps", "messaging", "edge_proxy_per_ip", "internal", "example6", "example7", "example8", "example9", "windows"}, names)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, cfg.Digest)

	byPath := map[string]*Rule{}
	for _, r := range cfg.Rules() {
		byPath[r.Domain+"."+r.Path] = r
	}
	mt := byPath["messaging.message_type_marketing.to_number"]
	require.NotNil(t, mt)
	assert.Equal(t, limiter.SlidingWindowLog, mt.Algorithm)
	assert.Equal(t, uint32(5), mt.RequestsPerUnit)
	assert.Equal(t, 24*time.Hour, mt.Window)
	assert.Equal(t, "rls.yaml", mt.File)
	assert.Equal(t, 23, mt.Line, "the rate_limit's line")
	assert.Equal(t, limiter.SlidingWindowCounter, byPath["messaging.to_number"].Algorithm, "the default algorithm")

	assert.True(t, byPath["internal.ldap"].Unlimited)
	assert.Equal(t, uint32(0), byPath["edge_proxy_per_ip.remote_address_50.0.0.5"].RequestsPerUnit)
	assert.True(t, byPath["example6.service.user_user-a"].ShadowMode)
	assert.False(t, byPath["example6.service.user_user-b"].ShadowMode)
	assert.Equal(t, "specific_limit", byPath["example7.key_1_value_1.user_bkthomps"].Name)
	assert.Equal(t, []string{"specific_limit"}, byPath["example7.key_2_value_2.user_bkthomps"].Replaces)

	burst := byPath["windows.burst"]
	assert.Equal(t, 30*time.Second, burst.Window)
	assert.Equal(t, uint32(30), burst.UnitMultiplier)
	assert.Equal(t, uint32(30), burst.current.GetUnitMultiplier().GetValue(), "current_limit echoes the multiplier")
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_SECOND, burst.current.GetUnit())
	assert.Nil(t, byPath["windows.monthly"].current.GetUnitMultiplier(), "no multiplier field for 1")
	assert.Equal(t, 30*24*time.Hour, byPath["windows.monthly"].Window, "a month is 30 days")
	assert.Equal(t, 7*24*time.Hour, byPath["windows.weekly"].Window)
	assert.Equal(t, `"burst";q=60;w=30`, burst.policy)
	assert.Equal(t, `"specific_limit";q=5;w=1`, byPath["example7.key_1_value_1.user_bkthomps"].policy, "named rules name their header policy")
}

// The extensions' errors, each naming the field and its line.
func TestParseExtensionErrors(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      string
	}{
		{"all_or_nothing not bool", "domain: a\nall_or_nothing: yes\ndescriptors: []\n",
			`f.yaml:2: all_or_nothing must be true or false, got "yes"`},
		{"charge_over_limit on a domain not bool", "domain: a\ncharge_over_limit: 1\n",
			`f.yaml:2: charge_over_limit must be true or false, got "1"`},
		{"charge_over_limit not bool", "domain: a\ndescriptors:\n  - key: k\n    charge_over_limit: always\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`f.yaml:4: domain "a", descriptor k: charge_over_limit must be true or false, got "always"`},
		{"charge_over_limit without limit", "domain: a\ndescriptors:\n  - key: k\n    charge_over_limit: true\n    descriptors: [{key: j, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
			`f.yaml:4: domain "a", descriptor k: charge_over_limit applies to this descriptor's own rate_limit, and it has none`},
		{"charge_over_limit: false without limit", "domain: a\ncharge_over_limit: true\ndescriptors:\n  - key: k\n    charge_over_limit: false\n",
			`f.yaml:5: domain "a", descriptor k: charge_over_limit applies to this descriptor's own rate_limit, and it has none`},
		{"charge_over_limit when unlimited", "domain: a\ndescriptors:\n  - key: k\n    charge_over_limit: true\n    rate_limit: {unlimited: true}\n",
			`f.yaml:4: domain "a", descriptor k: charge_over_limit has no use with unlimited: true`},
		{"all_or_nothing on a descriptor", "domain: a\ndescriptors:\n  - key: k\n    all_or_nothing: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`f.yaml:4: domain "a": all_or_nothing is a domain setting: give it beside domain and descriptors`},
		{"all_or_nothing in rate_limit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, all_or_nothing: true}\n",
			`f.yaml:4: domain "a", descriptor k: unknown field "all_or_nothing" in rate_limit`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(c.src), storeCheck(t))
			require.Error(t, err)
			assert.Nil(t, cfg)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// The peerlimit extensions: all_or_nothing and charge_over_limit on a
// domain, charge_over_limit on a descriptor (its own rate_limit; false
// opts out of the domain's). Upstream's parser refuses them as unknown
// fields; without them nothing changes.
func TestParseExtensions(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte(`domain: ai
all_or_nothing: true
charge_over_limit: true
descriptors:
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: requests
    charge_over_limit: false
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: model
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 5}
---
domain: plain
descriptors:
  - key: tokens
    charge_over_limit: true
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: requests
    charge_over_limit: false
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 10}
`), storeCheck(t))
	require.NoError(t, err)
	ai, plain := cfg.Domain("ai"), cfg.Domain("plain")
	assert.True(t, ai.AllOrNothing)
	assert.True(t, ai.ChargeOverLimit)
	assert.False(t, plain.AllOrNothing)
	assert.False(t, plain.ChargeOverLimit)
	charged := map[string]bool{}
	for _, r := range cfg.Rules() {
		charged[r.Domain+"."+r.Path] = r.ChargeOverLimit
	}
	assert.Equal(t, map[string]bool{"ai.tokens": true, "ai.requests": false, "ai.model.user": true,
		"plain.tokens": true, "plain.requests": false, "plain.other": false}, charged)
}

// Documents merged into one domain must give its settings alike: which
// one's would win cannot depend on file order.
func TestParseMergedDomainSettings(t *testing.T) {
	merge := LoadOptions{MergeDomains: true}
	cfg, err := Parse("f.yaml", []byte("domain: a\nall_or_nothing: true\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n---\n"+
		"domain: a\nall_or_nothing: true\ndescriptors: [{key: j, rate_limit: {unit: second, requests_per_unit: 1}}]\n"), merge)
	require.NoError(t, err)
	assert.True(t, cfg.Domain("a").AllOrNothing)
	_, err = Parse("f.yaml", []byte("domain: a\nall_or_nothing: true\n---\ndomain: a\ncharge_over_limit: true\n"), merge)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `f.yaml:4: domain "a": all_or_nothing is false here and true where the domain is first defined (f.yaml:1; absent is false)`)
	assert.Contains(t, err.Error(), `f.yaml:5: domain "a": charge_over_limit is true here and false where the domain is first defined (f.yaml:1; absent is false)`)
}

// A directory is read as upstream's runtime loader reads it: every file
// in it or below it, whatever its name, dot entries skipped.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	}
	rule := func(domain string) string {
		return "domain: " + domain + "\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"
	}
	write("b.yaml", rule("b"))
	write("a.yml", rule("a"))
	write("c", rule("c")) // a ConfigMap key without an extension
	write("sub/d.conf", rule("d"))
	write(".hidden.yaml", "not yaml at all: [")
	write(".git/config", "not yaml at all: [")
	write("..data/e.yaml", "not yaml at all: [")
	require.NoError(t, os.Symlink("gone.yaml", filepath.Join(dir, "dangling.yaml")))
	cfg, err := Load(dir, storeCheck(t))
	require.NoError(t, err)
	var names []string
	for _, d := range cfg.Domains() {
		names = append(names, d.Name)
	}
	assert.Equal(t, []string{"a", "b", "c", "d"}, names, "files in path order")
	assert.Equal(t, filepath.Join(dir, "a.yml"), cfg.Domains()[0].File)
	assert.Equal(t, filepath.Join(dir, "sub", "d.conf"), cfg.Domains()[3].File)
	assert.Equal(t, dir, cfg.Source)

	write("notes.txt", "not yaml at all: [")
	_, err = Load(dir, LoadOptions{})
	assert.ErrorContains(t, err, filepath.Join(dir, "notes.txt")+":1: ", "a file of any name is read, as upstream reads it")
	require.NoError(t, os.Remove(filepath.Join(dir, "notes.txt")))

	write("sub/deeper/c.yaml", "domain: a\ndescriptors: []\n")
	_, err = Load(dir, LoadOptions{})
	require.Error(t, err)
	assert.Equal(t, filepath.Join(dir, "sub", "deeper", "c.yaml")+`:1: domain "a": defined twice (first at `+filepath.Join(dir, "a.yml")+`:1); to let several files add descriptors to one domain, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does, start the nodes with --envoy-rls-merge-domains`, err.Error())

	_, err = Load(filepath.Join(dir, "missing.yaml"), LoadOptions{})
	assert.ErrorContains(t, err, "no such file")
}

// An empty directory, or one whose every file went (a ConfigMap update
// that removed every key), is a configuration with no domains, as
// upstream loads it; its digest is that of no documents, as from a
// control plane.
func TestLoadEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "..2026_01_01_00_00_00.1"), 0o700))
	require.NoError(t, os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")))
	cfg, err := Load(dir, LoadOptions{})
	require.NoError(t, err)
	assert.Empty(t, cfg.Domains())
	assert.Empty(t, cfg.Rules())
	assert.Equal(t, emptyDigest, cfg.Digest)

	reg, err := NewRegistry(dir, LoadOptions{})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rls"), []byte("domain: a\ndescriptors: []\n"), 0o600))
	_, err = reg.Reload()
	require.NoError(t, err)
	require.NotNil(t, reg.Current().Domain("a"))
	require.NoError(t, os.Remove(filepath.Join(dir, "rls")))
	cfg, err = reg.Reload()
	require.NoError(t, err, "removing every file is a change like another")
	assert.Empty(t, cfg.Domains())
}

// kubelet's layout: the visible names are symlinks through ..data, to
// files and, for a key with a path, to directories. The digest names
// each file by its path in the configuration, so the same files read
// through another layout, or mounted elsewhere, are the same digest, and
// a file moved into a subdirectory is another.
func TestLoadConfigMapLayout(t *testing.T) {
	rule := []byte("domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	other := []byte("domain: b\ndescriptors: []\n")
	cm := t.TempDir()
	version := filepath.Join(cm, "..2026_01_01_00_00_00.1")
	require.NoError(t, os.MkdirAll(filepath.Join(version, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(version, "rls.yaml"), rule, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(version, "sub", "b"), other, 0o644))
	require.NoError(t, os.Symlink(filepath.Base(version), filepath.Join(cm, "..data")))
	require.NoError(t, os.Symlink("..data/rls.yaml", filepath.Join(cm, "rls.yaml")))
	require.NoError(t, os.Symlink("..data/sub", filepath.Join(cm, "sub")))
	fromCM, err := Load(cm, LoadOptions{})
	require.NoError(t, err)
	require.Len(t, fromCM.Domains(), 2, "each file read once, through its visible name")
	assert.Equal(t, filepath.Join(cm, "sub", "b"), fromCM.Domain("b").File)

	plain := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(plain, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(plain, "rls.yaml"), rule, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(plain, "sub", "b"), other, 0o644))
	fromPlain, err := Load(plain, LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, fromCM.Digest, fromPlain.Digest)

	require.NoError(t, os.Rename(filepath.Join(plain, "sub", "b"), filepath.Join(plain, "b")))
	moved, err := Load(plain, LoadOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, fromPlain.Digest, moved.Digest)

	// A directory of one file digests as before subdirectories were read:
	// nodes of either version agree during a rolling upgrade.
	one := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(one, "rls.yaml"), rule, 0o644))
	cfg, err := Load(one, LoadOptions{})
	require.NoError(t, err)
	want, err := ParseDocuments("x", []Document{{Name: "rls.yaml", Data: rule}}, LoadOptions{})
	require.NoError(t, err)
	assert.Equal(t, want.Digest, cfg.Digest)
}

// A symlink back up the tree is refused, naming it, rather than walked
// until MaxFiles.
func TestLoadRefusesASymlinkLoop(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rls.yaml"), []byte("domain: a\ndescriptors: []\n"), 0o600))
	require.NoError(t, os.Symlink("..", filepath.Join(dir, "sub", "up")))
	_, err := Load(dir, LoadOptions{})
	assert.EqualError(t, err, "envoy rls config: "+filepath.Join(dir, "sub", "up")+" is a symlink loop: it leads back to "+dir)
}

// Every error names the file, the line and the descriptor.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"empty file", "", []string{`f.yaml: no domain defined`}},
		{"empty document", "domain: a\n---\n", []string{`f.yaml:2: empty document`}},
		{"not a mapping", "- a\n", []string{`f.yaml:1: want a mapping with domain and descriptors`}},
		{"syntax", "domain: a\ndescriptors: [\n", []string{`f.yaml:2: did not find expected node content`}},
		{"missing domain", "descriptors: []\n", []string{`f.yaml:1: domain is missing`}},
		{"empty domain", "domain: ''\n", []string{`f.yaml:1: domain must be a non-empty string`}},
		{"unknown top field", "domain: a\ndescriptor: []\n", []string{`f.yaml:2: unknown field "descriptor"; want domain, descriptors or one of all_or_nothing, charge_over_limit`}},
		{"not UTF-8", "domain: a\n# \xff\n", []string{`f.yaml:2: not UTF-8 text`}},
		// yaml.v3 says "control characters are not allowed" without a
		// line: found first, on its line (issue 38, item 8).
		{"NUL on line 5", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    value: \"a\x00b\"\n",
			[]string{`f.yaml:5: control character U+0000, which YAML does not allow (byte 100)`}},
		{"escape on line 2", "domain: a\n# \x1b[31m\n", []string{`f.yaml:2: control character U+001B`}},
		{"C1 control", "domain: a\n\n# \u0090\n", []string{`f.yaml:3: control character U+0090`}},
		{"descriptors not a list", "domain: a\ndescriptors: {key: k}\n", []string{`f.yaml:2: domain "a": descriptors must be a list`}},
		{"missing key", "domain: a\ndescriptors:\n  - value: v\n", []string{`f.yaml:3: domain "a": key is missing`}},
		{"unknown descriptor field", "domain: a\ndescriptors:\n  - key: k\n    limit: 5\n", []string{`f.yaml:4: domain "a": unknown field "limit"; want key, value, rate_limit, descriptors, algorithm, metadata or one of shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, charge_over_limit`}},
		{"duplicate", "domain: a\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			[]string{`f.yaml:5: domain "a", descriptor k=v: defined twice at this level (first at line 3)`}},
		{"duplicate wildcard", "domain: a\ndescriptors:\n  - key: k\n  - {key: k}\n", []string{`f.yaml:4: domain "a", descriptor k: defined twice at this level (first at line 3)`}},
		{"field twice", "domain: a\ndescriptors:\n  - key: k\n    key: j\n", []string{`f.yaml:4: domain "a": key given twice (first at line 3)`}},
		{"unknown unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			[]string{`f.yaml:5: domain "a", descriptor k: unknown unit "fortnight"; want second, minute, hour, day, week, month or year`}},
		{"missing unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n", []string{`f.yaml:4: domain "a", descriptor k: unit is missing`}},
		{"missing requests_per_unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: requests_per_unit is missing (0 refuses every request)`}},
		{"negative", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: requests_per_unit must be between 0 and 4294967295, got -1`}},
		{"quoted number", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: '5'}\n",
			[]string{`requests_per_unit must be a whole number, got "5"`}},
		{"huge", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 99999999999999999999}\n",
			[]string{`requests_per_unit 99999999999999999999 does not fit in 32 bits`}},
		{"zero multiplier", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: unit_multiplier must be at least 1`}},
		{"window over the node's max", "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 2\n",
			[]string{`f.yaml:5: domain "a", descriptor k: beyond this node's limits: the window (17520h0m0s) in milliseconds is 63072000000; the maximum is 31622400000`}},
		{"log over the node's cap", "domain: a\ndescriptors:\n  - key: k\n    algorithm: SLIDING_WINDOW_LOG\n    rate_limit:\n      unit: second\n      requests_per_unit: 20000\n",
			[]string{`f.yaml:7: domain "a", descriptor k: beyond this node's limits: requests_per_unit 20000 exceeds the SLIDING_WINDOW_LOG maximum of 10000`}},
		{"log month too long", "domain: a\ndescriptors:\n  - key: k\n    algorithm: SLIDING_WINDOW_LOG\n    rate_limit: {unit: year, requests_per_unit: 5}\n",
			[]string{`f.yaml:5: domain "a", descriptor k: beyond this node's limits: the window (8760h0m0s) in milliseconds`, `SLIDING_WINDOW_LOG supports at most`}},
		{"unknown algorithm", "domain: a\ndescriptors:\n  - key: k\n    algorithm: TOKEN_BUCKET\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: unknown algorithm "TOKEN_BUCKET"`}},
		{"algorithm without limit", "domain: a\ndescriptors:\n  - key: k\n    algorithm: SLIDING_WINDOW_LOG\n",
			[]string{`f.yaml:4: domain "a", descriptor k: algorithm needs a rate_limit on the same descriptor`}},
		{"shadow without limit", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: true\n    descriptors: [{key: j, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
			[]string{`f.yaml:4: domain "a", descriptor k: shadow_mode applies to this descriptor's own rate_limit`}},
		{"shadow not bool", "domain: a\ndescriptors:\n  - key: k\n    shadow_mode: yes\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: shadow_mode must be true or false, got "yes"`}},
		{"unlimited with unit", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: unit has no use with unlimited: true`}},
		{"replaces itself", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: rate_limit replaces itself ("n")`}},
		{"replaces shape", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [n]}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: replaces must be a list of {name: ...}`}},
		{"unknown rate_limit field", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, refill: 3}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: unknown field "refill" in rate_limit`}},
		{"nested error names the chain", "domain: a\ndescriptors:\n  - key: k\n    value: v\n    descriptors:\n      - key: j\n        rate_limit: {unit: eon, requests_per_unit: 1}\n",
			[]string{`f.yaml:7: domain "a", descriptor k=v / j: unknown unit "eon"`}},
		{"merge keys", "domain: a\ndescriptors:\n  - <<: {key: k}\n", []string{`f.yaml:3: domain "a": merge keys (<<) are not supported`}},
		{"key_value collision", "domain: a\ndescriptors:\n  - key: a_b\n  - key: a\n    value: b\n",
			[]string{`f.yaml:4: domain "a", descriptor a=b: its key_value "a_b" is also that of the descriptor at line 3: descriptors are matched by key_value`}},
		{"quota without limit", "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n",
			[]string{`f.yaml:4: domain "a", descriptor k: quota_mode applies to this descriptor's own rate_limit, and it has none`}},
		{"detailed without limit", "domain: a\ndescriptors:\n  - key: k\n    detailed_metric: true\n    descriptors: [{key: j, rate_limit: {unit: second, requests_per_unit: 1}}]\n",
			[]string{`f.yaml:4: domain "a", descriptor k: detailed_metric applies to this descriptor's own rate_limit`}},
		{"quota when unlimited", "domain: a\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unlimited: true}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: quota_mode has no use with unlimited: true`}},
		{"metadata without limit", "domain: a\ndescriptors:\n  - key: k\n    metadata: {m: 1}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: metadata is answered with this descriptor's own rate_limit, and it has none`}},
		{"metadata not a mapping", "domain: a\ndescriptors:\n  - key: k\n    metadata: [a]\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: metadata must be a mapping`}},
		{"metadata infinity", "domain: a\ndescriptors:\n  - key: k\n    metadata: {m: .inf}\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: metadata: ".inf" is not a finite number`}},
		{"metadata field twice", "domain: a\ndescriptors:\n  - key: k\n    metadata:\n      m: 1\n      m: 2\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:6: domain "a", descriptor k: m given twice (first at line 5)`}},
		{"share without wildcard", "domain: a\ndescriptors:\n  - key: files\n    value: files/a\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			[]string{`f.yaml:5: domain "a", descriptor files=files/a: share_threshold needs a wildcard ('*') in the key or value, and "files_files/a" has none`}},
		{"value_to_metric not bool", "domain: a\ndescriptors:\n  - key: k\n    value_to_metric: 1\n",
			[]string{`f.yaml:4: domain "a", descriptor k: value_to_metric must be true or false, got "1"`}},
		{"domain twice without merging", "domain: a\n---\ndomain: a\n",
			[]string{`f.yaml:3: domain "a": defined twice (first at f.yaml:1); to let several files add descriptors to one domain`, `--envoy-rls-merge-domains`}},
		{"every error, each with its line", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: x}\n  - key: j\n    rate_limit: {unit: sec, requests_per_unit: 1}\n",
			[]string{`f.yaml:4: domain "a", descriptor k: requests_per_unit must be a whole number, got "x"`, `f.yaml:6: domain "a", descriptor j: unknown unit "sec"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(c.src), storeCheck(t))
			require.Error(t, err)
			assert.Nil(t, cfg)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			for _, e := range unjoin(err) {
				var pe *Error
				require.True(t, errors.As(e, &pe), "not an *envoyrls.Error: %v", e)
				assert.True(t, strings.HasPrefix(e.Error(), "f.yaml"), e.Error())
			}
		})
	}
}

// An alias expanding into more descriptors than the cap is refused, not
// walked for ever.
func TestParseAliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: a\nl00: &l00 [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	for i := 1; i <= 12; i++ {
		prev := "*l" + itoa(i-1)
		b.WriteString("l" + itoa(i) + ": &l" + itoa(i) + " [{key: a, descriptors: " + prev + "}, {key: b, descriptors: " + prev + "}, {key: c, descriptors: " + prev + "}, {key: d, descriptors: " + prev + "}, {key: e, descriptors: " + prev + "}, {key: f, descriptors: " + prev + "}]\n")
	}
	// The anchors live in unknown fields, which are refused too; the
	// descriptors field uses the last one: 6^12 descriptors if expanded.
	b.WriteString("descriptors: *l12\n")
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()), LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than 100000 descriptors")
	assert.Less(t, time.Since(start), 10*time.Second)
}

func itoa(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestParseManyErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: a\ndescriptors:\n")
	for i := range 30 {
		b.WriteString("  - {key: k" + itoa(i) + ", rate_limit: {unit: x, requests_per_unit: 1}}\n")
	}
	_, err := Parse("f.yaml", []byte(b.String()), LoadOptions{})
	require.Error(t, err)
	errs := unjoin(err)
	assert.Len(t, errs, maxErrors+1)
	assert.Equal(t, "f.yaml: and 10 more errors", errs[maxErrors].Error())
}

func TestRegistryReloadKeepsConfigOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write := func(src string) { require.NoError(t, os.WriteFile(path, []byte(src), 0o600)) }
	write("domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n")
	reg, err := NewRegistry(path, storeCheck(t))
	require.NoError(t, err)
	first := reg.Current()
	assert.Equal(t, path, reg.Path())

	write("domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: -1}}]\n")
	_, err = reg.Reload()
	assert.ErrorContains(t, err, path+`:2: domain "a", descriptor k: requests_per_unit must be between 0`)
	assert.Same(t, first, reg.Current(), "a bad file leaves the configuration in force")
	assert.Equal(t, reloads.Result{Seq: 1, Err: err}, reg.LastReload())

	write("domain: b\ndescriptors: []\n")
	cfg, err := reg.Reload()
	require.NoError(t, err)
	assert.Same(t, cfg, reg.Current())
	assert.NotNil(t, cfg.Domain("b"))
	assert.Nil(t, cfg.Domain("a"))
	assert.NotEqual(t, first.Digest, cfg.Digest)

	// The same files again: the configuration in force stays, itself.
	again, err := reg.Reload()
	require.NoError(t, err)
	assert.Same(t, cfg, again)
	assert.Same(t, cfg, reg.Current())
	assert.Equal(t, reloads.Result{Seq: 3}, reg.LastReload(), "reloads numbered in order, the last one's outcome")

	static := StaticRegistry(cfg)
	got, err := static.Reload()
	require.NoError(t, err)
	assert.Same(t, cfg, got)
}

// A registry for a control plane is not loaded until its first Set; one
// read from files, or static, is at once.
func TestRegistryLoaded(t *testing.T) {
	r := EmptyRegistry("xds://cp:18001")
	if r.Loaded() || len(r.Current().Domains()) != 0 || r.Current().Digest != emptyDigest {
		t.Fatalf("an empty registry: loaded %v, %d domains, digest %s", r.Loaded(), len(r.Current().Domains()), r.Current().Digest)
	}
	cfg, err := ParseDocuments("xds://cp:18001", nil, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Digest != emptyDigest {
		t.Fatalf("no documents digest to %s, not the empty registry's %s", cfg.Digest, emptyDigest)
	}
	r.Set(cfg)
	if !r.Loaded() {
		t.Fatal("not loaded after Set")
	}
	if !StaticRegistry(cfg).Loaded() {
		t.Fatal("a static registry is not loaded")
	}
}

// The descriptor cap counts the whole configuration, every file and
// domain: its error does not blame the domain where the count passed it
// (issue 38, item 8).
func TestDescriptorCapIsTheConfigurationsTotal(t *testing.T) {
	ten := func(item string) string {
		var parts []string
		for _, k := range "abcdefghij" {
			parts = append(parts, strings.ReplaceAll(item, "K", string(k)))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	// 4 + 10 + 110 + 1110 + 11110 descriptors, aliases counted per use.
	domain := func(name string) []byte {
		return []byte("domain: " + name + "\ndescriptors:\n" +
			"  - {key: k0, descriptors: &l1 " + ten("{key: K, rate_limit: {unit: second, requests_per_unit: 1}}") + "}\n" +
			"  - {key: k1, descriptors: &l2 " + ten("{key: K, descriptors: *l1}") + "}\n" +
			"  - {key: k2, descriptors: &l3 " + ten("{key: K, descriptors: *l2}") + "}\n" +
			"  - {key: k3, descriptors: " + ten("{key: K, descriptors: *l3}") + "}\n")
	}
	var docs []Document
	for i := range 9 { // 9 × 12,344 > 100,000; 8 would not be
		docs = append(docs, Document{Name: fmt.Sprintf("f%d.yaml", i), Data: domain(fmt.Sprintf("d%d", i))})
	}
	_, err := ParseDocuments("test", docs[:8], LoadOptions{})
	require.NoError(t, err, "8 domains fit")
	_, err = ParseDocuments("test", docs, LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "f8.yaml:")
	assert.Contains(t, err.Error(), "more than 100000 descriptors in all, across every file and domain of the configuration")
	assert.NotContains(t, err.Error(), `domain "d8"`, "d8 is no bigger than the others")
}

// A directory's files are capped together, not only one by one.
func TestLoadCapsADirectorysTotalSize(t *testing.T) {
	dir := t.TempDir()
	pad := strings.Repeat("# padding to make the file big\n", (MaxFileBytes-64)/31)
	for i := range MaxTotalBytes/len(pad) + 1 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.yaml", i)), []byte(fmt.Sprintf("domain: d%d\n", i)+pad), 0o600))
	}
	_, err := Load(dir, LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("hold more than %d bytes together", MaxTotalBytes))
}
