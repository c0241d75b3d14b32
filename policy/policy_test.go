package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

// storeCheck is what a node passes: its store's validation, default caps.
func storeCheck(t testing.TB) func(limiter.Request) error {
	t.Helper()
	s, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	return s.Validate
}

func TestParseYAML(t *testing.T) {
	src := `# the operator's policies
login:  {algorithm: SLIDING_WINDOW_LOG, limit: 5, window: 1m}
search:
  limit: 100
  window: 500ms
api.v2/orders:export: {limit: 3, window: 1h30m, algorithm: SLIDING_WINDOW_COUNTER}
`
	set, err := Parse("policies.yaml", []byte(src), storeCheck(t))
	require.NoError(t, err)
	assert.Equal(t, []Policy{
		{Name: "api.v2/orders:export", Algorithm: limiter.SlidingWindowCounter, Limit: 3, Window: 90 * time.Minute, Line: 6},
		{Name: "login", Algorithm: limiter.SlidingWindowLog, Limit: 5, Window: time.Minute, Line: 2},
		{Name: "search", Algorithm: limiter.SlidingWindowCounter, Limit: 100, Window: 500 * time.Millisecond, Line: 3},
	}, set.All())
	assert.Equal(t, 3, set.Len())
	assert.Equal(t, "policies.yaml", set.File)
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, set.Digest)

	p, ok := set.Lookup("login")
	require.True(t, ok)
	assert.Equal(t, limiter.Request{Key: "user:1", Limit: 5, Window: time.Minute, Algorithm: limiter.SlidingWindowLog, Hits: 2}, p.Request("user:1", 2))
	_, ok = set.Lookup("Login")
	assert.False(t, ok, "names are case-sensitive")
}

// JSON is YAML: the same parser reads it, tabs and all.
func TestParseJSON(t *testing.T) {
	src := "{\n\t\"login\": {\"algorithm\": \"SLIDING_WINDOW_LOG\", \"limit\": 5, \"window\": \"1m\"},\n\t\"search\": {\"limit\": 100, \"window\": \"1s\"}\n}\n"
	set, err := Parse("policies.json", []byte(src), storeCheck(t))
	require.NoError(t, err)
	login, _ := set.Lookup("login")
	search, _ := set.Lookup("search")
	assert.Equal(t, Policy{Name: "login", Algorithm: limiter.SlidingWindowLog, Limit: 5, Window: time.Minute, Line: 2}, login)
	assert.Equal(t, Policy{Name: "search", Limit: 100, Window: time.Second, Line: 3}, search)

	// The same policies, the same digest? No: the digest is of the bytes,
	// which is what tells an operator two nodes read the same file.
	yset, err := Parse("p.yaml", []byte("login: {algorithm: SLIDING_WINDOW_LOG, limit: 5, window: 1m}\nsearch: {limit: 100, window: 1s}\n"), nil)
	require.NoError(t, err)
	assert.NotEqual(t, set.Digest, yset.Digest)
	again, err := Parse("other-name.json", []byte(src), nil)
	require.NoError(t, err)
	assert.Equal(t, set.Digest, again.Digest)
}

func TestParseAliasesShareAPolicy(t *testing.T) {
	src := "login: &strict {algorithm: SLIDING_WINDOW_LOG, limit: 5, window: 1m}\nreset-password: *strict\n"
	set, err := Parse("p.yaml", []byte(src), nil)
	require.NoError(t, err)
	a, _ := set.Lookup("login")
	b, _ := set.Lookup("reset-password")
	assert.Equal(t, a.Limit, b.Limit)
	assert.Equal(t, a.Window, b.Window)
	assert.Equal(t, a.Algorithm, b.Algorithm)
}

// Every error names the file and the line, and the policy when it is in one.
func TestParseErrorsNameTheLine(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"non-positive limit", "ok: {limit: 1, window: 1s}\nlogin:\n  limit: 0\n  window: 1m\n",
			`p.yaml:3: policy "login": limit must be positive, got 0`},
		{"negative limit", "login: {limit: -3, window: 1m}", `p.yaml:1: policy "login": limit must be positive, got -3`},
		{"fractional limit", "login: {limit: 2.5, window: 1m}", `p.yaml:1: policy "login": limit must be a whole number, got "2.5"`},
		{"quoted limit", "login: {limit: \"5\", window: 1m}", `p.yaml:1: policy "login": limit must be a whole number, got "5"`},
		{"huge limit", "login: {limit: 99999999999999999999, window: 1m}", `p.yaml:1: policy "login": limit 99999999999999999999 does not fit in 64 bits`},
		{"bad duration", "login:\n  limit: 5\n  window: 1 minute\n", `p.yaml:3: policy "login": window "1 minute" is not a duration`},
		{"bare number window", "login: {limit: 5, window: 60000}", `p.yaml:1: policy "login": window must be a duration with its unit`},
		{"zero window", "login: {limit: 5, window: 0s}", `p.yaml:1: policy "login": window must be positive, got 0s`},
		{"negative window", "login: {limit: 5, window: -1m}", `p.yaml:1: policy "login": window must be positive, got -1m`},
		{"sub-ms window", "login: {limit: 5, window: 1500us}", `p.yaml:1: policy "login": window 1500us is not a whole number of milliseconds`},
		{"unknown algorithm", "a: {limit: 1, window: 1s}\nlogin: {limit: 5, window: 1m, algorithm: TOKEN_BUCKET}",
			`p.yaml:2: policy "login": unknown algorithm "TOKEN_BUCKET"`},
		{"lower-case algorithm", "login: {limit: 5, window: 1m, algorithm: sliding_window_log}", `unknown algorithm "sliding_window_log"`},
		{"unknown field", "login:\n  limit: 5\n  window: 1m\n  rate: 10\n", `p.yaml:4: policy "login": unknown field "rate"; want limit, window (or calendar and time_zone), algorithm and burst`},
		{"field twice", "login:\n  limit: 5\n  window: 1m\n  limit: 6\n", `p.yaml:4: policy "login": limit given twice (first at line 2)`},
		{"missing limit", "x: {limit: 1, window: 1s}\n\nlogin: {window: 1m}", `p.yaml:3: policy "login": limit is missing`},
		{"missing window", "login:\n  limit: 5\n", `p.yaml:2: policy "login": window is missing`},
		{"duplicate name", "login: {limit: 5, window: 1m}\nsearch: {limit: 1, window: 1s}\nlogin: {limit: 6, window: 1m}\n",
			`p.yaml:3: policy "login": defined twice (first at line 1)`},
		{"policy not a mapping", "login: 5\n", `p.yaml:1: policy "login": want a mapping with limit, window`},
		{"null policy", "login:\n", `p.yaml:1: policy "login": want a mapping`},
		{"bad name", "\"log in\": {limit: 5, window: 1m}", `p.yaml:1: invalid policy name "log in"`},
		{"long name", strings.Repeat("n", 129) + ": {limit: 5, window: 1m}", `p.yaml:1: policy name is 129 bytes; the maximum is 128`},
		{"not a mapping", "- login\n- search\n", `p.yaml:1: want a mapping of policy names to policies`},
		{"empty file", "", `p.yaml: no policies defined`},
		{"only comments", "# nothing yet\n", `p.yaml: no policies defined`},
		{"empty mapping", "{}", `p.yaml:1: no policies defined`},
		{"null document", "~", `p.yaml:1: no policies defined`},
		{"two documents", "a: {limit: 1, window: 1s}\n---\nb: {limit: 1, window: 1s}\n", `p.yaml:2: more than one YAML document`},
		{"yaml syntax", "login: {limit: 5, window: 1m\nsearch: {limit: 1}\n", `p.yaml:1: did not find expected ',' or '}'`},
		{"json syntax", "{\"login\": {\"limit\": 5,, \"window\": \"1m\"}}", `p.yaml:1: did not find expected node content`},
		{"tab indent", "login:\n\tlimit: 5\n", `p.yaml:2: found character that cannot start any token`},
		{"not utf-8", "a: {limit: 1, window: 1s}\nb\xff: {limit: 1, window: 1s}\n", `p.yaml:2: not UTF-8 text (byte 27)`},
		{"NUL", "a: {limit: 1, window: 1s}\n\nb\x00: {limit: 1, window: 1s}\n", `p.yaml:3: control character U+0000, which YAML does not allow (byte 28)`},
		{"merge key", "base: &b {limit: 1, window: 1s}\nlogin:\n  <<: *b\n", `p.yaml:3: policy "login": unknown field "<<"`},
		{"top-level merge key", "base: &b {x: {limit: 1, window: 1s}}\n<<: *b\n", `p.yaml:2: merge keys (<<) are not supported`},
		{"unknown calendar", "q:\n  limit: 5\n  calendar: fortnight\n", `p.yaml:3: policy "q": calendar must be minute, hour, day, week, month or year, got "fortnight"`},
		{"unknown time zone", "q:\n  limit: 5\n  calendar: month\n  time_zone: Mars/Olympus_Mons\n", `p.yaml:4: policy "q": time_zone unknown time zone "Mars/Olympus_Mons"`},
		{"local time zone", "q:\n  limit: 5\n  calendar: month\n  time_zone: Local\n", `p.yaml:4: policy "q": time_zone "Local" is each node's own zone`},
		{"calendar and window", "q:\n  limit: 5\n  window: 1h\n  calendar: day\n", `p.yaml:3: policy "q": window must not be given with calendar`},
		{"calendar log", "q:\n  limit: 5\n  calendar: day\n  algorithm: SLIDING_WINDOW_LOG\n", `p.yaml:4: policy "q": a calendar policy is counted by SLIDING_WINDOW_COUNTER only`},
		{"time zone without calendar", "q:\n  limit: 5\n  window: 1h\n  time_zone: Europe/Paris\n", `p.yaml:4: policy "q": time_zone is only for a calendar policy`},
		{"calendar not a string", "q: {limit: 5, calendar: 7}", `p.yaml:1: policy "q": calendar must be minute, hour`},
		// GCRA's burst and the algorithms without calendar periods.
		{"burst without GCRA", "login:\n  limit: 5\n  window: 1m\n  burst: 10\n", `p.yaml:4: policy "login": burst is only for algorithm GCRA, not SLIDING_WINDOW_COUNTER`},
		{"burst on CONCURRENCY", "c: {algorithm: CONCURRENCY, limit: 5, window: 1m, burst: 10}", `p.yaml:1: policy "c": burst is only for algorithm GCRA, not CONCURRENCY`},
		{"zero burst", "u:\n  algorithm: GCRA\n  limit: 5\n  window: 1s\n  burst: 0\n", `p.yaml:5: policy "u": burst must be positive, got 0`},
		{"negative burst", "u: {algorithm: GCRA, limit: 5, window: 1s, burst: -2}", `p.yaml:1: policy "u": burst must be positive, got -2`},
		{"fractional burst", "u: {algorithm: GCRA, limit: 5, window: 1s, burst: 1.5}", `p.yaml:1: policy "u": burst must be a whole number, got "1.5"`},
		{"lower-case gcra", "u: {algorithm: gcra, limit: 5, window: 1s}", `p.yaml:1: policy "u": unknown algorithm "gcra"; want SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG, GCRA or CONCURRENCY`},
		{"calendar GCRA", "q:\n  limit: 5\n  calendar: day\n  algorithm: GCRA\n", `p.yaml:4: policy "q": a calendar policy is counted by SLIDING_WINDOW_COUNTER only, not GCRA`},
		{"calendar CONCURRENCY", "q: {limit: 5, calendar: day, algorithm: CONCURRENCY}", `p.yaml:1: policy "q": a calendar policy is counted by SLIDING_WINDOW_COUNTER only, not CONCURRENCY`},
		// The node's caps, through its store's validation.
		{"burst refilling slower than the longest window", "u:\n  algorithm: GCRA\n  limit: 1\n  window: 1h\n  burst: 100000\n",
			`p.yaml:5: policy "u": beyond this node's limits: burst 100000 takes longer than the longest window`},
		{"GCRA faster than a hit per µs", "u:\n  algorithm: GCRA\n  limit: 5000\n  window: 1ms\n",
			`p.yaml:3: policy "u": beyond this node's limits: limit 5000 per 1 ms is over GCRA's fastest rate`},
		{"concurrency slots over the cap", "c: {algorithm: CONCURRENCY, limit: 20000, window: 1m}",
			`p.yaml:1: policy "c": beyond this node's limits: limit 20000 exceeds the CONCURRENCY maximum of 10000 slots`},
		{"concurrency slot lifetime over the cap", "c:\n  algorithm: CONCURRENCY\n  limit: 5\n  window: 100h\n",
			`p.yaml:4: policy "c": beyond this node's limits: window (in ms) is 360000000; a CONCURRENCY slot frees itself`},
		{"log limit over the cap", "login: {algorithm: SLIDING_WINDOW_LOG, limit: 20000, window: 1m}",
			`p.yaml:1: policy "login": beyond this node's limits: limit 20000 exceeds the SLIDING_WINDOW_LOG maximum of 10000`},
		{"window over the cap", "login:\n  limit: 5\n  window: 9000h\n",
			`p.yaml:3: policy "login": beyond this node's limits: window (in ms) is 32400000000; the maximum is 31622400000`},
		{"log window over its cap", "login:\n  algorithm: SLIDING_WINDOW_LOG\n  limit: 5\n  window: 1500h\n",
			`p.yaml:4: policy "login": beyond this node's limits: window (in ms) is 5400000000; SLIDING_WINDOW_LOG supports at most`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set, err := Parse("p.yaml", []byte(c.src), storeCheck(t))
			require.Error(t, err)
			assert.Nil(t, set)
			assert.Contains(t, err.Error(), c.want)
			var pe *Error
			require.ErrorAs(t, err, &pe, "every error is a *policy.Error")
			assert.Equal(t, "p.yaml", pe.File)
		})
	}
}

// A file with several mistakes reports them all, in order, so that one
// edit fixes them.
func TestParseReportsEveryError(t *testing.T) {
	src := "login: {limit: 0, window: 1m}\nsearch: {limit: 5, window: soon}\nok: {limit: 1, window: 1s}\n"
	_, err := Parse("p.yaml", []byte(src), nil)
	require.Error(t, err)
	assert.Equal(t, "p.yaml:1: policy \"login\": limit must be positive, got 0\n"+
		"p.yaml:2: policy \"search\": window \"soon\" is not a duration; write e.g. \"1m\", \"1h30m\" or \"500ms\"", err.Error())

	var many strings.Builder
	for i := range 30 {
		many.WriteString(strings.Repeat("x", i+1) + ": {limit: 0, window: 1s}\n")
	}
	_, err = Parse("p.yaml", []byte(many.String()), nil)
	require.Error(t, err)
	assert.Len(t, strings.Split(err.Error(), "\n"), maxErrors+1)
	assert.Contains(t, err.Error(), "and 10 more errors")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
}

func TestRegistryReloadKeepsTheOldSetOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeFile(t, path, "login: {limit: 5, window: 1m}\n")
	r, err := Load(path, storeCheck(t))
	require.NoError(t, err)
	assert.Equal(t, path, r.Path())
	p, ok := r.Lookup("login")
	require.True(t, ok)
	assert.EqualValues(t, 5, p.Limit)
	first := r.Current()

	writeFile(t, path, "login: {limit: 5, window: 1m}\nsearch: {limit: 0, window: 1s}\n")
	_, err = r.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+":2: policy \"search\": limit must be positive")
	assert.Same(t, first, r.Current(), "a bad file changes nothing")

	writeFile(t, path, "login: {limit: 7, window: 1m}\nsearch: {limit: 3, window: 1s}\n")
	set, err := r.Reload()
	require.NoError(t, err)
	assert.Same(t, set, r.Current())
	p, _ = r.Lookup("login")
	assert.EqualValues(t, 7, p.Limit)
	_, ok = r.Lookup("search")
	assert.True(t, ok)

	require.NoError(t, os.Remove(path))
	_, err = r.Reload()
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Same(t, set, r.Current())
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "absent.yaml"), nil)
	assert.ErrorIs(t, err, os.ErrNotExist)

	big := filepath.Join(dir, "big.yaml")
	writeFile(t, big, strings.Repeat("#", MaxFileBytes+1))
	_, err = Load(big, nil)
	assert.ErrorContains(t, err, "larger than")

	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "\n\nlogin: {limit: 5}\n")
	_, err = Load(bad, nil)
	var pe *Error
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, Error{File: bad, Line: 3, Where: `policy "login"`, Msg: "window is missing"}, *pe)
}

// Lookups race with reloads: each sees one whole Set or the other.
func TestRegistryLookupDuringReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	writeFile(t, path, "a: {limit: 1, window: 1s}\nb: {limit: 1, window: 1s}\n")
	r, err := Load(path, nil)
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			set := r.Current()
			a, _ := set.Lookup("a")
			b, _ := set.Lookup("b")
			if a.Limit != b.Limit {
				t.Errorf("a torn set: a=%d b=%d", a.Limit, b.Limit)
				return
			}
		}
	})
	for i := int64(2); i < 50; i++ {
		writeFile(t, path, strings.ReplaceAll("a: {limit: N, window: 1s}\nb: {limit: N, window: 1s}\n", "N", strconv.FormatInt(i, 10)))
		_, err := r.Reload()
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	a, _ := r.Lookup("a")
	assert.EqualValues(t, 49, a.Limit)
}

// A calendar policy resolves to a calendar request: its unit in its zone
// (UTC by default), no window.
func TestCalendarPolicies(t *testing.T) {
	set, err := Parse("p.yaml", []byte("monthly: {limit: 100000, calendar: month, time_zone: Europe/Paris}\ndaily: {limit: 10, calendar: DAY}\n"), storeCheck(t))
	require.NoError(t, err)
	monthly, ok := set.Lookup("monthly")
	require.True(t, ok)
	paris, err := limiter.NewCalendar(limiter.CalendarMonth, "Europe/Paris")
	require.NoError(t, err)
	assert.Equal(t, limiter.Request{Key: "k", Limit: 100000, Calendar: paris, Hits: 1}, monthly.Request("k", 1))
	daily, _ := set.Lookup("daily")
	utc, err := limiter.NewCalendar(limiter.CalendarDay, "")
	require.NoError(t, err)
	assert.Equal(t, utc, daily.Calendar)
	assert.Zero(t, daily.Window)
}

// A GCRA policy carries its burst to the request (absent: 0, the
// limit); a CONCURRENCY policy is limit slots lasting window each, and is
// checked against the node's caps as the ACQUIRE of a slot, since it
// takes no check of hits.
func TestGCRAAndConcurrencyPolicies(t *testing.T) {
	src := "upload: {algorithm: GCRA, limit: 10, window: 1s, burst: 50}\n" +
		"steady: {algorithm: GCRA, limit: 10, window: 1s}\n" +
		"conns: {algorithm: CONCURRENCY, limit: 20, window: 30s}\n"
	set, err := Parse("p.yaml", []byte(src), storeCheck(t))
	require.NoError(t, err)
	upload, _ := set.Lookup("upload")
	assert.Equal(t, limiter.Request{Key: "k", Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 50, Hits: 3},
		upload.Request("k", 3))
	steady, _ := set.Lookup("steady")
	assert.Zero(t, steady.Burst, "no burst: the limit")
	conns, _ := set.Lookup("conns")
	assert.Equal(t, Policy{Name: "conns", Algorithm: limiter.Concurrency, Limit: 20, Window: 30 * time.Second, Line: 3}, conns)
	assert.Equal(t, limiter.Request{Key: "policy", Limit: 20, Window: 30 * time.Second, Algorithm: limiter.Concurrency,
		Op: limiter.OpAcquire, Hits: 1}, conns.Probe())
	assert.Equal(t, limiter.OpCheck, upload.Probe().Op)
}
