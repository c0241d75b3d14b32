package limiter

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/topk"
)

func TestHotKeysListsTheHeaviestKeysAndDenials(t *testing.T) {
	s := newStore(t, 7, nil)
	now := time.UnixMilli(1_700_000_010_000)
	check := func(key string, limit int64, n int) {
		for range n {
			_, err := s.Check(now, Request{Key: key, Limit: limit, Window: time.Minute, Hits: 1})
			require.NoError(t, err)
		}
	}
	check("hot", 1000, 50)
	check("denied", 3, 20) // 3 allowed, 17 denied
	for i := range 100 {
		check(fmt.Sprintf("cold:%d", i), 1000, 1)
	}
	hk := s.Admin().HotKeys(now, 2)
	require.Len(t, hk.Checks, 2)
	assert.Equal(t, topk.Entry{Key: "hot", Count: 50}, hk.Checks[0])
	assert.Equal(t, "denied", hk.Checks[1].Key)
	assert.EqualValues(t, 20, hk.Checks[1].Count-hk.Checks[1].Err, "a heavy key's count is exact here or within its bound")
	require.NotEmpty(t, hk.Denials)
	assert.Equal(t, "denied", hk.Denials[0].Key)
	assert.EqualValues(t, 17, hk.Denials[0].Count)
	assert.Equal(t, time.UnixMilli(1_699_999_980_000), hk.Since, "the previous epoch's start")
}

func TestHotKeysForgetAfterTwoEpochs(t *testing.T) {
	s := newStore(t, 3, nil)
	t0 := time.UnixMilli(1_700_000_010_000)
	_, err := s.Check(t0, Request{Key: "k", Limit: 10, Window: time.Minute, Hits: 1})
	require.NoError(t, err)
	assert.Len(t, s.Admin().HotKeys(t0.Add(HotKeysEpoch), 10).Checks, 1, "the previous epoch still counts")
	assert.Empty(t, s.Admin().HotKeys(t0.Add(2*HotKeysEpoch), 10).Checks)
}

func TestHotKeysOff(t *testing.T) {
	s := newStore(t, 3, func(c *Config) { c.HotKeys = 0 })
	now := time.Now()
	_, err := s.Check(now, Request{Key: "k", Limit: 10, Window: time.Minute, Hits: 1})
	require.NoError(t, err)
	assert.Empty(t, s.Admin().HotKeys(now, 10).Checks)
	require.ErrorContains(t, configWith(func(c *Config) { c.HotKeys = 65 }).Validate(3), "HotKeys must be in [0, 64]")
}

// TestHotKeysKeepSpaceSavingsBound drives skewed traffic over two epochs
// and checks, against exact counts, that each listed count is within its
// error above the truth and that no key outside the list outweighs the
// list's last entry by more than the bound allows.
func TestHotKeysKeepSpaceSavingsBound(t *testing.T) {
	seed := seedFromEnv(t, rand.Uint64())
	t.Logf("seed %d (PEERLIMIT_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	s := newStore(t, 5, func(c *Config) { c.HotKeys = 4 })
	t0 := time.UnixMilli(1_700_000_010_000)
	zipf := rand.NewZipf(rng, 1.3, 1, 300)
	truth := map[string]uint64{}
	for i := range 6000 {
		now := t0.Add(time.Duration(i) * 8 * time.Millisecond) // 48 s: two epochs
		key := fmt.Sprintf("k%d", zipf.Uint64())
		_, err := s.Check(now, Request{Key: key, Limit: 1 << 40, Window: time.Minute, Hits: 1})
		require.NoError(t, err)
		truth[key]++
	}
	hk := s.Admin().HotKeys(t0.Add(48*time.Second), 10)
	require.Len(t, hk.Checks, 10)
	for _, e := range hk.Checks {
		require.GreaterOrEqual(t, e.Count, truth[e.Key], "seed %d: %s", seed, e.Key)
		require.LessOrEqual(t, e.Count-e.Err, truth[e.Key], "seed %d: %s", seed, e.Key)
	}
	// The truly heaviest key is listed first or within its bound of it.
	var heaviest string
	for k, c := range truth {
		if c > truth[heaviest] {
			heaviest = k
		}
	}
	assert.Contains(t, keysOf(hk.Checks), heaviest, "seed %d", seed)
}

func keysOf(es []topk.Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}
