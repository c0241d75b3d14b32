package client_test

import (
	"bufio"
	"context"
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

// settleLog records what a ReserveMiddleware settled, by user.
type settleLog struct {
	mu   sync.Mutex
	cost map[string]int64
	s    map[string]client.Settlement
}

func (l *settleLog) record(r *http.Request, cost int64, s client.Settlement) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := r.Header.Get("X-User")
	l.cost[u], l.s[u] = cost, s
}

func (l *settleLog) get(user string) (int64, client.Settlement, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.s[user]
	return l.cost[user], s, ok
}

// streamHandler writes ?use= tokens, flushing and reporting each (none
// reported without it), then fails with ?status= or panics with ?panic.
func streamHandler(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("use") {
		n, _ := strconv.Atoi(q.Get("use"))
		for range n {
			io.WriteString(w, "tok ")
			w.(http.Flusher).Flush()
			client.ReportUsage(r.Context(), 1)
		}
	}
	if code, _ := strconv.Atoi(q.Get("status")); code != 0 {
		w.WriteHeader(code)
	}
	if q.Has("panic") {
		panic("boom")
	}
}

func reserveMW(t *testing.T, cl client.Reserver, l client.Limit, log *settleLog) http.Handler {
	t.Helper()
	mw, err := client.ReserveMiddleware(cl, client.ReserveConfig{
		MiddlewareConfig: client.MiddlewareConfig{Limit: l, Key: client.KeyByHeader("X-User"), Timeout: 2 * time.Second,
			Cost: func(r *http.Request) int64 { n, _ := strconv.ParseInt(r.URL.Query().Get("max"), 10, 64); return n }},
		TTL:      time.Minute,
		OnSettle: log.record,
	})
	require.NoError(t, err)
	return mw(http.HandlerFunc(streamHandler))
}

func TestReserveMiddleware(t *testing.T) {
	c := testcluster.New(t, 2, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	l := client.Limit{Limit: 100, Window: time.Hour, Algorithm: client.SlidingWindowLog}
	log := &settleLog{cost: map[string]int64{}, s: map[string]client.Settlement{}}
	h := reserveMW(t, cl, l, log)
	serve := func(user, query string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat?"+query, nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	count := func(user string) int64 { return peekCount(t, cl, user, l) }

	// Settled at what streamed: the rest of the estimate comes back.
	rec := serve("streamed", "max=60&use=25")
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, strings.Repeat("tok ", 25), rec.Body.String())
	assert.True(t, rec.Flushed, "flushing goes through the wrapper")
	assert.Regexp(t, `^"default";r=40;t=\d+$`, rec.Header().Get("RateLimit"), "what was left after the estimate")
	cost, s, ok := log.get("streamed")
	require.True(t, ok)
	assert.EqualValues(t, 25, cost)
	assert.EqualValues(t, 35, s.Refunded)
	assert.Equal(t, client.SettledNow, s.Outcome)
	assert.EqualValues(t, 25, count("streamed"))

	// 25 + 80 > 100: denied before the handler runs.
	rec = serve("streamed", "max=80&use=1")
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.NotEmpty(t, rec.Header().Get("Retry-After"))
	assert.Empty(t, strings.TrimPrefix(rec.Body.String(), "rate limit exceeded\n"), "the handler did not run")
	assert.EqualValues(t, 25, count("streamed"))

	// Nothing reported: a success keeps its estimate, a failure gives it back.
	assert.Equal(t, http.StatusOK, serve("silent", "max=30").Code)
	assert.EqualValues(t, 30, count("silent"))
	assert.Equal(t, http.StatusBadGateway, serve("failed", "max=30&status=502").Code)
	assert.EqualValues(t, 0, count("failed"))
	cost, s, _ = log.get("failed")
	assert.Zero(t, cost)
	assert.EqualValues(t, 30, s.Refunded)
	// What streamed before a failure was spent.
	serve("failed late", "max=30&use=7&status=502")
	assert.EqualValues(t, 7, count("failed late"))

	// A panic releases, or settles what streamed, and goes on up.
	assert.PanicsWithValue(t, "boom", func() { serve("panicked", "max=30&panic") })
	assert.EqualValues(t, 0, count("panicked"))
	assert.PanicsWithValue(t, "boom", func() { serve("panicked late", "max=30&use=4&panic") })
	assert.EqualValues(t, 4, count("panicked late"))

	// An estimate the cluster refuses is the request's fault: 400.
	assert.Equal(t, http.StatusBadRequest, serve("x", "max=0").Code)
	assert.Equal(t, http.StatusBadRequest, serve("x", "max=101").Code)
}

// A caller that goes away mid-stream: the handler stops, and the
// middleware settles what it streamed, on a context the request's end
// did not cancel.
func TestReserveMiddlewareSettlesWhenTheCallerLeaves(t *testing.T) {
	c := testcluster.New(t, 1, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	l := client.Limit{Limit: 1000, Window: time.Hour, Algorithm: client.SlidingWindowLog}
	settled := make(chan int64, 1)
	mw, err := client.ReserveMiddleware(cl, client.ReserveConfig{
		MiddlewareConfig: client.MiddlewareConfig{Limit: l, Key: client.KeyByHeader("X-User"), Timeout: 2 * time.Second,
			Cost: func(*http.Request) int64 { return 500 }},
		OnSettle: func(_ *http.Request, cost int64, _ client.Settlement) { settled <- cost },
	})
	require.NoError(t, err)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 500 && r.Context().Err() == nil; i++ {
			if _, err := io.WriteString(w, "tok\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			client.ReportUsage(r.Context(), 1)
			time.Sleep(time.Millisecond)
		}
	})))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	req.Header.Set("X-User", "leaver")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	for range 3 {
		_, err := br.ReadString('\n')
		require.NoError(t, err)
	}
	cancel()
	resp.Body.Close()

	var cost int64
	select {
	case cost = <-settled:
	case <-time.After(10 * time.Second):
		t.Fatal("never settled")
	}
	assert.GreaterOrEqual(t, cost, int64(3))
	assert.Less(t, cost, int64(500), "the stream stopped early")
	assert.Equal(t, cost, peekCount(t, cl, "leaver", l))
}

// fakeReserver answers reservations with err.
type fakeReserver struct{ err error }

func (f fakeReserver) Reserve(context.Context, string, client.Limit, int64, time.Duration) (client.Reservation, error) {
	return client.Reservation{}, f.err
}
func (f fakeReserver) Settle(context.Context, client.Reservation, int64) (client.Settlement, error) {
	panic("no reservation to settle")
}
func (f fakeReserver) Release(context.Context, client.Reservation) (client.Settlement, error) {
	panic("no reservation to release")
}

func TestReserveMiddlewareErrorsAndConfig(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "no node answered")
	for _, failClosed := range []bool{false, true} {
		var reported bool
		mw, err := client.ReserveMiddleware(fakeReserver{unavailable}, client.ReserveConfig{
			MiddlewareConfig: client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP, FailClosed: failClosed}})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reported = client.ReportUsage(r.Context(), 1)
		})).ServeHTTP(rec, mwRequest())
		if failClosed {
			assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		} else {
			assert.Equal(t, http.StatusOK, rec.Code, "fails open")
			assert.False(t, reported, "unmetered: nothing to report to")
		}
	}
	assert.False(t, client.ReportUsage(context.Background(), 1))

	_, err := client.ReserveMiddleware(nil, client.ReserveConfig{MiddlewareConfig: client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}})
	assert.ErrorContains(t, err, "nil Reserver")
	_, err = client.ReserveMiddleware(fakeReserver{}, client.ReserveConfig{
		MiddlewareConfig: client.MiddlewareConfig{Limit: mwLimit, Key: client.KeyByIP}, TTL: -time.Second})
	assert.ErrorContains(t, err, "TTL")
	_, err = client.ReserveMiddleware(fakeReserver{}, client.ReserveConfig{})
	assert.ErrorContains(t, err, "Key is nil")
}
