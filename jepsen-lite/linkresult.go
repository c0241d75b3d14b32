package jepsenlite

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// LinkResult is how the cluster did over slow links: the clients' view
// (throughput, latency of checks sent to random nodes, from the moment the
// links are slow), the nodes' own forwarding counters over the whole run
// (their /metrics at the end less at the start), and the delayer's
// counters.
type LinkResult struct {
	// Answered checks per second over the run, against Offered (the
	// workload's closed-loop rate: throughput cannot exceed it).
	Throughput, Offered float64
	// Latency of the answered checks, as the clients saw it (checks and
	// acquisitions; not the releases of concurrency slots, which the
	// workload sends on top).
	P50, P99, Max time.Duration
	// Forward calls to owners, the checks they carried, those that
	// failed, and of those, the ones that took at least the largest
	// histogram bucket under ForwardTimeout (timed out, near enough).
	Forwards, Forwarded, ForwardErrors, ForwardTimeouts float64
	// Fallbacks are checks whose owner could not be reached (relayed,
	// answered by its heir, or by the fallback policy).
	Fallbacks      float64
	ForwardTimeout time.Duration
	Delayer        DelayerReport
	// P99Promised is the scenario's P99WithinForward; MaxP99 is then the
	// limit, its forward timeout plus P99Slack (0 when the nodes' flags
	// do not give the timeout: the promise cannot be checked, and fails).
	P99Promised bool
	MaxP99      time.Duration
}

// DelayerReport is what the delayer counted over a run: its hold queue's
// counters, and the errors of its netfilter queue (verdicts the kernel
// refused; overruns of the socket's buffer, ENOBUFS, each of which lost
// packets the delayer never saw), with the last one.
type DelayerReport struct {
	DelayStats
	Errors    int64
	LastError string
}

// ChecksPerForward is how many checks a forward call carried on average:
// batches grow with the round trip, as checks gather while one is out.
func (l *LinkResult) ChecksPerForward() float64 {
	if l.Forwards == 0 {
		return 0
	}
	return l.Forwarded / l.Forwards
}

// OverPromise says how the run broke the scenario's p99 promise, or "".
func (l *LinkResult) OverPromise() string {
	switch {
	case l == nil || !l.P99Promised:
		return ""
	case l.MaxP99 <= 0:
		return "p99 promised within the forward timeout, but the nodes' flags do not give it (--forward-timeout)"
	case l.P99 > l.MaxP99:
		return fmt.Sprintf("p99 of answered checks %s > the promised %s", l.P99.Round(time.Millisecond), l.MaxP99)
	}
	return ""
}

// linkResult measures a run over slow links from its history and the
// nodes' metrics before and after it.
func linkResult(sc Scenario, h History, offered float64, forwardTimeout time.Duration, before, after nodeMetrics, dl DelayerReport) *LinkResult {
	l := &LinkResult{Offered: offered, ForwardTimeout: forwardTimeout, Delayer: dl, P99Promised: sc.P99WithinForward}
	if sc.P99WithinForward && forwardTimeout > 0 {
		l.MaxP99 = forwardTimeout + sc.P99Slack
	}
	// The clients' numbers count from the moment the links are slow.
	var from time.Duration
	for _, ev := range h.Events {
		if ev.Fault {
			from = ev.End
			break
		}
	}
	// Checks only: releases are not offered (the workload sends them on
	// top of its rate), and the promise is about checks.
	var lat []time.Duration
	for _, op := range h.Ops {
		if op.Answered() && op.Invoke >= from && op.Kind != ReleaseOp {
			lat = append(lat, op.Latency())
		}
	}
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		l.P50, l.P99, l.Max = lat[n/2], lat[min(n-1, n*99/100)], lat[n-1]
	}
	if h.End > from {
		l.Throughput = float64(len(lat)) / (h.End - from).Seconds()
	}
	d := func(name string, labels ...string) float64 {
		return after.sum(name, labels...) - before.sum(name, labels...)
	}
	l.Forwards = d("peerlimit_forward_batch_size_count")
	l.Forwarded = d("peerlimit_forward_batch_size_sum")
	l.ForwardErrors = d("peerlimit_forward_duration_seconds_count", `result="error"`)
	le := after.largestBucketBelow("peerlimit_forward_duration_seconds_bucket", forwardTimeout)
	l.ForwardTimeouts = l.ForwardErrors - d("peerlimit_forward_duration_seconds_bucket", `result="error"`, `le="`+le+`"`)
	l.Fallbacks = d("peerlimit_owner_unreachable_total")
	return l
}

// nodeMetrics are samples of the nodes' /metrics, summed over the nodes:
// the sample's name with its labels, as exposed, to its value.
type nodeMetrics map[string]float64

// sum adds the samples of metric name whose labels contain every one of
// labels (`result="error"`).
func (m nodeMetrics) sum(name string, labels ...string) float64 {
	var s float64
	for k, v := range m {
		base, rest, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if ok {
			s += v
		}
	}
	return s
}

// largestBucketBelow is the le label of the histogram's largest bucket
// bound under d, as exposed ("0.2048").
func (m nodeMetrics) largestBucketBelow(name string, d time.Duration) string {
	best, bestS := -1.0, "0"
	for k := range m {
		base, rest, _ := strings.Cut(k, "{")
		_, le, ok := strings.Cut(rest, `le="`)
		if base != name || !ok {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		v, err := strconv.ParseFloat(le, 64)
		if err == nil && v < d.Seconds() && v > best {
			best, bestS = v, le
		}
	}
	return bestS
}

// scrapeNodes reads and sums the /metrics of every node in urls; a node
// that does not answer is left out (the report's numbers are then
// lower bounds).
func scrapeNodes(ctx context.Context, urls []string) nodeMetrics {
	m := nodeMetrics{}
	cl := &http.Client{Timeout: 2 * time.Second}
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			continue
		}
		resp, err := cl.Do(req)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "" || line[0] == '#' {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				continue
			}
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				m[line[:i]] += v
			}
		}
		resp.Body.Close()
	}
	return m
}

// flagDuration is the value of --name in args (the last one given), or
// def.
func flagDuration(args []string, name string, def time.Duration) time.Duration {
	out := def
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--"+name+"=")
		if !ok && a == "--"+name && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if d, err := time.ParseDuration(v); ok && err == nil {
			out = d
		}
	}
	return out
}

// writeLinkTable adds the slow links' measurements to the report, if any
// scenario had them.
func writeLinkTable(b *strings.Builder, results []*Result) {
	var rows []*Result
	for _, r := range results {
		if r.Skipped == "" && r.Link != nil {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## Slow links\n\n" +
		"| scenario | answered/s (offered) | p50 | p99 (promise) | max | forward calls | checks per call | failed calls | of them ≥ timeout | owner unreachable | delayer: held / lost / full / most queued | delayer errors |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	var lastErrs []string
	for _, r := range rows {
		l := r.Link
		fmt.Fprintf(b, "| %s | %.0f (%.0f) | %s | %s (%s) | %s | %.0f | %.2f | %.0f | %.0f (timeout %s) | %.0f | %d / %d / %d / %d | %d |\n",
			r.Scenario, l.Throughput, l.Offered, ms(l.P50), ms(l.P99), l.p99Promise(), ms(l.Max), l.Forwards, l.ChecksPerForward(),
			l.ForwardErrors, l.ForwardTimeouts, l.ForwardTimeout, l.Fallbacks,
			l.Delayer.Held, l.Delayer.Lost, l.Delayer.Full, l.Delayer.MaxQueued, l.Delayer.Errors)
		if l.Delayer.LastError != "" {
			lastErrs = append(lastErrs, fmt.Sprintf("- %s: %s\n", r.Scenario, l.Delayer.LastError))
		}
	}
	b.WriteString("\nLatency is the clients' (checks to random nodes, answered; releases left out); forward counters are the nodes' /metrics over the run, summed; " +
		"\"≥ timeout\" counts failed calls slower than the largest duration bucket under the forward timeout. " +
		"Delayer errors are verdicts the kernel refused and overruns of the queue's socket buffer (each lost packets the delayer never saw, uncounted).\n")
	if len(lastErrs) > 0 {
		b.WriteString("\nThe delayer's last error:\n\n" + strings.Join(lastErrs, ""))
	}
}

// p99Promise is the report's p99 promise: "≤ 500ms", or "–" for none.
func (l *LinkResult) p99Promise() string {
	switch {
	case !l.P99Promised:
		return "–"
	case l.MaxP99 <= 0:
		return "forward timeout unknown"
	}
	return "≤ " + l.MaxP99.String()
}
