// Command promcheck keeps a Grafana dashboard honest against a real
// Prometheus: it runs every panel's PromQL query through Prometheus's HTTP
// API (/api/v1/query) and fails, naming the panel, unless each query
// returns a series for every expected node. With -rules it also requires
// every alert of a rule file to be loaded by that Prometheus and evaluated
// without error (/api/v1/rules). make compose-test runs it against a
// Prometheus scraping the compose cluster (scripts/compose-test.sh).
//
// Usage:
//
//	promcheck -prometheus http://127.0.0.1:9090 \
//	  -dashboard deploy/grafana/peerlimit.json -expect n1,n2,n3 \
//	  [-label instance] [-rules deploy/prometheus/alerts.yml] \
//	  [-within 30s] [-every 1s] [-var name=value ...] [-v]
//
// Grafana's variables in the queries are replaced before they are sent:
// $__rate_interval by 1m, $__interval by 15s, $__range by 1h; the
// dashboard's own variables by their saved value, or their allValue when
// "All" is saved; -var overrides any of them. A variable nothing defines
// fails the check. A series whose value is NaN (a ratio of rates with no
// traffic yet, a quantile of no observations) counts as present: Grafana
// shows that node, as a gap; -v lists them.
//
// Until every check passes, the checks are repeated every -every for up to
// -within: a fresh Prometheus needs two scrapes before a rate() has a
// value and one evaluation before a rule is healthy. Exit status 0: all
// passed; 1: a check failed (each failure is printed with its query); 2:
// bad flags or files.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// maxFileBytes bounds the dashboard and the rule file, read as the node
// reads its files (regularfile.Read): a pipe or a device is refused.
const maxFileBytes = 16 << 20

type config struct {
	prometheus, dashboard, label, rules string
	expect                              []string
	within, every                       time.Duration
	vars                                map[string]string
	verbose                             bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, cfg, os.Stdout))
}

// varFlag collects repeated -var name=value.
type varFlag map[string]string

func (v varFlag) String() string { return "" }
func (v varFlag) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want name=value, got %q", s)
	}
	v[strings.TrimPrefix(name, "$")] = val
	return nil
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("promcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := config{vars: map[string]string{}}
	for k, v := range defaultVars {
		cfg.vars[k] = v
	}
	var expect string
	fs.StringVar(&cfg.prometheus, "prometheus", "http://127.0.0.1:9090", "Prometheus base URL")
	fs.StringVar(&cfg.dashboard, "dashboard", "deploy/grafana/peerlimit.json", "Grafana dashboard JSON whose queries are checked")
	fs.StringVar(&expect, "expect", "", "comma-separated values of -label that every query must return a series for (required)")
	fs.StringVar(&cfg.label, "label", "instance", "the label that names a node")
	fs.StringVar(&cfg.rules, "rules", "", "a Prometheus rule file whose alerts must be loaded and healthy")
	fs.DurationVar(&cfg.within, "within", 30*time.Second, "how long to repeat failing checks before giving up")
	fs.DurationVar(&cfg.every, "every", time.Second, "time between rounds of checks")
	fs.Var(varFlag(cfg.vars), "var", "name=value: a Grafana variable's value (repeatable)")
	fs.BoolVar(&cfg.verbose, "v", false, "also list the queries that passed with a NaN for some node")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for _, e := range strings.Split(expect, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.expect = append(cfg.expect, e)
		}
	}
	if len(cfg.expect) == 0 || fs.NArg() > 0 {
		err := fmt.Errorf("-expect is required, and no arguments are taken")
		fmt.Fprintln(stderr, "promcheck:", err)
		return cfg, err
	}
	cfg.prometheus = strings.TrimSuffix(cfg.prometheus, "/")
	return cfg, nil
}

// run checks until all pass or cfg.within runs out, and prints the result;
// it returns the exit status.
func run(ctx context.Context, cfg config, out io.Writer) int {
	data, err := regularfile.Read(cfg.dashboard, maxFileBytes)
	if err != nil {
		fmt.Fprintln(out, "promcheck:", err)
		return 2
	}
	qs, err := parseDashboard(data, cfg.vars)
	if err != nil {
		fmt.Fprintf(out, "promcheck: %s: %v\n", cfg.dashboard, err)
		return 2
	}
	var alerts []string
	if cfg.rules != "" {
		if alerts, err = alertNames(cfg.rules); err != nil {
			fmt.Fprintln(out, "promcheck:", err)
			return 2
		}
	}
	p := prom{base: cfg.prometheus, hc: &http.Client{Timeout: 10 * time.Second}}
	start := time.Now()
	r := poll(ctx, cfg.within, cfg.every, func(ctx context.Context) result {
		r := checkQueries(ctx, p, qs, cfg.label, cfg.expect)
		r.Problems = append(r.Problems, checkRules(ctx, p, alerts)...)
		return r
	})
	return report(out, cfg, r, len(qs), len(alerts), time.Since(start))
}

func report(out io.Writer, cfg config, r result, queries, alerts int, took time.Duration) int {
	if cfg.verbose {
		for _, n := range r.NaN {
			fmt.Fprintln(out, "  passed, with", n)
		}
	}
	if len(r.Problems) > 0 {
		for _, p := range r.Problems {
			fmt.Fprintln(out, "FAIL", p)
		}
		fmt.Fprintf(out, "promcheck: %d problems after %s (%d of %d queries passed) against %s\n",
			len(r.Problems), took.Round(time.Second), r.Passed, queries, cfg.prometheus)
		return 1
	}
	fmt.Fprintf(out, "promcheck: %s: all %d queries return a series for each %s of %s",
		cfg.dashboard, queries, cfg.label, strings.Join(cfg.expect, ", "))
	if alerts > 0 {
		fmt.Fprintf(out, "; the %d alerts of %s are loaded and healthy", alerts, cfg.rules)
	}
	fmt.Fprintf(out, " (%s)\n", took.Round(100*time.Millisecond))
	return 0
}
