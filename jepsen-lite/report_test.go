package jepsenlite

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A scenario's section says what the run was held to: its promised
// worst, held or only reported, and the allowance of a kill of nodes with
// their data directories, with how many admissions it covered; a
// scenario without a promise says so.
func TestReportStatesThePromiseAndTheAllowance(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	kill := Event{Name: "kill -9 n1 n2 n3", Begin: 2 * time.Second, End: 2*time.Second + 20*ms, Steady: 1, Fault: true, Loses: 40 * ms}
	ops := []Op{allowed(0, 100*ms, 101*ms, "n1"), allowed(0, 1970*ms, 1971*ms, "n1")}
	section := func(r *Result) string {
		var b strings.Builder
		writeScenario(&b, r)
		return b.String()
	}

	r := Analyze(dayHistory(start, "", ops, kill))
	r.Scenario, r.MaxWorst = "full-restart", 1.1
	got := section(r)
	assert.Contains(t, got, "Promise: worst ≤ 1.10× the limit in every log window")
	assert.Contains(t, got, `Allowance: "kill -9 n1 n2 n3" kills nodes with their data directories, which may lose what they counted in the 40 ms before it`)
	assert.Contains(t, got, "unmarked: 1 in this run.")

	r.MaxWorst, r.ReportedWorst = 0, 1.1
	assert.Contains(t, section(r), "Promise: worst ≤ 1.10× the limit, reported and not held in this run (-promises=false)")

	r = Analyze(dayHistory(start, "", ops))
	r.Scenario = "full-stop"
	got = section(r)
	assert.Contains(t, got, "Promise: none beyond the checker's bounds")
	assert.NotContains(t, got, "Allowance")
}
