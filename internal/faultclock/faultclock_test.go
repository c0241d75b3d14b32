package faultclock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/faultclock"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
)

func TestOffsetDriftAndStep(t *testing.T) {
	base := fakeclock.AtMilli(1_700_000_000_000)
	t0 := base.Now()
	now := faultclock.New(faultclock.Config{Offset: -2 * time.Second, Drift: 0.01, Step: 5 * time.Second, StepAfter: 30 * time.Second}, base.Now)

	assert.Equal(t, t0.Add(-2*time.Second), now(), "the offset from the start")
	base.Advance(10 * time.Second)
	assert.Equal(t, t0.Add(10*time.Second-2*time.Second+100*time.Millisecond), now(), "1 % fast: 100 ms gained in 10 s")
	base.Advance(20 * time.Second)
	assert.Equal(t, t0.Add(30*time.Second-2*time.Second+300*time.Millisecond+5*time.Second), now(), "stepped 5 s at 30 s")
}

func TestZeroConfigIsTheBaseClock(t *testing.T) {
	base := fakeclock.AtMilli(1_700_000_000_000)
	now := faultclock.New(faultclock.Config{}, base.Now)
	base.Advance(time.Hour)
	assert.Equal(t, base.Now(), now())
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
	} {
		err := tc.c.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.field)
	}
	require.NoError(t, faultclock.Config{Offset: time.Second, Drift: -0.01, Step: -5 * time.Second, StepAfter: time.Minute}.Validate())
}
