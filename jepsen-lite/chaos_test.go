package jepsenlite_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	jepsenlite "github.com/peerlimit/peerlimit/jepsen-lite"
)

// buildNode builds cmd/node without the race detector: the nodes are the
// system under test, timed like production; the harness runs under -race.
func buildNode(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "peerlimit-node")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../cmd/node")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/node: %s", out)
	return bin
}

// TestChaosShortProfile runs every scenario of `make chaos` at 40 % of its
// length against real node processes and asserts the bounds of
// docs/chaos.md. Partition scenarios need root; without it they are
// skipped with the reason, never passed.
func TestChaosShortProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos scenarios take about 100 s; -short skips them")
	}
	bin := buildNode(t)
	out := t.TempDir()
	p := jepsenlite.ShortProfile()
	// Addresses of this process's own, not make chaos's 127.0.0.11 nor
	// another test run's: runs may overlap, and firewall rules are by
	// address (all of 127.0.0.0/8 is loopback).
	pid := os.Getpid()
	base := fmt.Sprintf("127.%d.%d.11", 1+pid/250%250, pid%250)
	cfg := jepsenlite.Config{
		Backend: jepsenlite.Local(bin, base, p.NodeArgs, 1),
		OutDir:  out, Profile: p, Seed: 1,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), nil)),
	}
	var results []*jepsenlite.Result
	for _, sc := range jepsenlite.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			if sc.FullOnly {
				t.Skip("skipped, not passed: make chaos only (the full profile), to keep the test command short")
			}
			if sc.Defect != "" {
				t.Skip("skipped, not passed: a known defect of the node, not fixed yet: " + sc.Defect)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := jepsenlite.Run(ctx, cfg, sc)
			require.NoError(t, err)
			results = append(results, res)
			if res.Skipped != "" {
				t.Skip("skipped, not passed: " + res.Skipped)
			}
			assert.Empty(t, res.Errors, "every nemesis step must succeed")
			for _, v := range res.Violations() {
				t.Errorf("over-admission beyond the bound: %s", v)
			}
			assert.Empty(t, res.OverPromise(), "the scenario's promise")
			for _, ev := range res.Events {
				assert.GreaterOrEqual(t, ev.ConvergedAfter(), time.Duration(0), "the cluster never converged after %q", ev.Name)
			}
			assert.Zero(t, res.Unsettled, "degraded answers %s after the cluster converged: forwarding did not recover", jepsenlite.Settle)
			// AP: every node that is up answers, degraded or not.
			assert.GreaterOrEqual(t, res.Healthy.AnsweredShare(), 0.99, "checks sent to nodes that were up: %+v", res.Healthy)
			// The checker had something to check.
			assert.Greater(t, res.Log.Windows, 200)
			assert.Greater(t, res.CounterFixed.Windows, 20)
			assert.Greater(t, res.GCRA.Windows, 200)
			assert.Greater(t, res.Concurrency.Windows, 20)
			if sc.Name == "calm" {
				assert.LessOrEqual(t, res.Log.Worst, 1.0, "no fault: the log never admits more than its limit")
				assert.LessOrEqual(t, res.CounterFixed.Worst, 1.0, "no fault: the counter never admits more than its limit in its window")
				assert.LessOrEqual(t, res.CounterSliding.Worst, 2.0)
				assert.LessOrEqual(t, res.GCRA.Worst, 1.0, "no fault: a bucket never admits more than burst + rate × the interval")
				assert.LessOrEqual(t, res.Concurrency.Worst, 1.0, "no fault: never more slots held than the limit")
				assert.Zero(t, res.Log.ExcessCalm+res.GCRA.ExcessCalm+res.Concurrency.ExcessCalm)
			}
			if t.Failed() {
				logWarnings(t, filepath.Join(out, sc.Name))
			}
		})
	}
	require.NoError(t, jepsenlite.WriteReport(out, cfg.Profile, results, "go test ./jepsen-lite", ""))
	if t.Failed() {
		report, _ := os.ReadFile(filepath.Join(out, "report.md"))
		t.Logf("report:\n%s", report)
	}
}

// logWarnings prints the warnings and errors of a failed scenario's node
// logs, at most 40 per node, so that a failure in CI, whose temporary
// directory is gone after the run, says what the nodes saw.
func logWarnings(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "n*.log"))
	for _, name := range logs {
		data, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		n := 0
		for line := range strings.Lines(string(data)) {
			if n < 40 && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
				t.Logf("%s: %s", filepath.Base(name), strings.TrimSpace(line))
				n++
			}
		}
	}
}
