package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const repoRoot = "../.."

func TestParseDashboardExpandsVariables(t *testing.T) {
	d := `{
	  "templating": {"list": [
	    {"name": "DS_PROMETHEUS", "type": "datasource", "query": "prometheus"},
	    {"name": "job", "type": "query", "current": {"value": "peerlimit"}},
	    {"name": "instance", "type": "query", "includeAll": true, "allValue": ".+", "current": {"value": ["$__all"]}},
	    {"name": "cap", "type": "custom", "current": {"value": ["keys", "log_entries"]}}
	  ]},
	  "panels": [
	    {"type": "row", "title": "Requests", "collapsed": true, "panels": [
	      {"type": "timeseries", "title": "Checks", "targets": [
	        {"refId": "A", "expr": "sum by (instance) (rate(x{job=~\"$job\",instance=~\"${instance}\"}[$__rate_interval]))"},
	        {"refId": "B", "expr": ""}
	      ]}
	    ]},
	    {"type": "text", "title": "Read me"},
	    {"type": "stat", "title": "Evictions", "targets": [
	      {"refId": "A", "expr": "y{cap=~\"$cap\"}"},
	      {"refId": "B", "expr": "z[$__range]"}
	    ]}
	  ]
	}`
	qs, err := parseDashboard([]byte(d), map[string]string{"__rate_interval": "1m", "__range": "2h"})
	require.NoError(t, err)
	assert.Equal(t, []query{
		{Panel: "Checks", RefID: "A", Expr: `sum by (instance) (rate(x{job=~"peerlimit",instance=~".+"}[1m]))`},
		{Panel: "Evictions", RefID: "A", Expr: `y{cap=~"(keys|log_entries)"}`},
		{Panel: "Evictions", RefID: "B", Expr: `z[2h]`},
	}, qs)
}

func TestParseDashboardVarsOverrideTheDashboard(t *testing.T) {
	d := `{"templating": {"list": [{"name": "job", "type": "query", "current": {"value": "peerlimit"}}]},
	  "panels": [{"type": "timeseries", "title": "P", "targets": [{"refId": "A", "expr": "up{job=\"$job\"}"}]}]}`
	qs, err := parseDashboard([]byte(d), map[string]string{"job": "other"})
	require.NoError(t, err)
	assert.Equal(t, `up{job="other"}`, qs[0].Expr)
}

// Each of these would let a panel escape the check, or send Prometheus a
// query it rejects with a less helpful message.
func TestParseDashboardErrors(t *testing.T) {
	for _, tc := range []struct{ name, dashboard, want string }{
		{"not JSON", `{`, "dashboard JSON"},
		{"unknown variable",
			`{"panels": [{"type": "timeseries", "title": "P", "targets": [{"refId": "A", "expr": "x[$__interval] + $nope"}]}]}`,
			`panel "P" (A): undefined variable $__interval, $nope`},
		{"variable format",
			`{"templating": {"list": [{"name": "v", "current": {"value": "a"}}]},
			  "panels": [{"type": "timeseries", "title": "P", "targets": [{"refId": "A", "expr": "x{l=~\"${v:regex}\"}"}]}]}`,
			`${v:regex} (formats are not supported)`},
		{"All without allValue",
			`{"templating": {"list": [{"name": "instance", "includeAll": true, "current": {"value": "$__all"}}]}, "panels": []}`,
			`variable "instance": "All" is selected but the variable has no allValue`},
		{"variable without value", `{"templating": {"list": [{"name": "v", "type": "query"}]}, "panels": []}`,
			`variable "v": no current value`},
		{"panel without query",
			`{"panels": [{"type": "timeseries", "title": "Empty", "targets": [{"refId": "A"}]}]}`,
			`panel "Empty" (type timeseries) has no PromQL query`},
		{"no panels", `{"panels": [{"type": "row", "title": "R"}]}`, "dashboard has no PromQL query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseDashboard([]byte(tc.dashboard), nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The committed dashboard: every query resolves with the defaults of a
// run, and groups by instance, so that it can return a series per node
// (which compose-test then checks against a real Prometheus).
func TestCommittedDashboard(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/grafana/peerlimit.json"))
	require.NoError(t, err)
	qs, err := parseDashboard(data, defaultVars)
	require.NoError(t, err)
	perNode := regexp.MustCompile(`\bby \(instance\b`)
	for _, q := range qs {
		assert.Regexp(t, perNode, q.Expr, "%s: not per node", q)
		assert.NotContains(t, q.Expr, "$", "%s", q)
		assert.True(t, strings.Contains(q.Expr, `instance=~".+"`), "%s: does not follow the node selector", q)
	}
}
