package limiter

import (
	"os"
	"strconv"
	"testing"
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
