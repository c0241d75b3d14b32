package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
)

// mwCall is one CheckN a fakeChecker received.
type mwCall struct {
	key   string
	limit client.Limit
	n     int64
	ctx   context.Context
}

// fakeChecker answers every check with d and err, or with answer if set.
type fakeChecker struct {
	d      client.Decision
	err    error
	answer func(ctx context.Context) (client.Decision, error)

	mu    sync.Mutex
	calls []mwCall
}

func (f *fakeChecker) CheckN(ctx context.Context, key string, l client.Limit, n int64) (client.Decision, error) {
	f.mu.Lock()
	f.calls = append(f.calls, mwCall{key: key, limit: l, n: n, ctx: ctx})
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(ctx)
	}
	return f.d, f.err
}

func (f *fakeChecker) Calls() []mwCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]mwCall(nil), f.calls...)
}

var mwLimit = client.Limit{Limit: 100, Window: time.Minute}

// mwServe runs one request through the middleware around a handler that
// answers 200 "ok", and reports whether that handler ran.
func mwServe(t *testing.T, c client.Checker, cfg client.MiddlewareConfig, req *http.Request) (*httptest.ResponseRecorder, bool) {
	t.Helper()
	mw, err := client.Middleware(c, cfg)
	require.NoError(t, err)
	ran := false
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ran = true
		io.WriteString(w, "ok")
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec, ran
}

func mwRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/hello", nil) // RemoteAddr 192.0.2.1:1234
	r.Header.Set("X-User", "alice")
	return r
}

func TestMiddlewareAllowed(t *testing.T) {
	f := &fakeChecker{d: client.Decision{Allowed: true, Limit: 100, Remaining: 41, ResetAfter: 29200 * time.Millisecond}}
	rec, ran := mwServe(t, f, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}, mwRequest())
	assert.True(t, ran)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "ok", rec.Body.String())
	assert.Equal(t, `"default";q=100;w=60`, rec.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"default";r=41;t=30`, rec.Header().Get("RateLimit"), "t = ResetAfter rounded up")
	assert.Empty(t, rec.Header().Get("Retry-After"))
	assert.Empty(t, rec.Header().Get("X-RateLimit-Limit"), "legacy headers are opt-in")
	calls := f.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, "192.0.2.1", calls[0].key)
	assert.Equal(t, mwLimit, calls[0].limit)
	assert.EqualValues(t, 1, calls[0].n, "default cost")
}

// The counter's state lasts up to two windows, but t never exceeds the
// window: r spent within one window is always within the limit.
func TestMiddlewareAllowedTIsCappedAtTheWindow(t *testing.T) {
	f := &fakeChecker{d: client.Decision{Allowed: true, Limit: 100, Remaining: 7, ResetAfter: 110 * time.Second}}
	rec, ran := mwServe(t, f, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}, mwRequest())
	require.True(t, ran)
	assert.Equal(t, `"default";r=7;t=60`, rec.Header().Get("RateLimit"))
}

func TestMiddlewareDenied(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter time.Duration
		want       string
	}{
		{"rounded up", 12300 * time.Millisecond, "13"},
		{"whole seconds", 7 * time.Second, "7"},
		{"under a second", 200 * time.Millisecond, "1"},
		{"zero is at least 1", 0, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeChecker{d: client.Decision{Allowed: false, Limit: 100, Remaining: 0,
				RetryAfter: tc.retryAfter, ResetAfter: 50 * time.Second}}
			rec, ran := mwServe(t, f, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}, mwRequest())
			assert.False(t, ran, "the handler must not run")
			assert.Equal(t, http.StatusTooManyRequests, rec.Code)
			assert.Equal(t, "rate limit exceeded\n", rec.Body.String())
			assert.Equal(t, tc.want, rec.Header().Get("Retry-After"))
			assert.Equal(t, `"default";q=100;w=60`, rec.Header().Get("RateLimit-Policy"))
			assert.Equal(t, `"default";r=0;t=`+tc.want, rec.Header().Get("RateLimit"), "t = Retry-After when denied")
		})
	}
}

func TestMiddlewareCustomDenied(t *testing.T) {
	f := &fakeChecker{d: client.Decision{Allowed: false, Remaining: 2, RetryAfter: 3 * time.Second}}
	cfg := client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP, Policy: "per-ip",
		Denied: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"retry_after":`+w.Header().Get("Retry-After")+`}`) // no WriteHeader: 429 by default
		})}
	rec, ran := mwServe(t, f, cfg, mwRequest())
	assert.False(t, ran)
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, `{"retry_after":3}`, rec.Body.String())
	assert.Equal(t, `"per-ip";r=2;t=3`, rec.Header().Get("RateLimit"))

	// A Denied that writes nothing still answers 429; one that picks a
	// status keeps it.
	cfg.Denied = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	rec, _ = mwServe(t, f, cfg, mwRequest())
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	cfg.Denied = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) })
	rec, _ = mwServe(t, f, cfg, mwRequest())
	assert.Equal(t, http.StatusForbidden, rec.Code)
}

func TestMiddlewareDegradedIsHonoured(t *testing.T) {
	f := &fakeChecker{d: client.Decision{Allowed: true, Remaining: 5, ResetAfter: time.Second, Degraded: true}}
	rec, ran := mwServe(t, f, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}, mwRequest())
	assert.True(t, ran)
	assert.Equal(t, `"default";r=5;t=1`, rec.Header().Get("RateLimit"))

	f = &fakeChecker{d: client.Decision{Allowed: false, RetryAfter: time.Second, Degraded: true}}
	rec, ran = mwServe(t, f, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}, mwRequest())
	assert.False(t, ran)
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
}

func TestMiddlewareClusterErrorFailsOpen(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "no node answered")
	f := &fakeChecker{err: unavailable}
	var got []error
	cfg := client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP, LegacyHeaders: true,
		OnError: func(r *http.Request, err error) {
			assert.Equal(t, "/hello", r.URL.Path)
			got = append(got, err)
		}}
	rec, ran := mwServe(t, f, cfg, mwRequest())
	assert.True(t, ran, "fail open: the request is served")
	assert.Equal(t, http.StatusOK, rec.Code)
	for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		assert.Empty(t, rec.Header().Values(h), h)
	}
	require.Len(t, got, 1)
	assert.ErrorIs(t, got[0], unavailable)
}

func TestMiddlewareClusterErrorFailsClosed(t *testing.T) {
	f := &fakeChecker{err: status.Error(codes.ResourceExhausted, "key capacity reached")}
	var got []error
	cfg := client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP, FailClosed: true,
		OnError: func(_ *http.Request, err error) { got = append(got, err) }}
	rec, ran := mwServe(t, f, cfg, mwRequest())
	assert.False(t, ran)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	assert.Empty(t, rec.Header().Values("RateLimit"))
	assert.Len(t, got, 1)
}

// A check the cluster refuses as invalid comes from the request (a key too
// long or not UTF-8, a cost over the limit): 400, even when failing open,
// or a client could skip the limit by sending an oversized key.
func TestMiddlewareInvalidCheckIsRejected(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		f := &fakeChecker{err: status.Error(codes.InvalidArgument, "invalid key: is 2000 bytes; the maximum is 1024")}
		var got []error
		cfg := client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByHeader("X-User"), FailClosed: failClosed,
			OnError: func(_ *http.Request, err error) { got = append(got, err) }}
		rec, ran := mwServe(t, f, cfg, mwRequest())
		assert.False(t, ran)
		assert.Equal(t, http.StatusBadRequest, rec.Code)
		assert.Empty(t, rec.Header().Values("RateLimit"))
		require.Len(t, got, 1)
		assert.Equal(t, codes.InvalidArgument, status.Code(got[0]))
	}
}

func TestMiddlewareKeyErrorIsRejected(t *testing.T) {
	for name, key := range map[string]client.KeyFunc{
		"missing header": client.KeyByHeader("X-Api-Key"),
		"empty key":      func(*http.Request) (string, error) { return "", nil },
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeChecker{d: client.Decision{Allowed: true}}
			var got []error
			cfg := client.MiddlewareConfig{Limit: mwLimit, Key: key,
				OnError: func(_ *http.Request, err error) { got = append(got, err) }}
			rec, ran := mwServe(t, f, cfg, mwRequest())
			assert.False(t, ran)
			assert.Equal(t, http.StatusBadRequest, rec.Code)
			assert.Empty(t, f.Calls(), "nothing to check")
			assert.Empty(t, rec.Header().Values("RateLimit"))
			require.Len(t, got, 1)
			assert.ErrorIs(t, got[0], client.ErrNoKey)
		})
	}
	// Without OnError too.
	rec, ran := mwServe(t, &fakeChecker{}, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByHeader("X-Api-Key")}, mwRequest())
	assert.False(t, ran)
	assert.Equal(t, http.StatusBadRequest, rec.Code)
}

func TestMiddlewareCostAndKey(t *testing.T) {
	f := &fakeChecker{d: client.Decision{Allowed: true, Remaining: 90, ResetAfter: time.Minute}}
	cfg := client.MiddlewareConfig{Limit: mwLimit, Key: client.Prefix("user:", client.KeyByHeader("X-User")),
		Cost: func(r *http.Request) int64 { return r.ContentLength }}
	req := mwRequest()
	req.ContentLength = 7
	rec, ran := mwServe(t, f, cfg, req)
	assert.True(t, ran)
	assert.Equal(t, `"default";r=90;t=60`, rec.Header().Get("RateLimit"))
	calls := f.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, "user:alice", calls[0].key)
	assert.EqualValues(t, 7, calls[0].n)
}

func TestMiddlewareLegacyHeaders(t *testing.T) {
	cfg := client.MiddlewareConfig{Limit: client.Limit{Limit: 5, Window: 10 * time.Second}, Key: client.KeyByIP, LegacyHeaders: true}
	f := &fakeChecker{d: client.Decision{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 9500 * time.Millisecond}}
	rec, _ := mwServe(t, f, cfg, mwRequest())
	assert.Equal(t, "5", rec.Header().Get("X-RateLimit-Limit"))
	assert.Equal(t, "4", rec.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, "10", rec.Header().Get("X-RateLimit-Reset"))
	assert.Equal(t, `"default";q=5;w=10`, rec.Header().Get("RateLimit-Policy"))

	f = &fakeChecker{d: client.Decision{Allowed: false, Limit: 5, Remaining: 0, RetryAfter: 1500 * time.Millisecond, ResetAfter: 10 * time.Second}}
	rec, _ = mwServe(t, f, cfg, mwRequest())
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "5", rec.Header().Get("X-RateLimit-Limit"))
	assert.Equal(t, "0", rec.Header().Get("X-RateLimit-Remaining"))
	assert.Equal(t, "2", rec.Header().Get("X-RateLimit-Reset"))
	assert.Equal(t, "2", rec.Header().Get("Retry-After"))
}

func TestMiddlewarePolicyHeader(t *testing.T) {
	for _, tc := range []struct {
		policy string
		window time.Duration
		want   string
	}{
		{"", time.Hour, `"default";q=100;w=3600`},
		{`say "hi"\o`, time.Second, `"say \"hi\"\\o";q=100;w=1`},
		{"sub-second", 1500 * time.Millisecond, `"sub-second";q=100`}, // the draft has no fractional w
		{"tiny", 500 * time.Millisecond, `"tiny";q=100`},
	} {
		f := &fakeChecker{d: client.Decision{Allowed: true, Remaining: 1, ResetAfter: 100 * time.Millisecond}}
		cfg := client.MiddlewareConfig{Limit: client.Limit{Limit: 100, Window: tc.window}, Key: client.KeyByIP, Policy: tc.policy}
		rec, _ := mwServe(t, f, cfg, mwRequest())
		assert.Equal(t, tc.want, rec.Header().Get("RateLimit-Policy"), tc.policy)
	}
}

// The check gets Timeout within the request's context: a cluster that
// never answers costs Timeout, then the request fails open.
func TestMiddlewareTimeout(t *testing.T) {
	type ctxKey struct{}
	f := &fakeChecker{answer: func(ctx context.Context) (client.Decision, error) {
		<-ctx.Done()
		return client.Decision{}, ctx.Err()
	}}
	var got error
	cfg := client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP, Timeout: 20 * time.Millisecond,
		OnError: func(_ *http.Request, err error) { got = err }}
	req := mwRequest()
	req = req.WithContext(context.WithValue(req.Context(), ctxKey{}, "v"))
	start := time.Now()
	rec, ran := mwServe(t, f, cfg, req)
	assert.True(t, ran)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.ErrorIs(t, got, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)
	calls := f.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, "v", calls[0].ctx.Value(ctxKey{}), "derived from the request's context")

	// Default 250ms, and never beyond the request's own deadline.
	f = &fakeChecker{d: client.Decision{Allowed: true}}
	before := time.Now()
	mwServe(t, f, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}, mwRequest())
	after := time.Now()
	require.Len(t, f.Calls(), 1)
	dl, ok := f.Calls()[0].ctx.Deadline()
	require.True(t, ok)
	assert.False(t, dl.Before(before.Add(250*time.Millisecond)) || dl.After(after.Add(250*time.Millisecond)),
		"deadline %s not 250ms after the call (%s..%s)", dl, before, after)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	reqDL, _ := ctx.Deadline()
	f = &fakeChecker{d: client.Decision{Allowed: true}}
	mwServe(t, f, client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP, Timeout: time.Hour}, mwRequest().WithContext(ctx))
	require.Len(t, f.Calls(), 1)
	dl, _ = f.Calls()[0].ctx.Deadline()
	assert.Equal(t, reqDL, dl)
}

func TestMiddlewareConfigErrors(t *testing.T) {
	ok := client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}
	_, err := client.Middleware(&fakeChecker{}, ok)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		edit func(*client.MiddlewareConfig)
		want string
	}{
		{"zero limit", func(c *client.MiddlewareConfig) { c.Limit.Limit = 0 }, "Limit.Limit"},
		{"negative limit", func(c *client.MiddlewareConfig) { c.Limit.Limit = -1 }, "Limit.Limit"},
		{"zero window", func(c *client.MiddlewareConfig) { c.Limit.Window = 0 }, "Limit.Window"},
		{"sub-millisecond window", func(c *client.MiddlewareConfig) { c.Limit.Window = 1500 * time.Microsecond }, "Limit.Window"},
		{"no key", func(c *client.MiddlewareConfig) { c.Key = nil }, "Key"},
		{"negative timeout", func(c *client.MiddlewareConfig) { c.Timeout = -time.Second }, "Timeout"},
		{"policy not printable ASCII", func(c *client.MiddlewareConfig) { c.Policy = "café" }, "Policy"},
		{"policy with a newline", func(c *client.MiddlewareConfig) { c.Policy = "a\nb" }, "Policy"},
	} {
		cfg := ok
		tc.edit(&cfg)
		mw, err := client.Middleware(&fakeChecker{}, cfg)
		assert.Nil(t, mw, tc.name)
		if assert.Error(t, err, tc.name) {
			assert.Contains(t, err.Error(), tc.want, tc.name)
		}
	}
	_, err = client.Middleware(nil, ok)
	assert.ErrorContains(t, err, "Checker")
}

func TestMiddlewareKeyFuncs(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:51000"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	r.Header.Set("X-Real-IP", "198.51.100.1")
	k, err := client.KeyByIP(r)
	require.NoError(t, err)
	assert.Equal(t, "203.0.113.7", k, "forwarding headers are not trusted")

	r.RemoteAddr = "[2001:db8::1]:443"
	k, err = client.KeyByIP(r)
	require.NoError(t, err)
	assert.Equal(t, "2001:db8::1", k)
	r.RemoteAddr = "@"
	k, err = client.KeyByIP(r)
	require.NoError(t, err)
	assert.Equal(t, "@", k, "a Unix socket peer")
	r.RemoteAddr = ""
	_, err = client.KeyByIP(r)
	assert.Error(t, err)

	r.Header.Set("x-api-key", "k1")
	k, err = client.KeyByHeader("X-API-Key")(r)
	require.NoError(t, err)
	assert.Equal(t, "k1", k)
	_, err = client.KeyByHeader("X-Other")(r)
	assert.ErrorContains(t, err, "X-Other")

	either := client.FirstOf(client.Prefix("key:", client.KeyByHeader("X-Other")), client.Prefix("ip:", client.KeyByIP))
	r.RemoteAddr = "203.0.113.7:1"
	k, err = either(r)
	require.NoError(t, err)
	assert.Equal(t, "ip:203.0.113.7", k)
	r.Header.Set("X-Other", "abc")
	k, err = either(r)
	require.NoError(t, err)
	assert.Equal(t, "key:abc", k)
	r.RemoteAddr = ""
	r.Header.Del("X-Other")
	_, err = either(r)
	assert.ErrorContains(t, err, "X-Other", "every failure is reported")
	assert.ErrorContains(t, err, "RemoteAddr")
}

// End to end: a real 2-node cluster, the real client, a real HTTP server.
func TestMiddlewareEndToEnd(t *testing.T) {
	c := testcluster.New(t, 2, nil)
	var eps []string
	for _, n := range c.Live() {
		eps = append(eps, n.GRPCAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Endpoints: eps})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })

	mw, err := client.Middleware(cl, client.MiddlewareConfig{
		Limit: client.Limit{Limit: 3, Window: time.Minute}, Key: client.KeyByHeader("X-User"),
		Timeout: 2 * time.Second, // a loaded -race run must not fail open
		OnError: func(_ *http.Request, err error) {
			if !errors.Is(err, client.ErrNoKey) && status.Code(err) != codes.InvalidArgument {
				t.Errorf("OnError: %v", err)
			}
		},
	})
	require.NoError(t, err)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello")
	})))
	t.Cleanup(srv.Close)

	get := func(user string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set("X-User", user)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 3 {
		resp := get("alice")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
		assert.Equal(t, `"default";q=3;w=60`, resp.Header.Get("RateLimit-Policy"))
		assert.Regexp(t, `^"default";r=`+strconv.Itoa(2-i)+`;t=\d+$`, resp.Header.Get("RateLimit"))
	}
	resp := get("alice")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	assert.True(t, ra >= 1 && ra <= 120, "Retry-After %d", ra)
	assert.Equal(t, `"default";r=0;t=`+strconv.Itoa(ra), resp.Header.Get("RateLimit"))

	resp = get("bob")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "another key has its own quota")
	assert.Equal(t, `"default";q=3;w=60`, resp.Header.Get("RateLimit-Policy"))

	resp = get("")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "no key")
	resp = get(strings.Repeat("x", 2000))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "a key over the nodes' --max-key-bytes is refused, not failed open")
}
