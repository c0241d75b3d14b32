package jepsenlite

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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
		}}
	args := []string{"--gossip-profile", "local", "--forward-timeout", "250ms"}
	l := linkResult(Scenario{MaxP99: 50 * ms}, h, 300, flagDuration(args, "forward-timeout", 0), before, after, DelayStats{Held: 7})

	assert.Equal(t, 250*ms, l.ForwardTimeout)
	assert.Equal(t, 200.0, l.Forwards)
	assert.Equal(t, 500.0, l.Forwarded)
	assert.Equal(t, 2.5, l.ChecksPerForward())
	assert.Equal(t, 7.0, l.ForwardErrors)
	assert.Equal(t, 6.0, l.ForwardTimeouts, "errors slower than the 0.2048 s bucket, the largest under 250 ms")
	assert.Equal(t, 7.0, l.Fallbacks, "relayed; the local ones were there before")
	assert.Equal(t, 0.25, l.Throughput, "2 answered in the 8 s since the links slowed")
	assert.Equal(t, 60*ms, l.P99)
	assert.Equal(t, int64(7), l.Delayer.Held)
	assert.Contains(t, l.OverPromise(), "p99 of answered checks 60ms > the promised 50ms")
	var none *LinkResult
	assert.Empty(t, none.OverPromise())
}

func TestFlagDuration(t *testing.T) {
	assert.Equal(t, time.Second, flagDuration([]string{"--forward-timeout", "250ms", "--forward-timeout=1s"}, "forward-timeout", 0), "the last one wins")
	assert.Equal(t, 3*time.Second, flagDuration([]string{"--other", "1s"}, "forward-timeout", 3*time.Second))
}
