// Command jepsen-lite runs peerlimit's chaos scenarios against real node
// processes and writes a report. See docs/chaos.md.
//
//	jepsen-lite -bin bin/peerlimit-node -profile full -out out/chaos
//
// With -docker-project it runs against a compose cluster instead
// (scripts/compose-test.sh), with docker's faults.
//
// It exits 1 when a scenario violated a bound or a step failed, 2 on bad
// usage. Partition scenarios need root (iptables); without it they are
// reported as skipped, never as passed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	jepsenlite "github.com/peerlimit/peerlimit/jepsen-lite"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	p, ok := profileNamed(o.profile, stderr)
	if !ok {
		return 2
	}
	p.NodeArgs = append(p.NodeArgs, strings.Fields(o.nodeArgs)...)
	scenarios := selectScenarios(o.only)
	if len(scenarios) == 0 {
		fmt.Fprintf(stderr, "jepsen-lite: -scenarios: none of %q exists\n", o.only)
		return 2
	}
	if p.Name == "short" && o.only == "" {
		// The short profile is the test command's: as there, the
		// scenarios of the full profile only are left out.
		scenarios = slices.DeleteFunc(scenarios, func(sc jepsenlite.Scenario) bool { return sc.FullOnly })
	}
	if !o.promises {
		for i := range scenarios {
			scenarios[i] = scenarios[i].WithoutPromises()
		}
	}
	absBin, err := filepath.Abs(o.bin)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen-lite:", err)
		return 2
	}

	// SIGINT/SIGTERM end the current scenario early; its teardown (kill
	// the nodes, remove the firewall rules) still runs.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, mode := o.config(absBin, p, log)

	results, failed := runScenarios(ctx, cfg, scenarios, mode, !o.defects, stdout, stderr)
	if err := jepsenlite.WriteReport(o.out, p, results, o.command(p), o.project); err != nil {
		fmt.Fprintln(stderr, "jepsen-lite: report:", err)
		return 1
	}
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(o.out, "report.md"))
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

// options are the command's flags.
type options struct {
	bin, profile, out, only, baseIP, project, nodeArgs string
	seed                                               uint64
	promises, defects                                  bool
}

// parseFlags reads args; flag reports its errors and the usage to stderr.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("jepsen-lite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin/peerlimit-node", "the node binary (make build)")
	fs.StringVar(&o.profile, "profile", "full", "full, or short (40 % of the time, as in the test command)")
	fs.StringVar(&o.out, "out", "out/chaos", "where the report, charts, histories and node logs go")
	fs.StringVar(&o.only, "scenarios", "", "comma-separated scenario names; empty runs all")
	fs.BoolVar(&o.promises, "promises", true, "hold scenarios to their promises (worst ×, share of degraded answers, p99 within the forward timeout) as well as to their bounds; false holds them to their bounds only and reports the rest (docker mode: containers are killed and detected more slowly than processes)")
	fs.BoolVar(&o.defects, "defects", true, "run the scenarios that find a known defect of the node, not fixed yet (docs/chaos.md, \"Found and not fixed\"); false reports them as skipped, naming the defect")
	fs.StringVar(&o.baseIP, "base-ip", "127.0.0.11", "the first node's loopback address; the others follow")
	fs.StringVar(&o.project, "docker-project", "", "docker mode: the running compose project whose services n1, n2, n3 are the nodes (instead of processes)")
	fs.StringVar(&o.nodeArgs, "node-args", "", "more flags for every node, space-separated, after the profile's (e.g. \"--forward-timeout=1s\"): to measure a setting; scenarios' own flags still come last")
	fs.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "workload randomness")
	return o, fs.Parse(args)
}

// profileNamed returns the -profile called name, or reports that there
// is none.
func profileNamed(name string, stderr io.Writer) (jepsenlite.Profile, bool) {
	switch name {
	case "full":
		return jepsenlite.FullProfile(), true
	case "short":
		return jepsenlite.ShortProfile(), true
	default:
		fmt.Fprintf(stderr, "jepsen-lite: -profile: want full or short, got %q\n", name)
		return jepsenlite.Profile{}, false
	}
}

// selectScenarios returns the scenarios named in only, comma-separated,
// in the harness's order; all of them when only is empty.
func selectScenarios(only string) []jepsenlite.Scenario {
	var scenarios []jepsenlite.Scenario
	names := strings.FieldsFunc(only, func(r rune) bool { return r == ',' })
	for _, sc := range jepsenlite.Scenarios() {
		if len(names) == 0 || slices.Contains(names, sc.Name) {
			scenarios = append(scenarios, sc)
		}
	}
	return scenarios
}

// config is the run's configuration, on local processes or, with
// -docker-project, on a compose project, and the nodes' description for
// the log.
func (o options) config(absBin string, p jepsenlite.Profile, log *slog.Logger) (jepsenlite.Config, string) {
	cfg := jepsenlite.Config{Backend: jepsenlite.Local(absBin, o.baseIP, p.NodeArgs, o.seed), OutDir: o.out, Profile: p, Seed: o.seed, Logger: log}
	mode := "processes on " + o.baseIP + "…"
	if o.project != "" {
		cfg.Backend = jepsenlite.Docker(jepsenlite.DockerConfig{Project: o.project})
		mode = "compose project " + o.project
	}
	return cfg, mode
}

// command is how the report says to run the chaos tests again.
func (o options) command(p jepsenlite.Profile) string {
	if o.project != "" {
		return "make compose-test"
	}
	if o.nodeArgs != "" {
		return fmt.Sprintf("go run ./jepsen-lite/cmd/jepsen-lite -profile %s -node-args %q", p.Name, o.nodeArgs)
	}
	return fmt.Sprintf("make chaos CHAOS_PROFILE=%s", p.Name)
}

// runScenarios runs each scenario until ctx ends, printing a line per
// scenario, and reports whether any failed. With skipDefects, a scenario
// that finds a known defect (Scenario.Defect) is reported skipped.
func runScenarios(ctx context.Context, cfg jepsenlite.Config, scenarios []jepsenlite.Scenario, mode string, skipDefects bool, stdout, stderr io.Writer) ([]*jepsenlite.Result, bool) {
	var results []*jepsenlite.Result
	failed := false
	for _, sc := range scenarios {
		if ctx.Err() != nil {
			break
		}
		if skipDefects && sc.Defect != "" {
			res := &jepsenlite.Result{Scenario: sc.Name, About: sc.About, Skipped: "a known defect of the node, not fixed yet: " + sc.Defect}
			results = append(results, res)
			printResult(stdout, sc.Name, res)
			continue
		}
		cfg.Logger.Info("scenario", "name", sc.Name, "about", sc.About, "nodes", mode)
		res, err := jepsenlite.Run(ctx, cfg, sc)
		if err != nil {
			fmt.Fprintf(stderr, "jepsen-lite: %s: %v\n", sc.Name, err)
			failed = true
			if res == nil {
				continue
			}
		}
		results = append(results, res)
		if !printResult(stdout, sc.Name, res) {
			failed = true
		}
	}
	return results, failed
}

// printResult prints the scenario's line and reports whether it passed
// (or was skipped).
func printResult(stdout io.Writer, name string, res *jepsenlite.Result) bool {
	switch {
	case res.Skipped != "":
		fmt.Fprintf(stdout, "%-10s SKIPPED: %s\n", name, res.Skipped)
	case len(res.Violations()) > 0 || len(res.Errors) > 0 || res.Unsettled > 0 || res.OverPromise() != "":
		fmt.Fprintf(stdout, "%-10s FAILED: %d violations, %d degraded after settling, errors %v %s\n", name, len(res.Violations()), res.Unsettled, res.Errors, res.OverPromise())
		return false
	default:
		calendar := ""
		if res.Calendar.Windows > 0 {
			calendar = fmt.Sprintf(", calendar worst %.2f× (excess %d)", res.Calendar.Worst, res.Calendar.Excess)
		}
		if l := res.Link; l != nil {
			calendar += fmt.Sprintf(", p99 %s, %.2f checks per forward, %.0f forwards failed", l.P99.Round(100*time.Microsecond), l.ChecksPerForward(), l.ForwardErrors)
		}
		fmt.Fprintf(stdout, "%-10s ok: %d checks, answered %.2f %%, log worst %.2f×, counter fixed worst %.2f×%s\n",
			name, res.All.Ops, 100*res.All.AnsweredShare(), res.Log.Worst, res.CounterFixed.Worst, calendar)
	}
	return true
}
