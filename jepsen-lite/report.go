package jepsenlite

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WriteReport writes report.md and one SVG chart per scenario to dir.
// dockerProject is the compose project of docker mode, "" for node
// processes (Local).
func WriteReport(dir string, p Profile, results []*Result, command, dockerProject string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	writeSummary(&b, p, results, command, dockerProject)
	writeLinkTable(&b, results)
	for _, r := range results {
		if r.Skipped != "" {
			continue
		}
		writeScenario(&b, r)
		if err := writeChartFile(filepath.Join(dir, r.Scenario+".svg"), r); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// writeSummary writes the report's heading, how to reproduce it, the
// workload, and one line per scenario.
func writeSummary(b *strings.Builder, p Profile, results []*Result, command, dockerProject string) {
	fmt.Fprintf(b, "# jepsen-lite report (%s profile)\n\n", p.Name)
	nodes := "Each scenario starts a fresh cluster of real node processes on their own loopback addresses."
	if dockerProject != "" {
		nodes = fmt.Sprintf("Each scenario runs on the containers of compose project %s, its services n1, n2, n3 first brought back to running, unpaused and connected.", dockerProject)
	}
	fmt.Fprintf(b, "Reproduce: `%s`. %s "+
		"%d keys (%d per algorithm), limit %d per %s, offered at %.1f× the limit's rate by %d clients to random nodes; client deadline %s. "+
		"%d GCRA keys (%d per %s, burst %d; the last offered %d× as much) and %d concurrency keys (%d slots, freed by a release after %s–%s or, one in %d never released, after %s), offered the same per key.\n\n",
		command, nodes, 2*p.KeysPerAlgorithm, p.KeysPerAlgorithm, p.Limit, p.Window, p.Load, p.Workers, p.ClientTimeout,
		p.GCRAKeys, gcraLimit, gcraWindow, gcraBurst, hotWeight, p.ConcurrencyKeys, concurrencyLimit, HoldMin, HoldMax, AbandonEvery, concurrencyWindow)
	b.WriteString("| scenario | checks | answered | ≤ 100 ms | to up nodes: answered | degraded | log worst (bound) | counter fixed worst | counter rolling worst | calendar worst | gcra worst | concurrency worst | excess log / counter / calendar / gcra / concurrency | converged after | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(b, "| %s | – | – | – | – | – | – | – | – | – | – | – | – | – | skipped: %s |\n", r.Scenario, r.Skipped)
			continue
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %.2f× | %.2f× | %.2f× | %s | %s | %s | %d / %d / %d / %d / %d | %s | %s |\n",
			r.Scenario, r.All.Ops, pct(r.All.AnsweredShare()), pct(r.All.FastShare()), pct(r.Healthy.AnsweredShare()),
			pct(share(r.All.Degraded, r.All.Ops)), r.Log.Worst, r.CounterFixed.Worst, r.CounterSliding.Worst,
			worstOf(r.Calendar), worstOf(r.GCRA), worstOf(r.Concurrency),
			r.Log.Excess, r.CounterFixed.Excess, r.Calendar.Excess, r.GCRA.Excess, r.Concurrency.Excess, convergedList(r), verdict(r))
	}
	b.WriteString("\nWorst is allowed ÷ limit in the worst window of any key (sliding windows for the log, the counter's fixed windows, and rolling windows). " +
		"A window's bound is limit × deciders (1 when calm, every node while a fault is being detected, the step's number after) — ×2 for the counter's rolling windows; " +
		"a calendar key's window is its period (a day in its zone), with the same bound. " +
		"A GCRA key is checked over every interval between two admissions, bound (burst + rate × the interval) × deciders, its worst allowed ÷ one decider's bound; " +
		"a concurrency key at every instant, the slots certainly held then, bound limit × deciders. " +
		"Only checks certainly decided inside a window count; see docs/chaos.md.\n")
}

// writeScenario writes one scenario's section: its steps, its answers,
// each kind of key's worst window, and what it violated.
func writeScenario(b *strings.Builder, r *Result) {
	fmt.Fprintf(b, "\n## %s\n\n%s.\n\n![admitted rate over time](%s.svg)\n\n", r.Scenario, r.About, r.Scenario)
	if r.Defect != "" {
		fmt.Fprintf(b, "Known defect of the node, not fixed yet (docs/chaos.md): %s.\n\n", r.Defect)
	}
	writePromise(b, r)
	b.WriteString("| step | at | took | converged after |\n|---|---|---|---|\n")
	for _, ev := range r.Events {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(ev.Name), fmtDur(ev.Begin), fmtDur(ev.End-ev.Begin), convergedText(ev))
	}
	fmt.Fprintf(b, "\nAll checks: %d, answered %s (%s within 100 ms), %d timeouts, %d errors, %d degraded answers (%d of them more than %s after the last convergence). "+
		"To nodes that were up: %d, answered %s (%s within 100 ms).\n\n",
		r.All.Ops, pct(r.All.AnsweredShare()), pct(r.All.FastShare()), r.All.Timeouts, r.All.Errors, r.All.Degraded, r.Unsettled, Settle,
		r.Healthy.Ops, pct(r.Healthy.AnsweredShare()), pct(r.Healthy.FastShare()))
	b.WriteString("| windows | checked | worst | worst when calm | excess (calm) | bound raised by fallback | violations |\n|---|---|---|---|---|---|---|\n")
	for _, row := range []struct {
		name string
		a    Admission
	}{{"log, sliding", r.Log}, {"counter, fixed", r.CounterFixed}, {"counter, rolling", r.CounterSliding}, {"calendar periods", r.Calendar},
		{"gcra intervals", r.GCRA}, {"concurrency, in flight", r.Concurrency}} {
		if row.a.Windows == 0 && row.name != "log, sliding" && !strings.HasPrefix(row.name, "counter") {
			continue // no such key in this scenario
		}
		fmt.Fprintf(b, "| %s | %d | %.2f× (%s at %s) | %.2f× | %d (%d) | %d | %d |\n", row.name, row.a.Windows, row.a.Worst,
			row.a.WorstKey, fmtDur(row.a.WorstAt), row.a.WorstCalm, row.a.Excess, row.a.ExcessCalm, row.a.Raised, len(row.a.Violations))
	}
	for _, v := range r.Violations() {
		fmt.Fprintf(b, "\n- VIOLATION %s", v)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(b, "\n- ERROR %s", e)
	}
	b.WriteString("\n")
}

// writePromise states what the run was held to beyond the checker's
// bounds (Scenario.MaxWorst, MaxDegraded), and the allowance of a step
// that kills nodes with their data directories (Step.Loses): a report
// says what it promised whether or not the run kept it.
func writePromise(b *strings.Builder, r *Result) {
	switch {
	case r.ReportedWorst > 0:
		fmt.Fprintf(b, "Promise: worst ≤ %.2f× the limit, reported and not held in this run (-promises=false)", r.ReportedWorst)
	case r.MaxWorst > 0:
		fmt.Fprintf(b, "Promise: worst ≤ %.2f× the limit in every log window, fixed counter window and calendar period "+
			"(every admission counted), GCRA interval (of one decider's bound) and concurrency instant, whatever the fault", r.MaxWorst)
	default:
		b.WriteString("Promise: none beyond the checker's bounds (limit × deciders; over one decider's limit only if marked degraded)")
	}
	if r.MaxDegraded > 0 {
		fmt.Fprintf(b, "; at most %.2f %% of answers degraded", 100*r.MaxDegraded)
	}
	b.WriteString(".")
	for _, ev := range r.Events {
		if ev.Loses > 0 {
			fmt.Fprintf(b, " Allowance: %q kills nodes with their data directories, which may lose what they counted in the %s before it "+
				"(two --replication-interval rounds: a hit counted just after a round's take waits a full interval for the next round's write; docs/operations.md, \"Persistence\"); "+
				"a calendar period may hold the admissions decided then over its bound, unmarked: %d in this run.",
				ev.Name, fmtDur(ev.Loses), r.Calendar.Allowance)
		}
	}
	b.WriteString("\n\n")
}

// writeChartFile writes r's chart to path.
func writeChartFile(path string, r *Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteChart(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func verdict(r *Result) string {
	switch {
	case len(r.Violations()) > 0:
		return fmt.Sprintf("**%d violations**", len(r.Violations()))
	case r.OverPromise() != "":
		return "**" + r.OverPromise() + "**"
	case len(r.Errors) > 0:
		return "**step failed**"
	case r.Unsettled > 0:
		return fmt.Sprintf("**%d degraded after settling**", r.Unsettled)
	default:
		return "within bounds"
	}
}

// worstOf is a kind of key's worst, or – without any such key.
func worstOf(a Admission) string {
	if a.Windows == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a.Worst)
}

func convergedList(r *Result) string {
	var parts []string
	for _, ev := range r.Events[1:] {
		parts = append(parts, convergedText(ev))
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

func convergedText(ev EventResult) string {
	if d := ev.ConvergedAfter(); d >= 0 {
		return fmtDur(d)
	}
	return "not converged"
}

// cell escapes a table cell's pipes.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func pct(f float64) string { return fmt.Sprintf("%.2f %%", 100*f) }

func fmtDur(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// WriteChart draws admitted checks over time relative to the limits (1.0:
// every key exactly at its limit), for each algorithm, with faults shaded
// and steps marked.
func WriteChart(w io.Writer, r *Result) error {
	const (
		W, H          = 900, 300
		left, right   = 50, 20
		top, bottom   = 30, 40
		plotW, plotH  = W - left - right, H - top - bottom
		colorCounter  = "#1f77b4"
		colorLog      = "#d62728"
		colorFault    = "#fbe3e3"
		colorTransit  = "#fff1c9"
		colorGridLine = "#dddddd"
	)
	ymax := 2.0
	for _, s := range [][]float64{r.SeriesCounter, r.SeriesLog} {
		for _, v := range s {
			ymax = math.Max(ymax, v)
		}
	}
	ymax = math.Ceil(ymax)
	end := r.Duration.Seconds()
	x := func(t time.Duration) float64 { return left + plotW*t.Seconds()/end }
	y := func(v float64) float64 { return top + plotH*(1-v/ymax) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">%s: admitted in the last window ÷ limit, mean of the keys</text>`+"\n", left, r.Scenario)
	// Faulted stretches, then the transients inside them.
	faultFrom := time.Duration(-1)
	for _, ev := range r.Events {
		if ev.Fault && faultFrom < 0 {
			faultFrom = ev.Begin
		}
		if !ev.Fault && faultFrom >= 0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x(faultFrom), top, x(ev.Begin)-x(faultFrom), plotH, colorFault)
			faultFrom = -1
		}
	}
	if faultFrom >= 0 {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x(faultFrom), top, x(r.Duration)-x(faultFrom), plotH, colorFault)
	}
	for _, p := range r.Phases {
		if p.Kind == "transient" {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x(p.From), top, math.Max(x(p.To)-x(p.From), 1), plotH, colorTransit)
		}
	}
	for v := 0.0; v <= ymax; v++ {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/><text x="%d" y="%.1f" text-anchor="end">%.0f×</text>`+"\n",
			left, left+plotW, y(v), y(v), colorGridLine, left-6, y(v)+4, v)
	}
	for s := 0.0; s <= end; s += 5 {
		xs := x(time.Duration(s * float64(time.Second)))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f s</text>`+"\n", xs, top+plotH+16, s)
	}
	for _, ev := range r.Events[1:] {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#555" stroke-dasharray="4 3"/><text x="%.1f" y="%d" fill="#333">%s</text>`+"\n",
			x(ev.Begin), x(ev.Begin), top, top+plotH, x(ev.Begin)+3, top+12, escape(ev.Name))
	}
	for _, s := range []struct {
		v     []float64
		color string
	}{{r.SeriesCounter, colorCounter}, {r.SeriesLog, colorLog}} {
		var pts []string
		for i, v := range s.v {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(time.Duration(i)*r.Bucket), y(v)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
	}
	ly := H - 10
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="3" fill="%s"/><text x="%d" y="%d">sliding window counter</text>`, left, ly-4, colorCounter, left+16, ly)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="3" fill="%s"/><text x="%d" y="%d">sliding window log</text>`, left+170, ly-4, colorLog, left+186, ly)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d">fault</text>`, left+320, ly-9, colorFault, left+336, ly)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="10" fill="%s"/><text x="%d" y="%d">until converged</text>`+"\n", left+380, ly-9, colorTransit, left+396, ly)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
