package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// result is the outcome of one round of checks: what failed, and for the
// report, how many queries passed and how many of those were NaN somewhere.
type result struct {
	Problems []string
	Passed   int
	NaN      []string // queries that passed with a NaN for some node
}

// checkQueries runs every query and requires, for each value in expect, a
// series whose label has that value. A NaN counts as a series: Grafana
// draws the node (as a gap), and a rate of nothing yet is NaN for a ratio.
func checkQueries(ctx context.Context, p prom, qs []query, label string, expect []string) result {
	var r result
	for _, q := range qs {
		got, err := p.instant(ctx, q.Expr)
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %v\n    %s", q, err, q.Expr))
			continue
		}
		seen, nan := map[string]bool{}, []string{}
		for _, s := range got {
			v := s.Labels[label]
			seen[v] = true
			if s.NaN && !slices.Contains(nan, v) {
				nan = append(nan, v)
			}
		}
		var missing []string
		for _, e := range expect {
			if !seen[e] {
				missing = append(missing, e)
			}
		}
		if len(missing) > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: no series with %s=%s (%d series returned)\n    %s",
				q, label, strings.Join(missing, ","), len(got), q.Expr))
			continue
		}
		r.Passed++
		if len(nan) > 0 {
			r.NaN = append(r.NaN, fmt.Sprintf("%s: NaN for %s", q, strings.Join(nan, ",")))
		}
	}
	return r
}

// checkRules requires every alert in names to be loaded and to have been
// evaluated without error (health "ok"; "unknown" until its first
// evaluation, which a later round may see).
func checkRules(ctx context.Context, p prom, names []string) []string {
	loaded, err := p.alertRules(ctx)
	if err != nil {
		return []string{fmt.Sprintf("alert rules: %v", err)}
	}
	var problems []string
	for _, n := range names {
		r, ok := loaded[n]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("alert %s: not loaded (GET /api/v1/rules lists %d alerts)", n, len(loaded)))
		case r.Health != "ok":
			problems = append(problems, fmt.Sprintf("alert %s: health %q %s", n, r.Health, r.LastError))
		}
	}
	return problems
}

// alertNames reads the names of the alerts of a Prometheus rule file.
func alertNames(path string) ([]string, error) {
	data, err := regularfile.Read(path, maxFileBytes)
	if err != nil {
		return nil, err
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				names = append(names, r.Alert)
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no alert rules", path)
	}
	return names, nil
}

// poll runs round every interval until it reports no problem or the next
// round would start after within; it returns the last round. Prometheus
// needs a few scrapes before a rate() has two samples, and a rule its first
// evaluation, so the first rounds may fail on a healthy cluster. A round
// always runs to its end (its calls bounded by the HTTP client's timeout),
// so the last one reports the real problem, not an expired deadline.
func poll(ctx context.Context, within, interval time.Duration, round func(context.Context) result) result {
	deadline := time.Now().Add(within)
	for {
		r := round(ctx)
		if len(r.Problems) == 0 || !time.Now().Add(interval).Before(deadline) {
			return r
		}
		select {
		case <-ctx.Done():
			return r
		case <-time.After(interval):
		}
	}
}
