package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/mdexamples"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/policy"
)

// The pages whose examples run as written against `make run`'s cluster,
// each against a cluster of its own, fresh, as a newcomer who has just
// started it and follows that page. examples/llm-budget's README runs in
// its own package (readme_test.go there).
var examplePages = []string{"README.md", "docs/api.md", "docs/limiter.md", "docs/policies.md"}

// notRun are the first words of the pages' shell lines this test does
// not run, and why: each is the cluster this test starts, the test
// command itself, or needs what a unit test has not (Docker, minutes).
var notRun = map[string]string{
	"make":           "make run is the cluster this test starts (scripts/run-local.sh); the other targets build, test or need Docker",
	"docker":         "needs a Docker engine: make compose-test",
	"docker-compose": "needs a Docker engine: make compose-test",
	"go":             "builds or tests; a go run of an example has a test of its own",
}

// TestDocExamplesRunAsWritten runs every shell line, JSON answer and
// transcript of the pages above against a real 3-node cluster set up as
// `make run` sets it up (ids node1..node3, the policies file
// scripts/run-local.sh passes), loopback only. The pages' addresses
// (localhost:8080-8082, 127.0.0.1:9090-9092) are the cluster's real ones,
// a command without --addr gets node 1's (the default's), and `TOKEN`,
// or a token a transcript showed, is the token the command before
// printed. A curl must answer 2xx and a command exit 0 (a transcript's
// check, reserve or acquire may also be denied, 3); a JSON block right after a
// command is its answer: the same fields, the same strings and booleans
// (numbers aside); a transcript's output must be the page's, numbers and
// durations aside.
func TestDocExamplesRunAsWritten(t *testing.T) {
	policies := runLocalPolicies(t)
	for _, page := range examplePages {
		t.Run(strings.ReplaceAll(page, "/", "_"), func(t *testing.T) {
			blocks := mdexamples.Blocks(readDoc(t, page))
			r := newExampleRunner(t, policies)
			for _, b := range blocks {
				r.block(page, b)
			}
		})
	}
}

// runLocalPolicies is the policies file scripts/run-local.sh gives the
// nodes, from the repository's root.
func runLocalPolicies(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`POLICIES:-([^}]+)}`).FindStringSubmatch(readDoc(t, "scripts/run-local.sh"))
	require.Len(t, m, 2, "scripts/run-local.sh: no policies=${POLICIES:-file}")
	path := filepath.Join("..", "..", filepath.FromSlash(m[1]))
	_, err := policy.Load(path, nil)
	require.NoError(t, err, "the policies make run loads")
	return path
}

// exampleRunner runs one page's examples against its cluster.
type exampleRunner struct {
	t       *testing.T
	addrs   *strings.Replacer // the page's addresses → the cluster's
	back    *strings.Replacer // and back, in outputs
	node1   string            // node 1's gRPC address: the commands' default
	http1   string            // node 1's HTTP address: healthcheck's default
	bind    map[string]string // tokens the page showed → the real ones
	token   string            // the last token a command printed
	last    string            // the last command's output
	lastCmd string
}

func newExampleRunner(t *testing.T, policies string) *exampleRunner {
	c := testcluster.New(t, 3, func(cfg *node.Config) {
		var i int // make run's ids: node-0 → node1
		_, err := fmt.Sscanf(cfg.ID, "node-%d", &i)
		require.NoError(t, err, cfg.ID)
		cfg.ID = fmt.Sprintf("node%d", i+1)
		cfg.PoliciesFile = policies
	})
	var fwd, back []string
	for i := range 3 {
		n := c.Node(i)
		for _, host := range []string{"localhost", "127.0.0.1"} {
			fwd = append(fwd, fmt.Sprintf("%s:%d", host, 8080+i), n.HTTPAddr(), fmt.Sprintf("%s:%d", host, 9090+i), n.GRPCAddr())
		}
		back = append(back, n.HTTPAddr(), fmt.Sprintf("127.0.0.1:%d", 8080+i), n.GRPCAddr(), fmt.Sprintf("127.0.0.1:%d", 9090+i))
	}
	return &exampleRunner{t: t, addrs: strings.NewReplacer(fwd...), back: strings.NewReplacer(back...),
		node1: c.Node(0).GRPCAddr(), http1: c.Node(0).HTTPAddr(), bind: map[string]string{}}
}

func (r *exampleRunner) block(page string, b mdexamples.Block) {
	t := r.t
	where := fmt.Sprintf("%s:%d", page, b.Line)
	switch {
	case b.Info == "sh":
		for _, line := range b.Lines {
			if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			if first := strings.Fields(line)[0]; notRun[first] != "" && !strings.HasPrefix(line, "make run") {
				// Another cluster (Compose), or a build: the lines after
				// it speak of what it made, not of this test's cluster.
				t.Logf("%s: not run from here on: %s (%s)", where, line, notRun[first])
				break
			}
			out, ok := r.run(where, line, false)
			if ok {
				r.last, r.lastCmd = out, line
			}
		}
	case b.Info == "json":
		var shown map[string]any
		if !assert.NoError(t, json.Unmarshal([]byte(strings.Join(b.Lines, "\n")), &shown), "%s: the JSON shown does not parse", where) {
			return
		}
		if !b.Follows || r.last == "" {
			return // an illustration, not a command's answer
		}
		var got map[string]any
		if !assert.NoError(t, json.Unmarshal([]byte(r.last), &got), "%s: %s\nanswered no JSON object: %s", where, r.lastCmd, r.last) {
			return
		}
		assert.Equal(t, slices.Sorted(mapKeys(shown)), slices.Sorted(mapKeys(got)),
			"%s: the fields of the answer shown, and of the answer to\n%s\nwhich was %s", where, r.lastCmd, r.last)
		// Numbers move with time; the rest (allowed, owner, settled…) is
		// what the page promises. Tokens are bound below.
		for k, v := range shown {
			switch v := v.(type) {
			case bool:
				assert.Equal(t, v, got[k], "%s: %q of the answer to\n%s\nwhich was %s", where, k, r.lastCmd, r.last)
			case string:
				if len(mdexamples.Tokens(v)) == 0 {
					assert.Equal(t, v, got[k], "%s: %q of the answer to\n%s\nwhich was %s", where, k, r.lastCmd, r.last)
				}
			}
		}
		// A token the page shows is the one the commands after it send.
		if shownTok, gotTok := mdexamples.Tokens(strings.Join(b.Lines, "\n")), mdexamples.Tokens(r.last); len(shownTok) == len(gotTok) {
			for i, tok := range shownTok {
				r.bind[tok] = gotTok[i]
			}
		}
		r.last = ""
	default:
		steps, ok := mdexamples.Transcript(b.Lines)
		if !ok {
			return // output shown without its command, a file, an error listing: nothing to run
		}
		for _, s := range steps {
			out, ok := r.run(where, s.Command, true)
			if !ok {
				continue
			}
			assert.NoError(t, mdexamples.Match(s.Want, r.back.Replace(out), r.bind), "%s: $ %s", where, s.Command)
		}
	}
}

// run runs one shell line and returns its output; ok is false when it
// did not run (not ours to run, or it failed, which it reports).
func (r *exampleRunner) run(where, line string, transcript bool) (string, bool) {
	t := r.t
	words, err := mdexamples.Split(line)
	if !assert.NoError(t, err, where) || len(words) == 0 {
		return "", false
	}
	if why, skip := notRun[words[0]]; skip {
		t.Logf("%s: not run: %s (%s)", where, line, why)
		return "", false
	}
	for i, w := range words {
		w = r.addrs.Replace(w)
		if w == "TOKEN" {
			require.NotEmpty(t, r.token, "%s: TOKEN, but no command before printed a token", where)
			w = r.token
		}
		for shown, real := range r.bind {
			w = strings.ReplaceAll(w, shown, real)
		}
		words[i] = w
	}
	var out string
	switch words[0] {
	case "curl":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		o, code, err := mdexamples.Curl(ctx, http.DefaultClient, words[1:])
		if !assert.NoError(t, err, "%s: %s", where, line) {
			return "", false
		}
		if !assert.True(t, code/100 == 2, "%s: %s\nanswered %d: %s", where, line, code, o) {
			return "", false
		}
		out = o
	case "peerlimit-node", "bin/peerlimit-node": // make build's
		args := words[1:]
		if len(args) == 0 || strings.HasPrefix(args[0], "-") || args[0] == "serve" {
			t.Logf("%s: not run: %s (a node: the cluster is this test's)", where, line)
			return "", false
		}
		if !slices.ContainsFunc(args, func(a string) bool { return a == "--addr" || strings.HasPrefix(a, "--addr=") }) {
			def := r.node1 // what the default, 127.0.0.1:9090, is here
			if args[0] == "healthcheck" {
				def = r.http1
			}
			args = append([]string{args[0], "--addr", def}, args[1:]...)
		}
		var stdout, stderr bytes.Buffer
		code := dispatch(args, func(string) string { return "" }, &stdout, &stderr)
		ok := code == exitOK || transcript && code == exitDenied && (args[0] == "check" || args[0] == "reserve" || args[0] == "acquire")
		if !assert.True(t, ok, "%s: %s\nexit %d: %s%s", where, line, code, stdout.String(), stderr.String()) {
			return "", false
		}
		out = stdout.String()
	default:
		t.Errorf("%s: %s: this test runs curl and peerlimit-node lines; say in notRun why %q is not run, or run it", where, line, words[0])
		return "", false
	}
	if toks := mdexamples.Tokens(out); len(toks) > 0 {
		r.token = toks[len(toks)-1]
	}
	return out, true
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// examples/policies.yaml is docs/policies.md's example: the page's file
// is the one make run loads.
func TestExamplePoliciesAreThePagesOwn(t *testing.T) {
	var shown string
	for _, b := range mdexamples.Blocks(readDoc(t, "docs/policies.md")) {
		if b.Info == "yaml" {
			shown = strings.Join(b.Lines, "\n") + "\n"
			break
		}
	}
	require.NotEmpty(t, shown, "docs/policies.md shows no yaml block")
	want, err := policy.Parse("docs/policies.md", []byte(shown), nil)
	require.NoError(t, err)
	got, err := policy.Load(runLocalPolicies(t), nil)
	require.NoError(t, err)
	noLines := func(ps []policy.Policy) []policy.Policy {
		for i := range ps {
			ps[i].Line = 0
		}
		return ps
	}
	assert.Equal(t, noLines(want.All()), noLines(got.Current().All()))
}
