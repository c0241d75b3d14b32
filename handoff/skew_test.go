package handoff_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/windowed"
	"github.com/peerlimit/peerlimit/limiter"
)

// A sender whose clock is 5 s behind the receiver's (W = 10 s, L = 10)
// admits the limit of a key, its hits spread over 7 s, then hands the
// key to its owner, which goes on deciding it for 25 s. Counted on the
// real clock (the receiver's), the cluster admits no more than L in any
// window: any sliding one for the log, any fixed one for the counter
// (whose sliding windows may hold up to 2× by design).
//
// Before the handoff carried its sender's clock, the states landed 5 s
// early: the log's entries left the receiver's window 5 s too soon, and
// the counter's last 2 s of hits fell into the window before; the
// receiver admitted them again.
func TestHandoffFromASenderBehindAdmitsNoMoreThanTheLimit(t *testing.T) {
	const (
		w     = 10 * time.Second
		limit = 10
	)
	for _, alg := range []limiter.Algorithm{limiter.SlidingWindowLog, limiter.SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			p := newPair(t, time.Second)
			p.a.offset = -5 * time.Second // the sender, behind
			start := p.now.Add(5 * time.Second)
			require.Zero(t, start.Add(p.a.offset).UnixMilli()%w.Milliseconds(), "the sender's window starts at start")
			key := p.keys("b", 1)[0]
			r := limiter.Request{Key: key, Limit: limit, Window: w, Algorithm: alg, Hits: 1}

			var admitted []time.Time // on the real clock
			for i := range limit {
				p.now = start.Add(time.Duration(i) * 700 * time.Millisecond)
				d, err := p.a.store.Check(p.now.Add(p.a.offset), r) // a's fallback decides, say
				require.NoError(t, err)
				require.True(t, d.Allowed)
				admitted = append(admitted, p.now)
			}
			p.now = start.Add(7 * time.Second)
			require.Zero(t, p.a.sender.Run(bg))

			for end := p.now.Add(25 * time.Second); p.now.Before(end); p.now = p.now.Add(100 * time.Millisecond) {
				res := p.b.svc.Check(bg, r)
				require.NoError(t, res.Err)
				require.Equal(t, "b", res.Owner)
				if res.Decision.Allowed {
					admitted = append(admitted, p.now)
				}
			}
			most, from := windowed.MostInAWindow(admitted, w, alg == limiter.SlidingWindowLog)
			assert.LessOrEqual(t, most, limit, "%d admitted in the window from %s (real clock), over the limit", most, from.Sub(start))
			assert.Greater(t, len(admitted), 2*limit, "the receiver admits again once the window has passed")
		})
	}
}
