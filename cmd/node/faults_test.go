package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Absurd fault-injection flags stop the node naming the flag (issue 38,
// item 7); sane ones reach the node as the faults it shows.
func TestAbsurdFaultFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--fault-clock-offset", "-1000000h"}, "--fault-clock-offset must be within ±24h0m0s, got -1000000h0m0s"},
		{[]string{"--fault-clock-offset", "25h"}, "--fault-clock-offset must be within ±24h0m0s"},
		{[]string{"--fault-clock-step", "-48h", "--fault-clock-step-after", "1s"}, "--fault-clock-step must be within ±24h0m0s"},
		{[]string{"--fault-clock-step-after", "5s"}, "--fault-clock-step-after is set without --fault-clock-step"},
		{[]string{"--fault-clock-step", "5s"}, "--fault-clock-step-after must be set with --fault-clock-step"},
		{[]string{"--fault-clock-drift", "2"}, "--fault-clock-drift must be within ±0.5"},
	} {
		var stderr bytes.Buffer
		code := run(append([]string{"--grpc-addr", "127.0.0.1:0"}, c.args...), func(string) string { return "" }, &stderr)
		assert.Equal(t, 2, code, "%v", c.args)
		assert.Contains(t, stderr.String(), c.want, "%v", c.args)
	}

	o, err := parseFlags([]string{"--grpc-addr", "127.0.0.1:0", "--fault-clock-offset", "-2s", "--fault-clock-drift", "0.01"},
		func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"clock_offset", "clock_drift"}, o.node.Faults)

	o, err = parseFlags([]string{"--grpc-addr", "127.0.0.1:0"}, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Empty(t, o.node.Faults)
}
