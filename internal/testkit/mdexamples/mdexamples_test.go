package mdexamples

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBlocks(t *testing.T) {
	md := "text\n\n```sh\ncurl x\n```\n\n```json\n{}\n```\nprose\n```\n$ a\nb\n```\n"
	bs := Blocks(md)
	require.Len(t, bs, 3)
	assert.Equal(t, Block{Info: "sh", Lines: []string{"curl x"}, Line: 3}, bs[0])
	assert.True(t, bs[1].Follows, "only a blank line between")
	assert.False(t, bs[2].Follows, "prose between")
	steps, ok := Transcript(bs[2].Lines)
	require.True(t, ok)
	assert.Equal(t, []Step{{Command: "a", Want: []string{"b"}}}, steps)
	_, ok = Transcript([]string{"not a command"})
	assert.False(t, ok)
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{`curl -s localhost:8080/v1/check -d '{"key":"user:42"}'   # a comment`, []string{"curl", "-s", "localhost:8080/v1/check", "-d", `{"key":"user:42"}`}},
		{`a "b c" d\ e x#y`, []string{"a", "b c", "d e", "x#y"}},
		{`  # only a comment`, nil},
	} {
		got, err := Split(tc.line)
		require.NoError(t, err, tc.line)
		assert.Equal(t, tc.want, got, tc.line)
	}
	for _, bad := range []string{`a 'b`, `a | b`, `echo "$X"`, `a > f`} {
		_, err := Split(bad)
		assert.Error(t, err, bad)
	}
}

func TestCurl(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Method+" "+r.Header.Get("X-User"))
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte("body"))
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	out, code, err := Curl(context.Background(), srv.Client(), []string{"-si", addr + "/x", "-H", "X-User: alice", "-d", "{}"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, out, "HTTP/1.1 429 Too Many Requests\n")
	assert.Contains(t, out, "X-Seen: POST alice\n")
	assert.Contains(t, out, "\n\nbody")
	out, _, err = Curl(context.Background(), srv.Client(), []string{"-s", addr})
	require.NoError(t, err)
	assert.Equal(t, "body", out)
	_, _, err = Curl(context.Background(), srv.Client(), []string{"--compressed", addr})
	assert.Error(t, err, "a flag it does not know")
}

func TestMatch(t *testing.T) {
	bind := map[string]string{}
	tok := "AAABm9nD3pkAAAAC6mAAAAAAAAAAAAAAAAAAAAAAAAAA5kQ0cwx"
	real := "BBBBm9nD3pkAAAAC6mAAAAAAAAAAAAAAAAAAAAAAAAAA5kQ0cwx"
	want := []string{
		"denied: retry after 59.953s (count 5 of 5); decided by node1",
		"user:42  195        node1  127.0.0.1:9090",
		"  by age: 5.368s ×89 4s",
		`Ratelimit: "tokens";r=282;t=50 {"retry_after":50}`,
		"reserved 2: 0 of 5 remaining, reservation " + tok + "; decided by node1",
	}
	got := "denied: retry after 1m0s (count 4 of 5); decided by node1\n" +
		"user:42  7  node1  127.0.0.1:9090\n" +
		"  by age: 1ms ×2 3s\n" +
		`Ratelimit: "tokens";r=1;t=51 {"retry_after":51}` + "\n" +
		"reserved 3: 1 of 5 remaining, reservation " + real + "; decided by node1\n"
	require.NoError(t, Match(want, got, bind))
	assert.Equal(t, map[string]string{tok: real}, bind)

	// Names, keys and addresses are literal.
	assert.Error(t, Match(want[:1], "denied: retry after 1m0s (count 4 of 5); decided by node2", bind))
	assert.Error(t, Match(want[1:2], "user:43  7  node1  127.0.0.1:9090", bind))
	assert.Error(t, Match(want[1:2], "user:42  7  node1  127.0.0.1:9091", bind))
	assert.Error(t, Match(want[:2], want[0], bind), "a line missing")
}
