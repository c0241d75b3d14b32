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
	fs := flag.NewFlagSet("jepsen-lite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin/peerlimit-node", "the node binary (make build)")
	profile := fs.String("profile", "full", "full, or short (40 % of the time, as in the test command)")
	out := fs.String("out", "out/chaos", "where the report, charts, histories and node logs go")
	only := fs.String("scenarios", "", "comma-separated scenario names; empty runs all")
	baseIP := fs.String("base-ip", "127.0.0.11", "the first node's loopback address; the others follow")
	project := fs.String("docker-project", "", "docker mode: the running compose project whose services n1, n2, n3 are the nodes (instead of processes)")
	compose := fs.String("compose", "", "docker mode: the compose command with its -p and -f options, for graceful leaves (compose stop)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "workload randomness")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var p jepsenlite.Profile
	switch *profile {
	case "full":
		p = jepsenlite.FullProfile()
	case "short":
		p = jepsenlite.ShortProfile()
	default:
		fmt.Fprintf(stderr, "jepsen-lite: -profile: want full or short, got %q\n", *profile)
		return 2
	}
	var scenarios []jepsenlite.Scenario
	names := strings.FieldsFunc(*only, func(r rune) bool { return r == ',' })
	for _, sc := range jepsenlite.Scenarios() {
		if len(names) == 0 || slices.Contains(names, sc.Name) {
			scenarios = append(scenarios, sc)
		}
	}
	if len(scenarios) == 0 {
		fmt.Fprintf(stderr, "jepsen-lite: -scenarios: none of %q exists\n", *only)
		return 2
	}
	absBin, err := filepath.Abs(*bin)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen-lite:", err)
		return 2
	}

	// SIGINT/SIGTERM end the current scenario early; its teardown (kill
	// the nodes, remove the firewall rules) still runs.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := jepsenlite.Config{Backend: jepsenlite.Local(absBin, *baseIP, p.NodeArgs), OutDir: *out, Profile: p, Seed: *seed, Logger: log}
	mode := "processes on " + *baseIP + "…"
	if *project != "" {
		cfg.Backend = jepsenlite.Docker(jepsenlite.DockerConfig{Project: *project, Compose: strings.Fields(*compose)})
		mode = "compose project " + *project
	}

	var results []*jepsenlite.Result
	failed := false
	for _, sc := range scenarios {
		if ctx.Err() != nil {
			break
		}
		log.Info("scenario", "name", sc.Name, "about", sc.About, "nodes", mode)
		res, err := jepsenlite.Run(ctx, cfg, sc)
		if err != nil {
			fmt.Fprintf(stderr, "jepsen-lite: %s: %v\n", sc.Name, err)
			failed = true
			if res == nil {
				continue
			}
		}
		results = append(results, res)
		switch {
		case res.Skipped != "":
			fmt.Fprintf(stdout, "%-10s SKIPPED: %s\n", sc.Name, res.Skipped)
		case len(res.Violations()) > 0 || len(res.Errors) > 0 || res.Unsettled > 0:
			failed = true
			fmt.Fprintf(stdout, "%-10s FAILED: %d violations, %d degraded after settling, errors %v\n", sc.Name, len(res.Violations()), res.Unsettled, res.Errors)
		default:
			fmt.Fprintf(stdout, "%-10s ok: %d checks, answered %.2f %%, log worst %.2f×, counter fixed worst %.2f×\n",
				sc.Name, res.All.Ops, 100*res.All.AnsweredShare(), res.Log.Worst, res.CounterFixed.Worst)
		}
	}
	command := fmt.Sprintf("make chaos CHAOS_PROFILE=%s", p.Name)
	if *project != "" {
		command = "make compose-test"
	}
	if err := jepsenlite.WriteReport(*out, p, results, command, *project); err != nil {
		fmt.Fprintln(stderr, "jepsen-lite: report:", err)
		return 1
	}
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(*out, "report.md"))
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}
