package jepsenlite

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The slow links' numbers come from the nodes' /metrics, summed over the
// nodes, less what they had at the start, and from the checks answered
// once the links were slow.
func TestLinkResultFromMetricsAndHistory(t *testing.T) {
	page := func(calls, checks, errs, fastErrs int) string {
		return fmt.Sprintf(`# HELP peerlimit_forward_batch_size Checks carried by each Forward call.
peerlimit_forward_batch_size_sum %d
peerlimit_forward_batch_size_count %d
peerlimit_forward_duration_seconds_bucket{result="error",le="0.1024"} %d
peerlimit_forward_duration_seconds_bucket{result="error",le="0.2048"} %d
peerlimit_forward_duration_seconds_bucket{result="error",le="0.4096"} %d
peerlimit_forward_duration_seconds_count{result="error"} %d
peerlimit_forward_duration_seconds_count{result="ok"} 999
peerlimit_owner_unreachable_total{policy="relay"} %d
peerlimit_owner_unreachable_total{policy="local"} 1
`, checks, calls, fastErrs, fastErrs, errs, errs, errs)
	}
	var pages []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, pages[0])
		pages = pages[1:]
	}))
	defer srv.Close()
	urls := []string{srv.URL, srv.URL} // two nodes
	pages = []string{page(10, 10, 0, 0), page(0, 0, 0, 0)}
	before := scrapeNodes(t.Context(), urls)
	pages = []string{page(110, 310, 5, 1), page(100, 200, 2, 0)}
	after := scrapeNodes(t.Context(), urls)

	ms := time.Millisecond
	h := History{End: 10 * time.Second, Events: []Event{{Name: "start"}, {Name: "slow", Begin: 2 * time.Second, End: 2 * time.Second, Fault: true}},
		Ops: []Op{
			{Invoke: time.Second, Complete: time.Second + 900*ms, Outcome: Allowed}, // before the links were slow
			{Invoke: 3 * time.Second, Complete: 3*time.Second + 40*ms, Outcome: Allowed},
			{Invoke: 4 * time.Second, Complete: 4*time.Second + 60*ms, Outcome: Denied},
			{Invoke: 5 * time.Second, Complete: 6 * time.Second, Outcome: Timeout},
			// A release is not a check: neither in the latency nor in
			// the throughput.
			{Invoke: 7 * time.Second, Complete: 7*time.Second + 900*ms, Outcome: Allowed, Kind: ReleaseOp},
		}}
	args := []string{"--gossip-profile", "local", "--forward-timeout", "250ms"}
	dl := DelayerReport{DelayStats: DelayStats{Held: 7}, Errors: 2, LastError: "nfqueue read: no buffer space available"}
	l := linkResult(Scenario{}, h, 300, flagDuration(args, "forward-timeout", 0), before, after, dl)

	assert.Equal(t, 250*ms, l.ForwardTimeout)
	assert.Equal(t, 200.0, l.Forwards)
	assert.Equal(t, 500.0, l.Forwarded)
	assert.Equal(t, 2.5, l.ChecksPerForward())
	assert.Equal(t, 7.0, l.ForwardErrors)
	assert.Equal(t, 6.0, l.ForwardTimeouts, "errors slower than the 0.2048 s bucket, the largest under 250 ms")
	assert.Equal(t, 7.0, l.Fallbacks, "relayed; the local ones were there before")
	assert.Equal(t, 0.25, l.Throughput, "2 answered in the 8 s since the links slowed")
	assert.Equal(t, 60*ms, l.P99)
	assert.Equal(t, 60*ms, l.Max, "the release's 900 ms is left out")
	assert.Equal(t, int64(7), l.Delayer.Held)
	assert.Equal(t, int64(2), l.Delayer.Errors)
	assert.Empty(t, l.OverPromise(), "no promise")
	var none *LinkResult
	assert.Empty(t, none.OverPromise())

	report := &Result{Scenario: "latency", Link: l}
	var b strings.Builder
	writeLinkTable(&b, []*Result{report})
	assert.Contains(t, b.String(), "| 7 / 0 / 0 / 0 | 2 |", "held / lost / full / most queued, then the errors")
	assert.Contains(t, b.String(), "- latency: nfqueue read: no buffer space available")
}

// The p99 promise is the forward timeout the nodes run with (the last
// --forward-timeout, so -node-args moves it) plus the scenario's slack.
func TestLinkResultP99PromiseFollowsTheForwardTimeout(t *testing.T) {
	ms := time.Millisecond
	h := History{End: 10 * time.Second, Events: []Event{{Name: "slow", Fault: true}}}
	for range 198 {
		h.Ops = append(h.Ops, Op{Invoke: time.Second, Complete: time.Second + 30*ms, Outcome: Allowed})
	}
	// p99 of 200 is the 199th fastest; the slowest is above it.
	h.Ops = append(h.Ops, Op{Invoke: time.Second, Complete: time.Second + 60*ms, Outcome: Allowed},
		Op{Invoke: time.Second, Complete: time.Second + 900*ms, Outcome: Allowed})
	result := func(sc Scenario, args ...string) *LinkResult {
		return linkResult(sc, h, 300, flagDuration(args, "forward-timeout", 0), nodeMetrics{}, nodeMetrics{}, DelayerReport{})
	}
	within := Scenario{P99WithinForward: true}

	l := result(within, "--forward-timeout", "250ms")
	assert.Equal(t, 60*ms, l.P99)
	assert.Equal(t, 250*ms, l.MaxP99)
	assert.Empty(t, l.OverPromise())

	l = result(within, "--forward-timeout", "250ms", "--forward-timeout=50ms")
	assert.Equal(t, 50*ms, l.MaxP99, "-node-args' timeout, given last, is the promise")
	assert.Equal(t, "p99 of answered checks 60ms > the promised 50ms", l.OverPromise())

	withSlack := within
	withSlack.P99Slack = 20 * ms
	l = result(withSlack, "--forward-timeout=50ms")
	assert.Equal(t, 70*ms, l.MaxP99, "the timeout and one retransmission")
	assert.Empty(t, l.OverPromise())

	l = result(within, "--gossip-profile", "local")
	assert.Contains(t, l.OverPromise(), "do not give it", "a promise that cannot be checked fails")
	assert.Empty(t, result(within.WithoutPromises(), "--gossip-profile", "local").OverPromise(), "-promises=false")
}

// -promises=false holds a scenario to its bounds only; its promised
// worst is kept for the report to state.
func TestWithoutPromises(t *testing.T) {
	sc := Scenario{Name: "x", MaxWorst: 1.2, MaxDegraded: 0.02, P99WithinForward: true, P99Slack: time.Second}
	assert.Equal(t, Scenario{Name: "x", ReportedWorst: 1.2}, sc.WithoutPromises())
}

func TestFlagDuration(t *testing.T) {
	assert.Equal(t, time.Second, flagDuration([]string{"--forward-timeout", "250ms", "--forward-timeout=1s"}, "forward-timeout", 0), "the last one wins")
	assert.Equal(t, 3*time.Second, flagDuration([]string{"--other", "1s"}, "forward-timeout", 3*time.Second))
}
