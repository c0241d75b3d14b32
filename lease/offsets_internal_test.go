package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/peerlimit/peerlimit/limiter"
)

// A log lease's holder reports each hit's offset from its asking in
// whole milliseconds rounded up, never down: the owner places the hit at
// its grant's millisecond plus the offset, so a truncated one would put
// it before the hit by up to 2 ms (1 ms more than any admission of its
// own), and the window could admit one more as it leaves.
func TestALeasedHitIsNeverTimedBeforeItHappened(t *testing.T) {
	asked := time.UnixMilli(1_750_000_000_000).Add(600 * time.Microsecond)
	hl := &heldLease{algo: limiter.SlidingWindowLog, asked: asked, until: asked.Add(time.Second), left: 4}
	req := limiter.Request{Key: "hot", Limit: 64, Window: 10 * time.Second, Algorithm: limiter.SlidingWindowLog, Hits: 1}
	for _, after := range []time.Duration{0, 2 * time.Millisecond, 1500 * time.Microsecond, 2*time.Millisecond + time.Nanosecond} {
		hl.use(asked.Add(after), req)
	}
	assert.Equal(t, []time.Duration{0, 2 * time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}, hl.offsets)
}
