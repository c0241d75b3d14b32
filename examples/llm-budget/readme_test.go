package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/mdexamples"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
)

// The README's "Run it" runs as written: the go run line's flags start
// the program (its run, in this process: go run would only build it
// first), on a free port for the page's 127.0.0.1:8089; the curl after
// it streams an answer to its end; and the transcript's curl, repeated
// as the page says, ends in the 429 it shows: the status line, each
// header it shows, and the body, numbers free but for the budget's.
func TestReadmeRunsAsWritten(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	var sh []string
	var steps []mdexamples.Step
	for _, blk := range mdexamples.Blocks(string(b)) {
		if blk.Info == "sh" && sh == nil {
			sh = blk.Lines
		} else if s, ok := mdexamples.Transcript(blk.Lines); ok && steps == nil {
			steps = s
		}
	}
	require.Len(t, sh, 2, "Run it: the go run line and a curl")
	require.Len(t, steps, 1, "the 429's transcript")

	words, err := mdexamples.Split(sh[0])
	require.NoError(t, err)
	require.Equal(t, []string{"go", "run", "./examples/llm-budget"}, words[:3], sh[0])
	cfg, err := parseFlags(words[3:])
	require.NoError(t, err, sh[0])
	pageAddr := cfg.addr
	cfg.addr = "127.0.0.1:0"

	ctx, cancel := context.WithCancel(context.Background())
	addrc, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- run(ctx, cfg, slog.New(slog.NewTextHandler(testlog.New(t), nil)), func(a string) { addrc <- a })
	}()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("%s: %v", sh[0], err)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not listening after 20 s", sh[0])
	}
	curl := func(line string) (string, int) {
		t.Helper()
		words, err := mdexamples.Split(strings.ReplaceAll(line, pageAddr, addr))
		require.NoError(t, err)
		require.Equal(t, "curl", words[0], line)
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		out, code, err := mdexamples.Curl(cctx, http.DefaultClient, words[1:])
		require.NoError(t, err, line)
		return out, code
	}

	out, code := curl(sh[1])
	require.Equal(t, http.StatusOK, code, "%s: %s", sh[1], out)
	assert.True(t, strings.HasPrefix(out, "data: "), "%s: an event stream: %s", sh[1], out)
	assert.True(t, strings.HasSuffix(out, "data: [DONE]\n\n"), "%s: streamed to its end: %s", sh[1], out)

	// 2,000 tokens at up to 300 a request, each keeping at least 1:
	// at most 2,000 answers before the budget is out; in practice ~10.
	for range 2000 {
		if out, code = curl(steps[0].Command); code != http.StatusOK {
			break
		}
	}
	require.Equal(t, http.StatusTooManyRequests, code, out)
	assert.NoError(t, matchResponse(steps[0].Want, out), "$ %s", steps[0].Command)
	// The budget itself is no number that moves: the page's must be the
	// one its command sets.
	policy := func(lines []string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "Ratelimit-Policy:") {
				return l
			}
		}
		return ""
	}
	assert.Equal(t, policy(strings.Split(out, "\n")), policy(steps[0].Want), "the budget the page shows")
}

// matchResponse matches curl -i's output against a page's, which may
// leave headers out: the status line, then each header the page shows,
// then the body.
func matchResponse(want []string, got string) error {
	head, body, _ := strings.Cut(got, "\n\n")
	lines := strings.Split(head, "\n")
	kept := []string{lines[0]}
	var wantHead []string
	for _, w := range want[1:] {
		if w == "" {
			break
		}
		wantHead = append(wantHead, w)
	}
	for _, w := range wantHead {
		name, _, _ := strings.Cut(w, ":")
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, name+":") {
				kept = append(kept, l)
			}
		}
	}
	return mdexamples.Match(want, strings.Join(kept, "\n")+"\n\n"+body, map[string]string{})
}
