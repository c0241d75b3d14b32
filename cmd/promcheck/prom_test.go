package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeProm answers /api/v1/query from answers (query → the API's JSON
// answer; anything else: an empty vector) and /api/v1/rules with rules, in
// the shapes Prometheus 2.x sends.
func fakeProm(t *testing.T, answers map[string]string, rules string) prom {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		a, ok := answers[r.FormValue("query")]
		if !ok {
			a = `{"status":"success","data":{"resultType":"vector","result":[]}}`
		}
		if strings.Contains(a, `"status":"error"`) {
			w.WriteHeader(http.StatusBadRequest)
		}
		fmt.Fprint(w, a)
	})
	mux.HandleFunc("GET /api/v1/rules", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, rules)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return prom{base: srv.URL, hc: srv.Client()}
}

// vector is the API's answer with one series per instance, each with value v.
func vector(v string, instances ...string) string {
	var s []string
	for _, i := range instances {
		s = append(s, fmt.Sprintf(`{"metric":{"instance":%q,"route":"local"},"value":[1700000000.123,%q]}`, i, v))
	}
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(s, ",") + `]}}`
}

func TestCheckQueries(t *testing.T) {
	p := fakeProm(t, map[string]string{
		"all":     vector("1.5", "n1", "n2", "n3", "n4"),
		"nan":     vector("NaN", "n1", "n2", "n3"),
		"partial": vector("0", "n1", "n3"),
		"bad":     `{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected <by>"}`,
		"scalar":  `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}}`,
	}, "")
	qs := []query{
		{Panel: "All", RefID: "A", Expr: "all"},
		{Panel: "Ratio", RefID: "A", Expr: "nan"},
		{Panel: "Partial", RefID: "B", Expr: "partial"},
		{Panel: "Bad", RefID: "A", Expr: "bad"},
		{Panel: "Scalar", RefID: "A", Expr: "scalar"},
		{Panel: "Empty", RefID: "A", Expr: "empty"},
	}
	r := checkQueries(context.Background(), p, qs, "instance", []string{"n1", "n2", "n3"})
	assert.Equal(t, 2, r.Passed)
	assert.Equal(t, []string{`panel "Ratio" (A): NaN for n1,n2,n3`}, r.NaN)
	require.Len(t, r.Problems, 4)
	assert.Contains(t, r.Problems[0], `panel "Partial" (B): no series with instance=n2 (2 series returned)`)
	assert.Contains(t, r.Problems[1], `panel "Bad" (A): /api/v1/query: HTTP 400: bad_data: 1:5: parse error: unexpected <by>`)
	assert.Contains(t, r.Problems[2], `panel "Scalar" (A): result is a scalar, not a vector of series`)
	assert.Contains(t, r.Problems[3], `panel "Empty" (A): no series with instance=n1,n2,n3 (0 series returned)`)
	assert.Contains(t, r.Problems[3], "\n    empty", "the failure shows the query")
}

func TestCheckQueriesNotPrometheus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "404 page not found", http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	r := checkQueries(context.Background(), prom{base: srv.URL, hc: srv.Client()},
		[]query{{Panel: "P", RefID: "A", Expr: "up"}}, "instance", []string{"n1"})
	require.Len(t, r.Problems, 1)
	assert.Contains(t, r.Problems[0], `/api/v1/query: HTTP 404, not the API's JSON: "404 page not found\n"`)
}

const rulesAnswer = `{"status":"success","data":{"groups":[{"name":"peerlimit","file":"alerts.yml","rules":[
  {"state":"inactive","name":"Healthy","query":"up == 0","duration":60,"labels":{"severity":"warning"},"alerts":[],"health":"ok","evaluationTime":0.0001,"lastEvaluation":"2024-01-01T00:00:00Z","type":"alerting"},
  {"state":"inactive","name":"Broken","query":"x / on(instance) y","health":"err","lastError":"many-to-many matching not allowed","type":"alerting"},
  {"state":"inactive","name":"Fresh","query":"up","health":"unknown","type":"alerting"},
  {"name":"recorded","query":"sum(up)","health":"ok","type":"recording"}]}]}}`

func TestCheckRules(t *testing.T) {
	p := fakeProm(t, nil, rulesAnswer)
	got := checkRules(context.Background(), p, []string{"Healthy", "Broken", "Fresh", "Missing", "recorded"})
	assert.Equal(t, []string{
		`alert Broken: health "err" many-to-many matching not allowed`,
		`alert Fresh: health "unknown" `,
		`alert Missing: not loaded (GET /api/v1/rules lists 3 alerts)`,
		`alert recorded: not loaded (GET /api/v1/rules lists 3 alerts)`,
	}, got)
	assert.Empty(t, checkRules(context.Background(), p, nil))
}

func TestAlertNames(t *testing.T) {
	names, err := alertNames(filepath.Join(repoRoot, "deploy/prometheus/alerts.yml"))
	require.NoError(t, err)
	assert.Contains(t, names, "PeerlimitDegradedAnswers")
	assert.Contains(t, names, "PeerlimitMembersDisagree")

	f := filepath.Join(t.TempDir(), "rules.yml")
	require.NoError(t, os.WriteFile(f, []byte("groups:\n  - name: g\n    rules:\n      - record: r\n        expr: up\n"), 0o600))
	_, err = alertNames(f)
	assert.ErrorContains(t, err, "no alert rules")
}

func TestPollRepeatsUntilClean(t *testing.T) {
	var rounds atomic.Int32
	r := poll(context.Background(), time.Minute, time.Millisecond, func(context.Context) result {
		if rounds.Add(1) < 3 {
			return result{Problems: []string{"not yet"}}
		}
		return result{Passed: 7}
	})
	assert.Equal(t, int32(3), rounds.Load())
	assert.Equal(t, result{Passed: 7}, r)
}

func TestPollGivesUpWithTheLastRound(t *testing.T) {
	var rounds atomic.Int32
	r := poll(context.Background(), 0, time.Hour, func(context.Context) result {
		return result{Problems: []string{fmt.Sprint("round ", rounds.Add(1))}}
	})
	assert.Equal(t, []string{"round 1"}, r.Problems, "within 0: one round, no wait")
}

// run end to end against a fake Prometheus: the exit status and the report.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	dash := filepath.Join(dir, "d.json")
	require.NoError(t, os.WriteFile(dash, []byte(`{"panels": [{"type": "timeseries", "title": "Checks",
	  "targets": [{"refId": "A", "expr": "sum by (instance) (rate(c[$__rate_interval]))"}]}]}`), 0o600))
	rules := filepath.Join(dir, "alerts.yml")
	require.NoError(t, os.WriteFile(rules, []byte("groups:\n- name: g\n  rules:\n  - alert: Healthy\n    expr: up == 0\n"), 0o600))
	p := fakeProm(t, map[string]string{"sum by (instance) (rate(c[30s]))": vector("2", "n1", "n2")}, rulesAnswer)

	for _, tc := range []struct {
		expect string
		status int
		out    string
	}{
		{"n1,n2", 0, "all 1 queries return a series for each instance of n1, n2; the 1 alerts of " + rules + " are loaded and healthy"},
		{"n1,n2,n3", 1, `FAIL panel "Checks" (A): no series with instance=n3 (2 series returned)`},
	} {
		cfg, err := parseFlags([]string{"-prometheus", p.base + "/", "-dashboard", dash, "-rules", rules,
			"-expect", tc.expect, "-var", "__rate_interval=30s", "-within", "0"}, &bytes.Buffer{})
		require.NoError(t, err)
		var out bytes.Buffer
		assert.Equal(t, tc.status, run(context.Background(), cfg, &out), out.String())
		assert.Contains(t, out.String(), tc.out)
	}
}

func TestParseFlagsNeedsExpect(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"-dashboard", "x.json"}, &stderr)
	require.Error(t, err)
	assert.Contains(t, stderr.String(), "-expect is required")
	_, err = parseFlags([]string{"-expect", "n1", "-var", "novalue"}, &stderr)
	assert.Error(t, err)
}
