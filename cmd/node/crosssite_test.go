package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --allowed-origins is a comma-separated list, empty by default, and a
// value that is no origin stops the node naming the flag.
func TestAllowedOriginsFlag(t *testing.T) {
	o, err := parseFlags([]string{"--grpc-addr", "127.0.0.1:0"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, o.node.HTTP.AllowedOrigins)

	env := map[string]string{"PEERLIMIT_ALLOWED_ORIGINS": "https://env.example"}
	o, err = parseFlags([]string{"--grpc-addr", "127.0.0.1:0", "--allowed-origins", "https://a.example, http://localhost:3000,"},
		func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"https://a.example", "http://localhost:3000"}, o.node.HTTP.AllowedOrigins)

	var stderr bytes.Buffer
	code := run([]string{"--grpc-addr", "127.0.0.1:0", "--allowed-origins", "https://a.example,a.example"}, func(string) string { return "" }, &stderr)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr.String(), "HTTP.AllowedOrigins[1] (--allowed-origins)")
}
