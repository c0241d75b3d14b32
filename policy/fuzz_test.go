package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

// FuzzParsePolicies: whatever the file holds, Parse returns, and either
// every policy it accepts is one the node can serve, or every error is a
// *Error naming the file.
func FuzzParsePolicies(f *testing.F) {
	for _, s := range []string{
		"login: {algorithm: SLIDING_WINDOW_LOG, limit: 5, window: 1m}\nsearch: {limit: 100, window: 500ms}\n",
		"{\"login\": {\"algorithm\": \"SLIDING_WINDOW_LOG\", \"limit\": 5, \"window\": \"1m\"}}",
		"login: &a {limit: 5, window: 1m}\nx: *a\n",
		"login:\n  limit: 5\n  window: 1m\n  limit: 6\n",
		"a: {limit: 99999999999999999999, window: 1m}",
		"a: {limit: 1, window: 1500us}",
		"<<: {a: {limit: 1, window: 1s}}",
		"- a\n- b\n",
		"a: [\n",
		"a: {limit: 1, window: 1s}\n---\nb: 1\n",
		"a: {limit: 20000, window: 1m, algorithm: SLIDING_WINDOW_LOG}",
		"monthly: {limit: 100000, calendar: month, time_zone: Europe/Paris}\nd: {limit: 5, calendar: DAY}\n",
		"a: {limit: 5, calendar: week, window: 1h, algorithm: SLIDING_WINDOW_LOG, time_zone: Nowhere/Else}",
		"a: {limit: 5, window: 1h, time_zone: UTC}",
		"u: {algorithm: GCRA, limit: 10, window: 1s, burst: 50}\nc: {algorithm: CONCURRENCY, limit: 20, window: 30s}\n",
		"u: {algorithm: GCRA, limit: 1, window: 1h, burst: 0}\nv: {limit: 1, window: 1s, burst: 2}\nw: {algorithm: GCRA, limit: 9, calendar: day}",
		"\xff",
		"",
	} {
		f.Add([]byte(s))
	}
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("f.yaml", data, store.Validate)
		if err != nil {
			require.Nil(t, set)
			for _, e := range unjoin(err) {
				var pe *Error
				require.True(t, errors.As(e, &pe), "not a *policy.Error: %v", e)
				require.Equal(t, "f.yaml", pe.File)
				require.True(t, strings.HasPrefix(e.Error(), "f.yaml"), e.Error())
			}
			return
		}
		require.Positive(t, set.Len(), "an accepted file defines policies")
		for _, p := range set.All() {
			require.True(t, validName.MatchString(p.Name), "name %q", p.Name)
			require.LessOrEqual(t, len(p.Name), MaxNameBytes)
			require.Positive(t, p.Limit)
			if p.Calendar != 0 {
				require.Zero(t, p.Window, "a calendar policy has no window")
			} else {
				require.Positive(t, p.Window)
			}
			require.Zero(t, p.Window%time.Millisecond)
			require.NoError(t, store.Validate(p.Probe()), "policy %q", p.Name)
			if p.Burst != 0 {
				require.Equal(t, limiter.GCRA, p.Algorithm, "burst is GCRA's")
				require.Positive(t, p.Burst)
			}
			got, ok := set.Lookup(p.Name)
			require.True(t, ok)
			require.Equal(t, p, got)
		}
	})
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
