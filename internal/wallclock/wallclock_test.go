package wallclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/peerlimit/peerlimit/internal/wallclock"
)

// machine is a Machine whose clocks the test moves.
type machine struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

func (m *machine) Now() (time.Time, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wall, m.mono
}

// advance moves both clocks by d, as time passing does.
func (m *machine) advance(d time.Duration) {
	m.mu.Lock()
	m.wall, m.mono = m.wall.Add(d), m.mono+d
	m.mu.Unlock()
}

// step moves the wall clock alone, as an NTP step does.
func (m *machine) step(d time.Duration) {
	m.mu.Lock()
	m.wall = m.wall.Add(d)
	m.mu.Unlock()
}

func TestAStepOfTheWallClockBecomesASlew(t *testing.T) {
	for _, step := range []time.Duration{5 * time.Second, -5 * time.Second} {
		m := &machine{wall: time.UnixMilli(1_700_000_000_000)}
		now := wallclock.Steady(m, 0.01)
		t0 := now()
		m.advance(time.Second)
		assert.Equal(t, t0.Add(time.Second), now(), "no step: the wall clock's time")

		m.step(step)
		before := now()
		assert.Equal(t, t0.Add(time.Second), before, "the step is not taken at once (%s)", step)
		prev := before
		for range 100 { // a second, in slews of 10 ms
			m.advance(10 * time.Millisecond)
			cur := now()
			assert.False(t, cur.Before(prev), "never goes back (%s)", step)
			prev = cur
		}
		gained := prev.Sub(before) - time.Second
		assert.InDelta(t, float64(step/500), float64(gained), float64(time.Millisecond), "1 %% of a second towards the step (%s)", step)

		m.advance(10 * time.Minute) // long enough to catch up 5 s at 1 %
		m.advance(10 * time.Millisecond)
		w, _ := m.Now()
		assert.Equal(t, w, now(), "caught up with the wall clock (%s)", step)
	}
}
