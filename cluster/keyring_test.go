package cluster

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
)

func key(c byte) []byte { return bytes.Repeat([]byte{c}, 16) }

func startKeyed(t *testing.T, keys ...[]byte) *Cluster {
	t.Helper()
	c, err := Start(Config{ID: "k", BindAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:9000", Profile: ProfileLocal, Keys: keys,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown() })
	return c
}

func TestSetKeysMakesTheKeyringExactlyTheList(t *testing.T) {
	c := startKeyed(t, key('a'))
	for _, want := range [][][]byte{
		{key('a'), key('b')},           // add: primary unchanged
		{key('b'), key('a')},           // switch primary
		{key('b')},                     // remove the old
		{key('b'), key('c'), key('d')}, // add two
		{key('b'), key('d')},           // remove one in the middle
		{key('d'), key('e'), key('b')}, // several moves at once
	} {
		require.NoError(t, c.SetKeys(want))
		assert.Equal(t, want[0], c.Keys()[0], "the first key is the primary")
		assert.ElementsMatch(t, want, c.Keys())
	}
}

func TestSetKeysErrors(t *testing.T) {
	c := startKeyed(t, key('a'))
	assert.ErrorContains(t, c.SetKeys(nil), "cannot be turned off")
	assert.ErrorContains(t, c.SetKeys([][]byte{key('a'), []byte("short")}), "key 2 must be 16, 24 or 32 bytes, got 5")
	assert.Equal(t, [][]byte{key('a')}, c.Keys(), "a refused list changes nothing")

	plain := startKeyed(t)
	assert.ErrorContains(t, plain.SetKeys([][]byte{key('a')}), "cannot be turned on")
	assert.Nil(t, plain.Keys())

	_, err := Start(Config{ID: "x", BindAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:9000", SecretKey: key('a'), Keys: [][]byte{key('b')}})
	assert.ErrorContains(t, err, "SecretKey or Keys, not both")
	_, err = Start(Config{ID: "x", BindAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:9000", Keys: [][]byte{[]byte("short")}})
	assert.ErrorContains(t, err, "Keys[0] must be 16, 24 or 32 bytes")
}
