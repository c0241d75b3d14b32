package fakeclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestClockMovesOnlyWhenMoved(t *testing.T) {
	c := AtMilli(1_700_000_000_000)
	assert.Equal(t, time.UnixMilli(1_700_000_000_000), c.Now())
	assert.Equal(t, c.Now(), c.Now(), "it stands still")
	c.Advance(1500 * time.Millisecond)
	assert.Equal(t, int64(1_700_000_001_500), c.Now().UnixMilli())
	c.Advance(-time.Second)
	assert.Equal(t, int64(1_700_000_000_500), c.Now().UnixMilli(), "and back, when told")
	c.Set(time.Unix(5, 0))
	assert.Equal(t, time.Unix(5, 0), c.Now())
}
