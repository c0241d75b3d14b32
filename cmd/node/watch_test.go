package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --watch-config is on by default and turned off by flag or environment;
// --envoy-rls-watch-root is checked against --envoy-rls-config and its
// error names both flags.
func TestWatchConfigFlags(t *testing.T) {
	none := func(string) string { return "" }
	o, err := parseFlags(onLoopback, none, io.Discard)
	require.NoError(t, err)
	assert.True(t, o.node.WatchConfig, "files are watched by default")
	assert.Empty(t, o.node.EnvoyRLSWatchRoot)

	o, err = parseFlags(onLoopback, func(k string) string { return map[string]string{"PEERLIMIT_WATCH_CONFIG": "false"}[k] }, io.Discard)
	require.NoError(t, err)
	assert.False(t, o.node.WatchConfig)
	o, err = parseFlags(append([]string{"--watch-config=false"}, onLoopback...), none, io.Discard)
	require.NoError(t, err)
	assert.False(t, o.node.WatchConfig)

	o, err = parseFlags(append([]string{"--envoy-rls-config", "/srv/runtime/current/ratelimit/config",
		"--envoy-rls-watch-root", "/srv/runtime/current"}, onLoopback...), none, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "/srv/runtime/current", o.node.EnvoyRLSWatchRoot)

	_, err = parseFlags(append([]string{"--envoy-rls-config", "/etc/rls", "--envoy-rls-watch-root", "/srv/runtime/current"}, onLoopback...),
		none, io.Discard)
	assert.ErrorContains(t, err, `EnvoyRLSWatchRoot (--envoy-rls-watch-root) must be EnvoyRLSConfig (--envoy-rls-config) or one of its ancestors, got "/srv/runtime/current"`)
}
