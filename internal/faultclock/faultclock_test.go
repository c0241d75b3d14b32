package faultclock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/faultclock"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
)

// machine is a wallclock.Machine over a fake clock: wall and monotonic
// move together.
type machine struct{ c *fakeclock.Clock }

func (m machine) Now() (time.Time, time.Duration) {
	now := m.c.Now()
	return now, time.Duration(now.UnixNano())
}

func TestOffsetDriftAndStep(t *testing.T) {
	base := fakeclock.AtMilli(1_700_000_000_000)
	t0, mono0 := machine{base}.Now()
	m := faultclock.New(faultclock.Config{Offset: -2 * time.Second, Drift: 0.01, Step: 5 * time.Second, StepAfter: 30 * time.Second}, machine{base})

	wall, mono := m.Now()
	assert.Equal(t, t0.Add(-2*time.Second), wall, "the offset from the start")
	assert.Equal(t, mono0, mono)
	base.Advance(10 * time.Second)
	wall, mono = m.Now()
	assert.Equal(t, t0.Add(10*time.Second-2*time.Second+100*time.Millisecond), wall, "1 % fast: 100 ms gained in 10 s")
	assert.Equal(t, mono0+10*time.Second+100*time.Millisecond, mono, "the monotonic clock drifts with it")
	base.Advance(20 * time.Second)
	wall, mono = m.Now()
	assert.Equal(t, t0.Add(30*time.Second-2*time.Second+300*time.Millisecond+5*time.Second), wall, "stepped 5 s at 30 s")
	assert.Equal(t, mono0+30*time.Second+300*time.Millisecond, mono, "a step moves the wall clock alone")
}

func TestZeroConfigIsTheBaseMachine(t *testing.T) {
	base := machine{fakeclock.AtMilli(1_700_000_000_000)}
	assert.Equal(t, base, faultclock.New(faultclock.Config{}, base))
	assert.False(t, faultclock.Config{}.Enabled())
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		c     faultclock.Config
		field string
	}{
		{faultclock.Config{Drift: 0.6}, "Drift"},
		{faultclock.Config{StepAfter: -time.Second}, "StepAfter"},
		{faultclock.Config{Step: time.Second}, "StepAfter"},
		{faultclock.Config{StepAfter: time.Second}, "StepAfter"},
		{faultclock.Config{Offset: -1000000 * time.Hour}, "Offset"},
		{faultclock.Config{Offset: 25 * time.Hour}, "Offset"},
		{faultclock.Config{Step: -25 * time.Hour, StepAfter: time.Second}, "Step"},
	} {
		err := tc.c.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.field)
	}
	require.NoError(t, faultclock.Config{Offset: time.Second, Drift: -0.01, Step: -5 * time.Second, StepAfter: time.Minute}.Validate())
	require.NoError(t, faultclock.Config{Offset: -faultclock.MaxShift, Step: faultclock.MaxShift, StepAfter: time.Minute}.Validate())
}

func TestKinds(t *testing.T) {
	assert.Empty(t, faultclock.Config{}.Kinds())
	assert.Equal(t, []string{"clock_offset", "clock_drift", "clock_step"},
		faultclock.Config{Offset: time.Second, Drift: 0.01, Step: time.Second, StepAfter: time.Second}.Kinds())
}
