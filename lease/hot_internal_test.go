package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A warm key keeps its way in the rate table while one-off keys of its
// set come and go between its checks: once it was seen twice, each
// replaces the other way, the one with the lower rate, so the warm key's
// rate is seen. (With one way, as before, every cold key between two of
// its checks reset its count.) Before its second check it is one of two
// keys seen once, and outlasts one newer.
func TestAWarmKeyOutlastsColdKeysOfItsSet(t *testing.T) {
	var sh holderShard
	const warm = uint64(7)<<32 | 1
	cold := func(i int) uint64 { return uint64(7+hotSets*(i+1))<<32 | 2 } // the same set
	start := time.UnixMilli(1_750_000_000_000).UnixNano()
	now, n := start, 0
	var s *hotSlot
	for i := range 6 { // 5 checks/s
		s = sh.bump(warm, now)
		for range min(i+1, 3) { // one cold key after its first check, then three
			sh.bump(cold(n), now+int64(10*time.Millisecond))
			n++
		}
		require.Equal(t, warm, s.hash, "check %d", i)
		now += int64(200 * time.Millisecond)
	}
	assert.EqualValues(t, 5, s.n, "every check after the first counted")
	assert.InDelta(t, 5, s.rate(now-int64(200*time.Millisecond)), 0.01)
}
