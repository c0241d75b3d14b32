package envoyrls

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type entry struct{ k, v string }

func (e entry) GetKey() string   { return e.k }
func (e entry) GetValue() string { return e.v }

// entries reads "k=v,k2=v2".
func entries(s string) []entry {
	var out []entry
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, entry{k, v})
	}
	return out
}

const matchConfig = `domain: m
descriptors:
  # any remote address: 10/s; one of them blocked
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}

  # nested: a placeholder level, then limits under it
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}

  # a limit at both depths
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000}
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
      - key: user
        value: admin
        rate_limit: {unlimited: true}

  # wildcards: the first in the file's order wins (not the longest); an
  # exact value beats them, and they beat the key without a value
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: path
    value: /api/v2/*
    rate_limit: {unit: second, requests_per_unit: 40}
  - key: path
    value: /api/v2/health
    rate_limit: {unlimited: true}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: route
    value: /v*/items/*/reviews
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: region
    value: eu-*-prod*
    descriptors:
      - key: tier
        value: gold*
        rate_limit: {unit: second, requests_per_unit: 8}

  # an exact value without nested descriptors hides the wildcard's (no
  # backtracking, as upstream)
  - key: service
    value: auth
  - key: service
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 7}

  # matched on key_value, as upstream: a key holding '_' or '*' takes
  # part in it
  - key: u_v
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: z*
    rate_limit: {unit: second, requests_per_unit: 11}
`

func TestMatch(t *testing.T) {
	cfg, err := Parse("m.yaml", []byte(matchConfig), storeCheck(t))
	require.NoError(t, err)
	d := cfg.Domain("m")
	require.NotNil(t, d)
	for _, c := range []struct {
		entries string
		want    string // the rule's path; "" for no match
	}{
		{"remote_address=1.2.3.4", "remote_address"},
		{"remote_address=50.0.0.5", "remote_address_50.0.0.5"},
		{"remote_address=", "remote_address"},
		{"message_type=marketing,to_number=2061111111", "message_type_marketing.to_number"},
		{"to_number=2061111111", "to_number"},
		{"message_type=marketing", ""},                     // a placeholder has no limit
		{"message_type=transactional,to_number=1", ""},     // no such value, no wildcard
		{"to_number=1,message_type=marketing", ""},         // order matters
		{"message_type=marketing,to_number=1,extra=x", ""}, // deeper than configured
		{"tenant=acme", "tenant"},
		{"tenant=acme,user=bob", "tenant.user"},
		{"tenant=acme,user=admin", "tenant.user_admin"},
		{"path=/api/v1/users", "path_/api/*"},
		{"path=/api/v2/users", "path_/api/*"}, // the first wildcard, not the longest
		{"path=/api/v2/health", "path_/api/v2/health"},
		{"path=/api/", "path_/api/*"}, // '*' matches the empty text
		{"path=/static/x", "path"},
		{"route=/v1/items/42/reviews", "route_/v*/items/*/reviews"},
		{"route=/v/items//reviews", "route_/v*/items/*/reviews"},
		{"route=/v1/items/42/review", ""},
		{"route=/v1/items/reviews", ""},
		{"region=eu-west-prod-2,tier=gold-plus", "region_eu-*-prod*.tier_gold*"},
		{"region=eu-west-prod,tier=silver", ""},
		{"region=us-west-prod,tier=gold", ""},
		{"service=auth,method=login", ""},
		{"service=billing,method=pay", "service.method"},
		{"u=v", "u_v"},          // the key u_v is the key_value of u=v
		{"u_v=anything", "u_v"}, // and the key u_v itself
		{"zeta=1", "z*"},
		{"z=", "z*"},
		{"unknown=x", ""},
		{"Remote_address=1.2.3.4", ""}, // keys are case-sensitive
	} {
		got := Match(d, entries(c.entries)).Rule
		if c.want == "" {
			assert.Nil(t, got, c.entries)
			continue
		}
		if assert.NotNil(t, got, c.entries) {
			assert.Equal(t, c.want, got.Path, c.entries)
		}
	}
	assert.Nil(t, Match(d, []entry{}).Rule)
	assert.Nil(t, Match[entry](nil, entries("remote_address=1")).Rule)

	admin := Match(d, entries("tenant=acme,user=admin")).Rule
	assert.True(t, admin.Unlimited)
}

// How each level was selected, which the shared counters and the
// statistics keys depend on.
func TestMatchSaysHowEachLevelMatched(t *testing.T) {
	cfg, err := Parse("m.yaml", []byte(matchConfig), storeCheck(t))
	require.NoError(t, err)
	d := cfg.Domain("m")
	for _, c := range []struct {
		entries string
		want    []how
	}{
		{"remote_address=50.0.0.5", []how{byValue}},
		{"remote_address=1.2.3.4", []how{byDefault}},
		{"region=eu-a-prod,tier=gold", []how{byWildcard, byWildcard}},
		{"message_type=marketing,to_number=1", []how{byValue, byDefault}},
		{"u=v", []how{byValue}},
	} {
		m := Match(d, entries(c.entries))
		require.NotNil(t, m.Rule, c.entries)
		for i, w := range c.want {
			assert.Equal(t, w, m.how(i), "%s: level %d", c.entries, i)
		}
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		pattern string
		yes, no []string
	}{
		{"bar*b", []string{"barab", "bar123b", "barb"}, []string{"bara", "xbarb", "bar"}},
		{"foo*bar*baz", []string{"foo123bar456baz", "foobarbaz"}, []string{"foo123baz", "bar456baz", "foobazbar"}},
		{"aa*aa", []string{"aaaa", "aaxaa"}, []string{"aaa", "aa"}},
		{"**", []string{"", "x"}, nil},
		{"*x", []string{"x", "yx"}, []string{"xy"}},
		{"k_*", []string{"k_", "k_v"}, []string{"k", "kv"}},
		{"a*b*a", []string{"aba", "abba", "ab_ba"}, []string{"ab", "ba"}},
	} {
		g := newGlob(c.pattern)
		for _, s := range c.yes {
			assert.True(t, g.match([]byte(s)), "%q should match %q", c.pattern, s)
		}
		for _, s := range c.no {
			assert.False(t, g.match([]byte(s)), "%q should not match %q", c.pattern, s)
		}
	}
}

// FuzzGlob: the glob agrees with the regular expression it stands for.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"bar*b", "barab"}, {"foo*bar*baz", "foobarbaz"}, {"a*a", "a"}, {"*", ""}, {"x**y", "xy"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if !strings.Contains(pattern, "*") {
			return
		}
		parts := strings.Split(pattern, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re, err := regexp.Compile(`^(?s:` + strings.Join(parts, ".*") + `)$`)
		if err != nil || !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			return // the reference works on UTF-8 text only
		}
		require.Equal(t, re.MatchString(s), newGlob(pattern).match([]byte(s)), "pattern %q, text %q", pattern, s)
	})
}

func TestMatchDoesNotAllocate(t *testing.T) {
	cfg, err := Parse("m.yaml", []byte(matchConfig), LoadOptions{})
	require.NoError(t, err)
	d := cfg.Domain("m")
	e := entries("message_type=marketing,to_number=2061111111")
	p := entries("path=/api/v2/users")
	w := entries("region=eu-west-prod-1,tier=gold") // two wildcard levels
	allocs := testing.AllocsPerRun(100, func() {
		if Match(d, e).Rule == nil || Match(d, p).Rule == nil || Match(d, w).Rule == nil {
			t.Fatal("no match")
		}
	})
	assert.Zero(t, allocs)
}

func TestKey(t *testing.T) {
	k := Key("messaging", entries("message_type=marketing,to_number=2061111111"), 1024)
	assert.Equal(t, "envoy:9:messaging,12:message_type,9:marketing,9:to_number,10:2061111111,", k)
	assert.Len(t, k, netstringLen("messaging")+netstringLen("message_type")+netstringLen("marketing")+
		netstringLen("to_number")+netstringLen("2061111111")+len(keyPrefix))

	// Values of a wildcard key are separate counters; boundaries cannot
	// be moved by what the strings hold.
	distinct := map[string]string{}
	for _, c := range []struct {
		domain, e string
	}{
		{"d", "a=b"}, {"d", "a=c"}, {"d", "a_b="}, {"d", "a=_b"}, {"d_a", "b="}, {"d", "a=b,c=d"},
		{"d", "a=b,c=d,"}, {"d", "a=1:b,c=d"}, {"d", "a=b,1:c=d"}, {"d", "a=,b"}, {"d", "a,=b"},
	} {
		key := Key(c.domain, entries(c.e), 1024)
		prev, dup := distinct[key]
		assert.False(t, dup, "%v and %v share the key %q", c, prev, key)
		distinct[key] = c.domain + "|" + c.e
	}

	// Too long: a hash of the whole, still distinct per value.
	long := strings.Repeat("x", 2000)
	h1 := Key("d", entries("path="+long+"1"), 1024)
	h2 := Key("d", entries("path="+long+"2"), 1024)
	assert.Regexp(t, `^envoy#sha256:[0-9a-f]{64}$`, h1)
	assert.Len(t, h1, 77)
	assert.NotEqual(t, h1, h2)
	assert.Equal(t, h1, Key("d", entries("path="+long+"1"), 1024), "stable")
	// The boundary: exactly at the limit is kept as is.
	exact := Key("d", entries("k=v"), 1024)
	assert.Equal(t, exact, Key("d", entries("k=v"), len(exact)))
	assert.True(t, strings.HasPrefix(Key("d", entries("k=v"), len(exact)-1), hashedPrefix))
}

func TestNetstringLen(t *testing.T) {
	for _, n := range []int{0, 1, 9, 10, 99, 100, 12345} {
		s := strings.Repeat("a", n)
		var b strings.Builder
		writeNetstring(&b, s, ':')
		assert.Equal(t, b.Len(), netstringLen(s), n)
	}
}
