package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
)

func TestCLIReserveSettleReleaseRefundCharge(t *testing.T) {
	c := testcluster.New(t, 2, nil)
	addr := c.Node(0).GRPCAddr()
	owner := c.Node(0).Ring().Owner("user:7").ID
	lim := []string{"--addr", addr, "--limit", "10", "--window", "1h", "--algorithm", "SLIDING_WINDOW_LOG", "user:7"}
	run := func(cmd string, args ...string) (int, string, string) {
		t.Helper()
		return cli(t, append(append([]string{cmd}, args...), lim...)...)
	}

	code, out, errOut := run("reserve", "--hits", "6", "--ttl", "30s", "--json")
	require.Equal(t, exitOK, code, errOut)
	var resv httpapi.CheckResponse
	require.NoError(t, json.Unmarshal([]byte(out), &resv))
	assert.True(t, resv.Allowed)
	assert.EqualValues(t, 4, resv.Remaining)
	assert.NotEmpty(t, resv.Reservation)
	assert.InDelta(t, 30000, resv.ExpiresInMS, 1000)

	code, out, _ = run("reserve", "--hits", "6")
	assert.Equal(t, exitDenied, code)
	assert.Regexp(t, `^denied: retry after \S+ \(count 6 of 10\); decided by `+owner+"\n$", out)

	code, out, errOut = run("settle", "--reservation", resv.Reservation, "--hits", "2")
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `^settled \(SETTLED_NOW\): refunded 4, over the limit by 0; allowed: 8 of 10 remaining, resets in \S+; decided by `+owner+"\n$", out)
	code, out, _ = run("settle", "--reservation", resv.Reservation, "--hits", "2")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, out, "settled (SETTLED_BEFORE): refunded 4,", "a retry counts once")

	code, out, errOut = run("reserve", "--hits", "3")
	require.Equal(t, exitOK, code, errOut)
	m := regexp.MustCompile(`^reserved 3: 5 of 10 remaining, expires in 1m0s, reservation (\S+); decided by ` + owner + "\n$").FindStringSubmatch(out)
	require.NotNil(t, m, out)
	code, out, errOut = run("release", "--reservation", m[1], "--json")
	require.Equal(t, exitOK, code, errOut)
	var rel httpapi.CheckResponse
	require.NoError(t, json.Unmarshal([]byte(out), &rel))
	assert.EqualValues(t, 3, rel.Refunded)
	assert.Equal(t, "SETTLED_NOW", rel.Settled)

	// A release after the settle releases nothing, and says so; a settle
	// at another cost than the first is refused with the first's numbers.
	code, out, _ = run("release", "--reservation", resv.Reservation)
	assert.Equal(t, exitClosed, code)
	assert.Regexp(t, `^not released: the reservation was already settled or released \(its first answer refunded 4, over the limit by 0\); `, out)
	code, _, errOut = run("settle", "--reservation", resv.Reservation, "--hits", "5")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "FailedPrecondition: conflicting hits: this reservation was settled before at a cost of 2 (refunded 4, over 0)")

	// Debt is counted, not denied: exit 0.
	code, out, errOut = run("charge", "--hits", "12")
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `^charged 12, over the limit by 4; in debt: the next hit waits \S+ \(limit 10\); decided by `+owner+"\n$", out)
	code, _, _ = run("check")
	assert.Equal(t, exitDenied, code)
	code, out, errOut = run("refund", "--hits", "100")
	require.Equal(t, exitOK, code, errOut)
	assert.Regexp(t, `^refunded 14 of 100; allowed: 10 of 10 remaining`, out)

	// Usage errors, and the node's refusals.
	for _, args := range [][]string{
		{"settle", "--hits", "1"},                        // no token
		{"settle", "--reservation", "x"},                 // no cost
		{"release", "--reservation", "x", "--hits", "1"}, // release takes no hits
		{"reserve", "--ttl", "1500us"},
	} {
		code, _, errOut = run(args[0], args[1:]...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
	code, _, errOut = run("settle", "--reservation", "not-a-token", "--hits", "1")
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "peerlimit-node settle: InvalidArgument: invalid reservation:")
}
