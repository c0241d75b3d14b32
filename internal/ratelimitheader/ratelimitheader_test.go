package ratelimitheader

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestString(t *testing.T) {
	s, err := String(`a "b" \c`)
	require.NoError(t, err)
	assert.Equal(t, `"a \"b\" \\c"`, s)
	_, err = String("é")
	assert.ErrorContains(t, err, "printable ASCII")
	_, err = String("a\nb")
	assert.Error(t, err)
}

func TestSanitize(t *testing.T) {
	assert.Equal(t, "plain", Sanitize("plain"))
	assert.Equal(t, "caf__x_", Sanitize("caf\xc3\xa9x\x7f"))
	s, err := String(Sanitize("a\x00\xffb"))
	require.NoError(t, err)
	assert.Equal(t, `"a__b"`, s)
}

func TestPolicyAndValue(t *testing.T) {
	assert.Equal(t, `"p";q=100;w=60`, Policy(`"p"`, 100, time.Minute))
	assert.Equal(t, `"p";q=5`, Policy(`"p"`, 5, 1500*time.Millisecond), "no sub-second windows in the draft")
	assert.Equal(t, `"p";r=0;t=3`, Value(`"p"`, -2, 3))
	assert.Equal(t, `"p";r=41;t=30`, Value(`"p"`, 41, 30))
}

func TestT(t *testing.T) {
	for _, c := range []struct {
		allowed              bool
		reset, retry, window time.Duration
		want                 int64
	}{
		{true, 30 * time.Second, 0, time.Minute, 30},
		{true, 1500 * time.Millisecond, 0, time.Minute, 2},
		{true, 90 * time.Second, 0, time.Minute, 60}, // capped at the window
		{true, 0, 0, time.Minute, 0},
		{true, 5 * time.Second, 0, 200 * time.Millisecond, 1}, // a window under 1s counts as 1s
		{false, time.Minute, 2100 * time.Millisecond, time.Minute, 3},
		{false, time.Minute, 0, time.Minute, 1}, // never 0 when denied
	} {
		assert.Equal(t, c.want, T(c.allowed, c.reset, c.retry, c.window), "%+v", c)
	}
	assert.Equal(t, int64(0), CeilSeconds(-time.Second))
	assert.Equal(t, int64(1), CeilSeconds(time.Nanosecond))
	assert.Equal(t, int64(1), CeilSeconds(time.Second))
}
