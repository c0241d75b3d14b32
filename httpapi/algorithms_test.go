package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/policy"
	"github.com/peerlimit/peerlimit/route"
)

// recorder is a real route.Service that also keeps every request the
// handler hands it: what the JSON body became on its way to the store.
type recorder struct {
	*route.Service
	mu   sync.Mutex
	seen []limiter.Request
}

func (r *recorder) Check(ctx context.Context, req limiter.Request) peer.Result {
	r.keep(req)
	return r.Service.Check(ctx, req)
}

func (r *recorder) CheckBatch(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error) {
	r.keep(reqs...)
	return r.Service.CheckBatch(ctx, reqs)
}

func (r *recorder) keep(reqs ...limiter.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, reqs...)
}

func (r *recorder) last(t *testing.T) limiter.Request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.seen, "no request reached the service")
	return r.seen[len(r.seen)-1]
}

func newRecorder(t *testing.T, set *policy.Set) (*recorder, http.Handler) {
	t.Helper()
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	clock := fakeclock.AtMilli(t0)
	deps := route.Deps{NodeID: "n1", Store: store, Now: clock.Now}
	if set != nil {
		deps.Policies = set
	}
	svc, err := route.NewService(route.DefaultConfig(), deps)
	require.NoError(t, err)
	rec := &recorder{Service: svc}
	h, err := NewHandler(rec, DefaultConfig(), Deps{})
	require.NoError(t, err)
	return rec, h
}

func post(h http.Handler, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// GCRA's burst and CONCURRENCY's ACQUIRE reach the store as the limiter
// requests they name, alone and in a batch. (What the store answers is
// the store's: limiter's tests.)
func TestGCRAAndConcurrencyReachTheStore(t *testing.T) {
	cases := []struct {
		name, body string
		want       limiter.Request
	}{
		{"GCRA with burst", `{"key":"u","limit":10,"window_ms":1000,"algorithm":"GCRA","burst":50}`,
			limiter.Request{Key: "u", Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 50, Hits: 1}},
		{"GCRA without burst", `{"key":"u","limit":10,"window_ms":1000,"algorithm":"GCRA","hits":3}`,
			limiter.Request{Key: "u", Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Hits: 3}},
		{"ACQUIRE", `{"key":"c","limit":5,"window_ms":30000,"algorithm":"CONCURRENCY","op":"ACQUIRE"}`,
			limiter.Request{Key: "c", Limit: 5, Window: 30 * time.Second, Algorithm: limiter.Concurrency, Op: limiter.OpAcquire, Hits: 1}},
		{"RELEASE of a slot", `{"key":"c","limit":5,"window_ms":30000,"algorithm":"CONCURRENCY","op":"RELEASE","reservation":"r1"}`,
			limiter.Request{Key: "c", Limit: 5, Window: 30 * time.Second, Algorithm: limiter.Concurrency, Op: limiter.OpRelease, Reservation: "r1"}},
		{"peek", `{"key":"c","limit":5,"window_ms":30000,"algorithm":"CONCURRENCY","hits":0}`,
			limiter.Request{Key: "c", Limit: 5, Window: 30 * time.Second, Algorithm: limiter.Concurrency}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, h := newRecorder(t, nil)
			post(h, "/v1/check", c.body)
			assert.Equal(t, c.want, rec.last(t))
			post(h, "/v1/check:batch", `{"checks":[`+c.body+`]}`)
			assert.Equal(t, c.want, rec.last(t), "in a batch")
		})
	}
}

// A policy's burst reaches the store; a request naming a policy may not
// give its own.
func TestGCRAPolicyJSON(t *testing.T) {
	set, err := policy.Parse("p.yaml", []byte("upload: {algorithm: GCRA, limit: 10, window: 1s, burst: 50}\n"), nil)
	require.NoError(t, err)
	rec, h := newRecorder(t, set)
	post(h, "/v1/check", `{"key":"u","policy":"upload","hits":2}`)
	assert.Equal(t, limiter.Request{Key: "u", Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 50, Hits: 2}, rec.last(t))

	r := post(h, "/v1/check", `{"key":"u","policy":"upload","burst":5}`)
	require.Equal(t, http.StatusBadRequest, r.Code, r.Body.String())
	assert.Equal(t, "burst", errorOfBody(t, r.Body.Bytes()).Field)

	e := newEnv(t, func(o *envOpts) { o.http.Policies = func() *policy.Set { return set } })
	resp := e.do(http.MethodGet, "/v1/policies", "")
	require.Equal(t, http.StatusOK, resp.Code)
	var ps Policies
	strictDecode(t, resp.Body.Bytes(), &ps)
	assert.Equal(t, []PolicyInfo{{Name: "upload", Algorithm: "GCRA", Limit: 10, WindowMS: 1000, Window: "1s", Burst: 50}}, ps.Policies)
}

// Every bad combination is a 400 naming its field, before any store
// decides anything.
func TestGCRAAndConcurrencyErrorsNameTheField(t *testing.T) {
	e := newEnv(t)
	for body, field := range map[string]string{
		`{"key":"u","limit":10,"window_ms":1000,"algorithm":"GCRA","burst":0}`:                        "burst",
		`{"key":"u","limit":10,"window_ms":1000,"algorithm":"GCRA","burst":-1}`:                       "burst",
		`{"key":"u","limit":10,"window_ms":1000,"burst":5}`:                                           "burst",
		`{"key":"u","limit":10,"window_ms":1000,"algorithm":"SLIDING_WINDOW_LOG","burst":5}`:          "burst",
		`{"key":"u","limit":10,"window_ms":1000,"algorithm":"GCRA","burst":"5"}`:                      "burst",
		`{"key":"u","limit":10,"window_ms":1000,"algorithm":"GCRA","burst":4,"hits":5}`:               "hits",
		`{"key":"u","limit":10,"window_ms":1000,"algorithm":"gcra"}`:                                  "algorithm",
		`{"key":"u","limit":10,"window_ms":1000,"algorithm":"TOKEN_BUCKET"}`:                          "algorithm",
		`{"key":"u","limit":10,"calendar":"day","algorithm":"GCRA"}`:                                  "algorithm",
		`{"key":"c","limit":5,"window_ms":1000,"op":"ACQUIRE"}`:                                       "op",
		`{"key":"c","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"RESERVE"}`:             "op",
		`{"key":"c","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"ACQUIRE","hits":2}`:    "hits",
		`{"key":"c","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"ACQUIRE","ttl_ms":10}`: "ttl_ms",
		`{"key":"c","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"RELEASE"}`:             "reservation",
		`{"key":"c","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"acquire"}`:             "op",
		`{"key":"c","limit":20000,"window_ms":1000,"algorithm":"CONCURRENCY","op":"ACQUIRE"}`:         "limit",
		`{"key":"c","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"ACQUIRE","burst":2}`:   "burst",
		`{"key":"c","limit":5,"algorithm":"CONCURRENCY","op":"ACQUIRE","calendar":"day"}`:             "algorithm",
	} {
		rec := e.do(http.MethodPost, "/v1/check", body)
		require.Equal(t, http.StatusBadRequest, rec.Code, body)
		assert.Equal(t, field, errorOfBody(t, rec.Body.Bytes()).Field, body)
	}
}
