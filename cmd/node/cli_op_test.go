package main

import (
	"encoding/json"
	"flag"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
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

// --burst is GCRA's, positive, and sent only when given; --algorithm
// takes the four names in any case.
func TestCLIBurstAndAlgorithmFlags(t *testing.T) {
	for _, c := range []struct {
		args  []string
		algo  pb.Algorithm
		burst *int64
	}{
		{[]string{"--algorithm", "gcra", "--burst", "50"}, pb.Algorithm_GCRA, proto.Int64(50)},
		{[]string{"--algorithm", "GCRA"}, pb.Algorithm_GCRA, nil},
		{[]string{"--algorithm", "Concurrency"}, pb.Algorithm_CONCURRENCY, nil},
		{[]string{"--algorithm", "sliding_window_log"}, pb.Algorithm_SLIDING_WINDOW_LOG, nil},
		{nil, pb.Algorithm_SLIDING_WINDOW_COUNTER, nil},
	} {
		var lf limitFlags
		fs := flag.NewFlagSet("check", flag.ContinueOnError)
		lf.register(fs)
		burst := fs.Int64("burst", 0, "")
		require.NoError(t, fs.Parse(append([]string{"--window", "1s"}, c.args...)))
		req, err := lf.request("k", 10)
		require.NoError(t, err, "%q", c.args)
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "burst" })
		req.Burst, err = burstFlag(given, *burst, req.Algorithm)
		require.NoError(t, err, "%q", c.args)
		assert.Equal(t, c.algo, req.Algorithm, "%q", c.args)
		assert.Equal(t, c.burst, req.Burst, "%q", c.args)
	}
}

// acquire prints the slot's token as reserve prints a reservation's, and
// a denied one exits 3.
func TestCLIAcquirePrints(t *testing.T) {
	var out strings.Builder
	printOp(&out, pb.Op_ACQUIRE, 1, &pb.CheckResponse{Allowed: true, Limit: 5, Remaining: 4, ExpiresInMs: 30000, Reservation: "tok", Owner: "n1"})
	assert.Equal(t, "acquired a slot: 4 of 5 free, frees itself in 30s, reservation tok; decided by n1\n", out.String())
	out.Reset()
	printOp(&out, pb.Op_ACQUIRE, 1, &pb.CheckResponse{Limit: 5, CurrentCount: 5, RetryAfterMs: 2000, Owner: "n1"})
	assert.Equal(t, "denied: retry after 2s (count 5 of 5); decided by n1\n", out.String())
}

// What a node refuses of GCRA and CONCURRENCY before any store decides:
// an error naming the field, exit 1.
func TestCLIGCRAAndConcurrencyRefusals(t *testing.T) {
	c := testcluster.New(t, 1, nil)
	addr := c.Node(0).GRPCAddr()
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"check", "--limit", "3", "--window", "1s", "--algorithm", "gcra", "--burst", "2", "--hits", "3", "k"}, "hits"},
		{[]string{"acquire", "--limit", "3", "--window", "1s", "k"}, "op"},
		{[]string{"reserve", "--limit", "3", "--window", "1s", "--algorithm", "concurrency", "k"}, "op"},
		{[]string{"release", "--limit", "3", "--window", "1s", "--algorithm", "concurrency", "k"}, ""},
	} {
		code, _, errOut := cli(t, append(tc.args, "--addr", addr)...)
		if tc.field == "" {
			assert.Equal(t, exitUsage, code, "%q: %s", tc.args, errOut) // no --reservation
			continue
		}
		assert.Equal(t, exitError, code, "%q: %s", tc.args, errOut)
		assert.Contains(t, errOut, "InvalidArgument: invalid "+tc.field, "%q", tc.args)
	}
}
