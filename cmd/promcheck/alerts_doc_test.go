package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// docAlert is an alert as one side states it: docs/operations.md in its
// `# alert NAME, SEVERITY, for DURATION` line and the expression under it,
// or deploy/prometheus/alerts.yml.
type docAlert struct {
	Severity, For, Expr string
}

var alertLine = regexp.MustCompile(`^# alert (\w+), (\w+)(?:, for (\w+))?$`)

// docsAlerts reads the alerts of the PromQL block of "Alerts and
// questions": an alert's expression is the lines under its name, up to a
// blank or comment line.
func docsAlerts(t *testing.T) map[string]docAlert {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs/operations.md"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]docAlert{}
	var name string
	var cur docAlert
	flush := func() {
		if name != "" {
			cur.Expr = strings.Join(strings.Fields(cur.Expr), " ")
			out[name] = cur
		}
		name, cur = "", docAlert{}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if m := alertLine.FindStringSubmatch(l); m != nil {
			flush()
			name, cur = m[1], docAlert{Severity: m[2], For: m[3]}
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "```") {
			flush()
			continue
		}
		if name != "" {
			cur.Expr += " " + l
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func fileAlerts(t *testing.T) map[string]docAlert {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/alerts.yml"))
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr, For string
				Labels           map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(data, &f))
	out := map[string]docAlert{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = docAlert{Severity: r.Labels["severity"], For: r.For, Expr: strings.Join(strings.Fields(r.Expr), " ")}
		}
	}
	return out
}

// The page operators read and the rules Prometheus runs say the same:
// the same alerts, expressions, severities and durations.
func TestAlertsMatchDocs(t *testing.T) {
	docs, rules := docsAlerts(t), fileAlerts(t)
	require.NotEmpty(t, docs, "docs/operations.md names no alert")
	assert.Equal(t, rules, docs)
}
