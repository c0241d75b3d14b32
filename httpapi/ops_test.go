package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/policy"
	"github.com/peerlimit/peerlimit/ring"
)

const testPolicies = "login: {algorithm: SLIDING_WINDOW_LOG, limit: 2, window: 1s}\nsearch: {limit: 100, window: 1m}\n"

func withPolicySet(t *testing.T) (func(*envOpts), *policy.Set) {
	set, err := policy.Parse("policies.yaml", []byte(testPolicies), nil)
	require.NoError(t, err)
	return func(o *envOpts) {
		o.rpc = func(c *svcConfig) { c.Policies = set }
		o.http.Policies = func() *policy.Set { return set }
	}, set
}

func TestCheckByPolicyJSON(t *testing.T) {
	opt, _ := withPolicySet(t)
	e := newEnv(t, opt)
	assert.Equal(t, CheckResponse{Allowed: true, Limit: 2, Remaining: 1, ResetAfterMS: 1000, RefillAfterMS: 1000, Owner: "n1"},
		e.check(`{"key":"u","policy":"login"}`))
	// The same state as the policy's numbers inline.
	assert.Equal(t, CheckResponse{Allowed: true, Limit: 2, CurrentCount: 1, ResetAfterMS: 1000, RefillAfterMS: 1000, Owner: "n1"},
		e.check(`{"key":"u","limit":2,"window_ms":1000,"algorithm":"SLIDING_WINDOW_LOG"}`))
	assert.False(t, e.check(`{"key":"u","policy":"login"}`).Allowed)
	assert.Equal(t, int64(100), e.check(`{"key":"u","policy":"search","hits":0}`).Remaining)

	for body, field := range map[string]string{
		`{"key":"u","policy":"nope"}`:                                   "policy",
		`{"key":"u","policy":"login","limit":2}`:                        "limit",
		`{"key":"u","policy":"login","window_ms":1000}`:                 "window_ms",
		`{"key":"u","policy":"login","algorithm":"SLIDING_WINDOW_LOG"}`: "algorithm",
		// JSON shows an explicit default, so it is refused too.
		`{"key":"u","policy":"search","algorithm":"SLIDING_WINDOW_COUNTER"}`: "algorithm",
		`{"key":"u","policy":7}`: "policy",
	} {
		rec := e.do(http.MethodPost, "/v1/check", body)
		require.Equal(t, http.StatusBadRequest, rec.Code, body)
		assert.Equal(t, field, errorOfBody(t, rec.Body.Bytes()).Field, body)
	}

	rec := e.do(http.MethodPost, "/v1/check:batch", `{"checks":[{"key":"b","policy":"login"},{"key":"b","policy":"x"}]}`)
	require.Equal(t, http.StatusOK, rec.Code)
	res := decodeBatch(t, rec.Body.Bytes())
	assert.Equal(t, int64(2), batchResponse(t, res[0]).Limit)
	assert.Equal(t, "policy", batchError(t, res[1]).Field)
}

func TestReset(t *testing.T) {
	opt, _ := withPolicySet(t)
	e := newEnv(t, opt)
	e.check(`{"key":"u","policy":"login"}`)
	e.check(`{"key":"u","policy":"login"}`)
	require.False(t, e.check(`{"key":"u","policy":"login"}`).Allowed)

	reset := func(body string) (int, string) {
		rec := e.do(http.MethodPost, "/v1/reset", body)
		return rec.Code, rec.Body.String()
	}
	code, body := reset(`{"key":"u","policy":"login"}`)
	require.Equal(t, http.StatusOK, code, body)
	assertJSON(t, ResetResponse{Owner: "n1", Existed: true, Cleared: 1}, []byte(body))
	assert.True(t, e.check(`{"key":"u","policy":"login"}`).Allowed, "the block is lifted")

	code, body = reset(`{"key":"u","window_ms":1000,"algorithm":"SLIDING_WINDOW_LOG"}`)
	require.Equal(t, http.StatusOK, code, body)
	assertJSON(t, ResetResponse{Owner: "n1", Existed: true, Cleared: 1}, []byte(body))
	code, body = reset(`{"key":"u","all_windows":true}`)
	require.Equal(t, http.StatusOK, code, body)
	assertJSON(t, ResetResponse{Owner: "n1"}, []byte(body))

	for b, field := range map[string]string{
		`{"key":"u"}`:                                   "window_ms",
		`{"key":"","all_windows":true}`:                 "key",
		`{"key":"u","all_windows":true,"policy":"x"}`:   "policy",
		`{"key":"u","all_windows":true,"window_ms":1}`:  "window_ms",
		`{"key":"u","policy":"login","window_ms":1000}`: "window_ms",
		`{"key":"u","window_ms":1000,"algorithm":"X"}`:  "algorithm",
		`{"key":"u","policy":"nope"}`:                   "policy",
		`{"key":"u","window_ms":1000,"hits":1}`:         "hits",
	} {
		code, body := reset(b)
		require.Equal(t, http.StatusBadRequest, code, b)
		assert.Equal(t, field, errorOfBody(t, []byte(body)).Field, b)
	}
	assert.Equal(t, http.StatusMethodNotAllowed, e.do(http.MethodGet, "/v1/reset", "").Code)
}

// An unreachable owner is 503 with the code's name, never a 200.
func TestResetOwnerUnreachableIs503(t *testing.T) {
	net := memnet.New(1, time.Second)
	t.Cleanup(net.Close)
	e := newEnv(t, func(o *envOpts) {
		o.rpc = func(c *svcConfig) {
			c.Peers = net.Join("n1") // and n2 never joins: its port is closed
			c.Cluster = testring.OwnedBy(t, ring.Member{ID: "n2", Addr: "n2:9090"})
		}
	})
	rec := e.do(http.MethodPost, "/v1/reset", `{"key":"u","window_ms":1000}`)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	er := errorOfBody(t, rec.Body.Bytes())
	assert.Equal(t, "UNAVAILABLE", er.Code)
	assert.Contains(t, er.Message, "owner n2")
}

func TestPoliciesEndpoint(t *testing.T) {
	opt, set := withPolicySet(t)
	e := newEnv(t, opt)
	rec := e.do(http.MethodGet, "/v1/policies", "")
	require.Equal(t, http.StatusOK, rec.Code)
	assertJSON(t, Policies{File: "policies.yaml", Digest: set.Digest, Policies: []PolicyInfo{
		{Name: "login", Algorithm: "SLIDING_WINDOW_LOG", Limit: 2, WindowMS: 1000, Window: "1s"},
		{Name: "search", Algorithm: "SLIDING_WINDOW_COUNTER", Limit: 100, WindowMS: 60000, Window: "1m0s"},
	}}, rec.Body.Bytes())

	none := newEnv(t, func(o *envOpts) { o.http.Policies = func() *policy.Set { return nil } })
	rec = none.do(http.MethodGet, "/v1/policies", "")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"file":"","digest":"","policies":[]}`, rec.Body.String())

	assert.Equal(t, http.StatusNotFound, newEnv(t).do(http.MethodGet, "/v1/policies", "").Code, "not configured: no route")
}

func TestPprofOnlyWhenEnabled(t *testing.T) {
	off := newEnv(t)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		assert.Equal(t, http.StatusNotFound, off.do(http.MethodGet, path, "").Code, path)
	}

	on := newEnv(t, func(o *envOpts) { o.http.Pprof = true })
	srv := httptest.NewServer(on.handler)
	t.Cleanup(srv.Close)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	resp, body := get("/debug/pprof/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, `href="goroutine?debug=1"`)
	assert.Contains(t, body, `href="heap?debug=1"`)

	resp, body = get("/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, body, "goroutine profile:")
	assert.Contains(t, body, "TestPprofOnlyWhenEnabled", "this very test is on a stack")

	resp, body = get("/debug/pprof/heap?gc=1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	assert.True(t, strings.HasPrefix(body, "\x1f\x8b"), "a gzipped protobuf profile")

	resp, body = get("/debug/pprof/profile?seconds=0.2")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, strings.HasPrefix(body, "\x1f\x8b"), "a gzipped CPU profile")

	resp, body = get("/debug/pprof/trace?seconds=0.1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, strings.HasPrefix(body, "go 1."), "a trace starts with its version header, got %q", body[:min(len(body), 16)])

	resp, _ = get("/debug/pprof/nope")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, body = get("/debug/pprof/profile?seconds=9999")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, body, "seconds must be")

	// The API is still there next to it.
	assert.True(t, on.check(`{"key":"p","limit":1,"window_ms":1000}`).Allowed)
}
