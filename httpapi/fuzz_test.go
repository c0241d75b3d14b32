package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/route"
)

const (
	fuzzMaxBody  = 4096
	fuzzMaxBatch = 16
)

// newFuzzHandler is the real handler over a real store, with a clock that
// moves 1 ms per reading so that fuzzed traffic also exercises windows
// rolling over.
func newFuzzHandler(t testing.TB) http.Handler {
	t.Helper()
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	clock := fakeclock.AtMilli(t0)
	cfg := route.DefaultConfig()
	cfg.MaxBatch = fuzzMaxBatch
	svc, err := route.NewService(cfg, route.Deps{NodeID: "n1", Store: store,
		Now: func() time.Time { clock.Advance(time.Millisecond); return clock.Now() }})
	require.NoError(t, err)
	h, err := NewHandler(svc, Config{MaxBodyBytes: fuzzMaxBody}, Deps{})
	require.NoError(t, err)
	return h
}

var fuzzCheckSeeds = []string{
	`{"key":"a","limit":2,"window_ms":1000}`,
	`{"key":"a","limit":2,"window_ms":1000,"algorithm":"SLIDING_WINDOW_LOG"}`,
	`{"key":"a","limit":2,"window_ms":1000,"algorithm":"SLIDING_WINDOW_COUNTER","hits":2}`,
	`{"key":"a","limit":5,"window_ms":1,"hits":0}`,
	`{"key":"a","limit":1,"window_ms":1000,"hits":null}`,
	`{"key":"a","limit":9223372036854775807,"window_ms":31622400000,"hits":9223372036854775807}`,
	`{"key":"a","limit":10000,"window_ms":4294967295,"algorithm":"SLIDING_WINDOW_LOG","hits":10000}`,
	`{"key":"a","limit":1,"window_ms":-288230376151710744}`,
	`{"key":"a","limit":1,"window_ms":9223372036854775807}`,
	`{"key":"a","limit":1,"window_ms":1000}}`,
	`{"key":"a","limit":1,"window_ms":1000} x`,
	`{"key":"","limit":0,"window_ms":0,"hits":-1}`,
	`{"key":"a","limit":"5","window_ms":1.5}`,
	`{"key":"a","windows_ms":1}`,
	`{"":1}`,
	`{"key":"\ud800","limit":1,"window_ms":1}`,
	`{"key":"a","limit":1,"window_ms":1,"algorithm":"TOKEN_BUCKET"}`,
	`{"key":"` + strings.Repeat("k", 1025) + `","limit":1,"window_ms":1}`,
	`{"key":"` + strings.Repeat("k", fuzzMaxBody) + `"}`,
	`null`, `[]`, `""`, `{`, ``, "\xff\xfe", `{"key":"a","limit":1e400}`,
	// Calendar limits, and what is refused about them.
	`{"key":"a","limit":5,"calendar":"month","time_zone":"Europe/Paris"}`,
	`{"key":"a","limit":5,"calendar":"WEEK","hits":5}`,
	`{"key":"a","limit":5,"calendar":"day","time_zone":"America/Santiago","hits":0}`,
	`{"key":"a","limit":5,"calendar":"month","window_ms":1000}`,
	`{"key":"a","limit":5,"calendar":"month","algorithm":"SLIDING_WINDOW_LOG"}`,
	`{"key":"a","limit":5,"calendar":"fortnight"}`,
	`{"key":"a","limit":5,"calendar":"year","time_zone":"Local"}`,
	`{"key":"a","limit":5,"window_ms":1000,"time_zone":"UTC"}`,
	`{"key":"a","limit":5,"calendar":7}`,
	// GCRA and CONCURRENCY, and what is refused about them. (A burst over
	// the limit and an admitted ACQUIRE are left out until the store
	// decides them: what it reports as their limit and remaining is the
	// store's to settle, and checkResponseInvariants may need to learn it.)
	`{"key":"a","limit":5,"window_ms":1000,"algorithm":"GCRA"}`,
	`{"key":"a","limit":5,"window_ms":1000,"algorithm":"GCRA","burst":5,"hits":5}`,
	`{"key":"a","limit":5,"window_ms":1000,"algorithm":"GCRA","burst":0}`,
	`{"key":"a","limit":5,"window_ms":1000,"algorithm":"GCRA","burst":-9223372036854775808}`,
	`{"key":"a","limit":5,"window_ms":1000,"burst":2}`,
	`{"key":"a","limit":5000,"window_ms":1,"algorithm":"GCRA"}`,
	`{"key":"a","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"ACQUIRE","hits":2}`,
	`{"key":"a","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"RELEASE","reservation":"x"}`,
	`{"key":"a","limit":5,"window_ms":1000,"algorithm":"CONCURRENCY","op":"HOLD","hits":1}`,
	`{"key":"a","limit":5,"window_ms":1000,"op":"ACQUIRE"}`,
	// Ambiguous bodies (issue 38, item 6): duplicate keys, in any case or
	// escaped, and strings that are not UTF-8.
	`{"key":"a","limit":1,"limit":1000,"window_ms":1000}`,
	`{"key":"a","limit":1,"window_ms":1000,"op":"CHECK","op":"REFUND","hits":1}`,
	`{"key":"a","limit":1,"LIMIT":1000,"window_ms":1000}`,
	`{"key":"a","limit":1,"\u006cimit":1000,"window_ms":1000}`,
	"{\"key\":\"\xff\",\"limit\":1,\"window_ms\":1000}",
	`{"key":"\udfff\ud800","limit":1,"window_ms":1000}`,
}

var fuzzBatchSeeds = []string{
	`{"checks":[]}`,
	`{}`,
	`{"checks":null}`,
	`{"checks":[{"key":"a","limit":2,"window_ms":1000},{"key":"","limit":2,"window_ms":1000},{"key":"a","limit":2,"window_ms":1000,"algorithm":"SLIDING_WINDOW_LOG","hits":2}]}`,
	`{"checks":[null,{},{"key":"a","limit":1,"window_ms":1,"algorithm":"TOKEN_BUCKET"}]}`,
	`{"checks":[{"key":"a","limit":5,"window_ms":1000,"algorithm":"GCRA","burst":3},{"key":"a","limit":5,"window_ms":1000,"algorithm":"GCRA","burst":0},{"key":"c","limit":2,"window_ms":1000,"algorithm":"CONCURRENCY","op":"SETTLE","hits":1}]}`,
	`{"checks":[{"limit":"x"}]}`,
	`{"checks":[1]}`,
	`{"checks":{}}`,
	`{"checks":[{"key":"a","limits":1}]}`,
	`{"checks":[]}]`,
	`{"checks":[` + strings.TrimSuffix(strings.Repeat(`{"key":"a","limit":100,"window_ms":10},`, fuzzMaxBatch+1), ",") + `]}`,
	`{"key":"a","limit":1,"window_ms":1000}`,
	`[`, ``,
	`{"checks":[{"key":"a","limit":1,"window_ms":1,"key":"b"}]}`,
	`{"checks":[],"checks":[{"key":"a","limit":1,"window_ms":1}]}`,
	`{"all_or_nothing":true,"checks":[{"key":"a","limit":1,"window_ms":1}],"ALL_OR_NOTHING":false}`,
}

// serveFuzz posts body to path and checks what every answer must satisfy.
// It returns the recorder for target-specific checks.
func serveFuzz(t *testing.T, h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)

	require.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge}, rec.Code,
		"body %q answered %d %s", body, rec.Code, rec.Body.String())
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.True(t, json.Valid(rec.Body.Bytes()), "invalid JSON answer %q", rec.Body.String())

	switch rec.Code {
	case http.StatusBadRequest:
		e := fuzzError(t, rec.Body.Bytes())
		require.Equal(t, "INVALID_ARGUMENT", e.Code, "body %q", body)
		require.NotEmpty(t, e.Message, "body %q", body)
	case http.StatusConflict: // a settle retried at another cost than the first
		e := fuzzError(t, rec.Body.Bytes())
		require.Equal(t, "FAILED_PRECONDITION", e.Code, "body %q", body)
		require.Equal(t, "hits", e.Field, "body %q", body)
	case http.StatusRequestEntityTooLarge:
		e := fuzzError(t, rec.Body.Bytes())
		require.Equal(t, "RESOURCE_EXHAUSTED", e.Code, "body %q", body)
		require.NotEmpty(t, e.Message, "body %q", body)
	}
	return rec
}

func fuzzError(t *testing.T, body []byte) Error {
	var out struct {
		Error *Error `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	require.NotNil(t, out.Error, "error answer without error: %s", body)
	return *out.Error
}

// skipKnownBugs fails on an accepted body that only the bugs fixed by
// TestCheckTrailingClosingBracketRejected and
// TestCheckNegativeWindowOverflowRejected would let through.
func skipKnownBugs(t *testing.T, body []byte, windows ...int64) {
	if !json.Valid(body) {
		// See TestCheckTrailingClosingBracketRejected.
		t.Fatalf("accepted a body that is not one JSON value: %q", body)
	}
	for _, w := range windows {
		if w <= 0 {
			// See TestCheckNegativeWindowOverflowRejected.
			t.Fatalf("decided window_ms %d", w)
		}
	}
}

// checkResponseInvariants holds for every decided check.
func checkResponseInvariants(t *testing.T, r CheckResponse) {
	require.Equal(t, "n1", r.Owner)
	require.Positive(t, r.Limit)
	require.GreaterOrEqual(t, r.Remaining, int64(0))
	require.LessOrEqual(t, r.Remaining, r.Limit)
	require.GreaterOrEqual(t, r.CurrentCount, int64(0))
	require.GreaterOrEqual(t, r.ResetAfterMS, int64(0))
	require.GreaterOrEqual(t, r.RefillAfterMS, int64(0))
	if r.Allowed {
		require.Zero(t, r.RetryAfterMS, "allowed with retry_after_ms")
	} else {
		require.Positive(t, r.RetryAfterMS, "denied without retry_after_ms")
	}
}

func FuzzDecodeCheck(f *testing.F) {
	for _, s := range fuzzCheckSeeds {
		f.Add([]byte(s))
	}
	h := newFuzzHandler(f)
	// Current tokens of this handler's own reservation (issue 38):
	// rewritten, twice in a body, as issued.
	rewritten, duplicate, valid := tokenBodies(f, h)
	for _, s := range append(append(rewritten, duplicate...), valid...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serveFuzz(t, h, "/v1/check", body)
		switch rec.Code {
		case http.StatusOK:
			var r CheckResponse
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&r))
			checkResponseInvariants(t, r)
			// Only a body Decode accepts is decided.
			var in CheckRequest
			require.NoError(t, Decode(body, &in), "decided a body Decode rejects: %q", body)
			assert.Equal(t, in.Limit, r.Limit)
			if in.Calendar == "" {
				skipKnownBugs(t, body, in.WindowMS)
			} else {
				require.Zero(t, in.WindowMS, "decided a calendar limit with a window")
				skipKnownBugs(t, body)
			}
		case http.StatusRequestEntityTooLarge:
			require.Greater(t, len(body), fuzzMaxBody, "413 for a body within MaxBodyBytes")
		}
	})
}

func FuzzDecodeBatch(f *testing.F) {
	for _, s := range fuzzBatchSeeds {
		f.Add([]byte(s))
	}
	h := newFuzzHandler(f)
	for _, s := range tokenBatchBodies(tokenBodies(f, h)) { // as FuzzDecodeCheck's
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := serveFuzz(t, h, "/v1/check:batch", body)
		switch rec.Code {
		case http.StatusOK:
			var in CheckBatchRequest
			require.NoError(t, Decode(body, &in), "decided a body Decode rejects: %q", body)
			require.LessOrEqual(t, len(in.Checks), fuzzMaxBatch)
			skipKnownBugs(t, body)

			var out struct {
				Results []map[string]json.RawMessage `json:"results"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
			require.NotNil(t, out.Results, "results is null")
			require.Len(t, out.Results, len(in.Checks), "one result per item")
			for i, res := range out.Results {
				require.Len(t, res, 1, "item %d: exactly one of response and error: %s", i, rec.Body.String())
				if raw, ok := res["response"]; ok {
					var r CheckResponse
					require.NoError(t, json.Unmarshal(raw, &r))
					checkResponseInvariants(t, r)
					assert.Equal(t, in.Checks[i].Limit, r.Limit, "item %d answered out of order", i)
					skipKnownBugs(t, body, in.Checks[i].WindowMS)
					continue
				}
				var e Error
				require.NoError(t, json.Unmarshal(res["error"], &e), "item %d: %s", i, rec.Body.String())
				if e.Code == "FAILED_PRECONDITION" { // a settle retried at another cost
					require.Equal(t, "hits", e.Field, "item %d", i)
					continue
				}
				require.Equal(t, "INVALID_ARGUMENT", e.Code, "item %d", i)
				require.NotEmpty(t, e.Field, "item %d", i)
				require.NotEmpty(t, e.Message, "item %d", i)
			}
		case http.StatusRequestEntityTooLarge:
			if len(body) <= fuzzMaxBody {
				var in CheckBatchRequest
				require.NoError(t, Decode(body, &in))
				require.Greater(t, len(in.Checks), fuzzMaxBatch, "413 for a batch within both limits")
			}
		}
	})
}
