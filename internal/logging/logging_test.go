package logging

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// One line a second, however many goroutines ask at once.
func TestGateLetsOneLineASecondThrough(t *testing.T) {
	var g Gate
	t0 := time.Unix(1_700_000_000, 0)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if g.AllowAt(t0) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 1, allowed.Load(), "one line for the first second")
	assert.False(t, g.AllowAt(t0.Add(999*time.Millisecond)))
	assert.True(t, g.AllowAt(t0.Add(time.Second)), "the next second")
	assert.False(t, g.AllowAt(t0.Add(1500*time.Millisecond)))
}

func TestClip(t *testing.T) {
	assert.Equal(t, "short", Clip("short"))
	long := strings.Repeat("k", 100)
	assert.Equal(t, strings.Repeat("k", 64)+"…", Clip(long))
	assert.Equal(t, long, ClipWithin(long, 100))
	assert.Equal(t, strings.Repeat("k", 96)+"…", ClipWithin(long, 99), "the mark counts")
	assert.Equal(t, strings.Repeat("é", 48)+"…", ClipWithin(strings.Repeat("é", 50), 99), "cut at a character's start")
}
