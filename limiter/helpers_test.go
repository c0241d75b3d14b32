package limiter

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// seedFromEnv lets a failing randomized test be replayed exactly.
func seedFromEnv(t testing.TB, def uint64) uint64 {
	t.Helper()
	if v := os.Getenv("PEERLIMIT_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PEERLIMIT_SEED=%q: %v", v, err)
		}
		return s
	}
	return def
}

// configWith returns DefaultConfig changed by edit, so that a test states
// only the bounds it is about. A nil edit keeps the defaults.
func configWith(edit func(*Config)) Config {
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

// newStore returns a store of the given partition count whose config is
// configWith(edit).
func newStore(t testing.TB, partitions int, edit func(*Config)) *Store {
	t.Helper()
	s, err := New(configWith(edit), partitions)
	require.NoError(t, err)
	return s
}
