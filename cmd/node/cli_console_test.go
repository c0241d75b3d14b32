package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/httpapi"
)

func TestCLITopAndInspect(t *testing.T) {
	c := policyCluster(t)
	n0 := c.Node(0)
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("login:%d", i); n0.Ring().Owner(k).ID == "node-1" {
			key = k
		}
	}
	addr := n0.GRPCAddr()
	for range 3 { // the policy allows 2 an hour
		cli(t, "check", "--addr", addr, "--policy", "login", key)
	}

	code, out, errOut := cli(t, "top", "--addr", c.Node(2).GRPCAddr(), "--n", "1")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "(3 of 3 members answered)")
	lines := strings.Split(out, "\n")
	require.GreaterOrEqual(t, len(lines), 5, out)
	assert.Equal(t, fmt.Sprintf("3       %q", key), lines[2], out)
	assert.Equal(t, fmt.Sprintf("1       %q", key), lines[4], out)

	code, out, errOut = cli(t, "inspect", "--addr", addr, "--policy", "login", key)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, fmt.Sprintf("%q: partition ", key))
	assert.Contains(t, out, "owner node-1, replica on node-")
	assert.Contains(t, out, "SLIDING_WINDOW_LOG, window 1h0m0s: count 2, empty in ")
	assert.Contains(t, out, ", next allowed in 59m")

	code, out, errOut = cli(t, "inspect", "--addr", addr, "--json", key)
	require.Equal(t, exitOK, code, errOut)
	var in httpapi.Inspect
	require.NoError(t, json.Unmarshal([]byte(out), &in))
	require.Len(t, in.Limits, 1)
	assert.EqualValues(t, 2, in.Limits[0].Count)
	assert.Len(t, in.Limits[0].Log.EntriesAgeMS, 2)

	code, out, _ = cli(t, "inspect", "--addr", addr, "never-seen")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "no state: nothing counts against this key now")

	for _, args := range [][]string{{"top", "extra"}, {"top", "--n", "0"}, {"inspect"}, {"inspect", "a", "b"}} {
		code, _, errOut := cli(t, args...)
		assert.Equal(t, exitUsage, code, "%q: %s", args, errOut)
	}
	code, _, errOut = cli(t, "inspect", "--addr", addr, "--limit", "1", "--hits", "2", key)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "hits")
}

// A log key's ages: equal ones once with their number, and a long log
// summarised in the middle, so that inspect of a key with 769 hits
// prints one short line.
func TestFormatAges(t *testing.T) {
	many := make([]int64, 0, 30)
	for i := range 30 {
		many = append(many, int64(30000-1000*i))
	}
	for _, tc := range []struct {
		name string
		ages []int64
		want string
	}{
		{"none", nil, ""},
		{"distinct", []int64{18100, 9600, 4200}, "18.1s 9.6s 4.2s"},
		{"equal ones grouped", append(append(slices.Repeat([]int64{5368}, 89), 4000), 4000, 10), "5.368s ×89 4s ×2 10ms"},
		{"a long log summarised", many,
			"30s 29s 28s 27s 26s 25s 24s 23s 22s 21s … 10 hits at 10 other ages … 10s 9s 8s 7s 6s 5s 4s 3s 2s 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, formatAges(tc.ages))
		})
	}
}
