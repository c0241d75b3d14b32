package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAmbiguousJSONRefused: a body that two JSON readers could read
// differently is refused naming the field (issue 38, item 6): a proxy that
// checked the first "limit" or "op" must not see another request decided.
func TestAmbiguousJSONRefused(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ path, body, field string }{
		{"/v1/check", `{"key":"a","limit":1,"limit":1000,"window_ms":1000}`, "limit"},
		{"/v1/check", `{"key":"a","limit":1,"window_ms":1000,"op":"CHECK","op":"REFUND"}`, "op"},
		{"/v1/check", `{"key":"a","limit":1,"Limit":1000,"window_ms":1000}`, "Limit"},
		{"/v1/check", `{"key":"a","limit":1,"li\u006dit":1000,"window_ms":1000}`, "limit"},
		{"/v1/check", `{"key":"a","limit":1,"window_ms":1000,"hits":null,"hits":5}`, "hits"},
		{"/v1/check", "{\"key\":\"\xff\",\"limit\":1,\"window_ms\":1000}", "key"},
		{"/v1/check", "{\"key\":\"a\xfe\",\"limit\":1,\"window_ms\":1000}", "key"},
		{"/v1/check", `{"key":"\ud800","limit":1,"window_ms":1000}`, "key"},
		{"/v1/check", `{"key":"\udc00x","limit":1,"window_ms":1000}`, "key"},
		{"/v1/check", `{"key":"\ud800\ud800","limit":1,"window_ms":1000}`, "key"},
		{"/v1/check", "{\"key\":\"a\",\"limit\":1,\"window_ms\":1000,\"op\":\"CH\xc0\"}", "op"},
		{"/v1/check:batch", `{"checks":[{"key":"a","limit":1,"window_ms":1},{"key":"b","key":"c","limit":1,"window_ms":1}]}`, "checks[1].key"},
		{"/v1/check:batch", `{"checks":[],"checks":[{"key":"b","limit":1,"window_ms":1}]}`, "checks"},
		{"/v1/check:batch", "{\"checks\":[{\"key\":\"a\",\"limit\":1,\"window_ms\":1},{\"key\":\"\xff\",\"limit\":1,\"window_ms\":1}]}", "checks[1].key"},
		{"/v1/check:batch", `{"all_or_nothing":false,"all_or_nothing":true,"checks":[]}`, "all_or_nothing"},
		{"/v1/reset", `{"key":"a","key":"b","window_ms":1000}`, "key"},
		{"/v1/reset", "{\"key\":\"\xff\",\"window_ms\":1000}", "key"},
	} {
		rec := e.do(http.MethodPost, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s %q: %s", tc.path, tc.body, rec.Body.String())
		got := errorOfBody(t, rec.Body.Bytes())
		assert.Equal(t, "INVALID_ARGUMENT", got.Code, "%q", tc.body)
		assert.Equal(t, tc.field, got.Field, "%q: %s", tc.body, got.Message)
	}
	// Nothing was counted: "a" is fresh.
	assert.Equal(t, int64(0), e.check(`{"key":"a","limit":5,"window_ms":1000,"hits":0}`).CurrentCount)
}

// TestUnambiguousJSONAccepted: what the check must not refuse.
func TestUnambiguousJSONAccepted(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{
		`{"key":"é😀","limit":1,"window_ms":1000}`,
		`{"key":"\ud83d\ude00\u00e9\"\\\/","limit":1,"window_ms":1000}`,
		`{"key":"a,b:{[\"limit\"]}","limit":1,"window_ms":1000}`, // keys inside a string are no keys
	} {
		e.check(body)
	}
	rec := e.do(http.MethodPost, "/v1/check:batch",
		`{"checks":[{"key":"a","limit":1,"window_ms":1},{"key":"a","limit":1,"window_ms":1}],"all_or_nothing":false}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
}

func TestCheckUnambiguousNeverPanics(t *testing.T) {
	for _, body := range []string{``, `"`, `{"`, `{"a\`, `{"a\u12`, `{"\u`, `}}]]`, `{"a":"\ud800`, "{\"\xff", `[{"a":1,"a"`} {
		_ = checkUnambiguous([]byte(body))
	}
}

// TestErrorsCapWhatTheyEcho: an error repeats at most 128 bytes of a value
// the client sent (issue 38, item 8): a 900 KB field name or value does
// not come back as a 1.8 MB answer.
func TestErrorsCapWhatTheyEcho(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 900_000)
	for _, tc := range []struct{ body, field string }{
		{`{"` + long + `":1}`, strings.Repeat("x", 128) + "…"},
		{`{"key":"a","limit":1,"window_ms":1000,"op":"` + long + `"}`, "op"},
		{`{"key":"a","limit":1,"window_ms":1000,"algorithm":"` + long + `"}`, "algorithm"},
		{`{"key":"a","limit":1,"calendar":"day","time_zone":"` + long + `"}`, "time_zone"},
		{`{"key":"a","limit":1,"calendar":"` + long + `"}`, "calendar"},
		{`{"key":"a","policy":"` + long + `"}`, "policy"},
		{`{"key":"` + long + `","limit":1,"window_ms":1000}`, "key"},
	} {
		rec := e.do(http.MethodPost, "/v1/check", tc.body)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		got := errorOfBody(t, rec.Body.Bytes())
		assert.Equal(t, tc.field, got.Field)
		assert.Less(t, rec.Body.Len(), 1024, rec.Body.String())
	}
	rec := e.do(http.MethodPost, "/v1/reset", `{"key":"a","policy":"`+long+`","window_ms":5}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Less(t, rec.Body.Len(), 1024, rec.Body.String())
}

// TestSaturatedNumbersSaidSo: a window_ms or ttl_ms beyond what a duration
// holds is clamped on the way in; its error says it was beyond the bound,
// not that the client sent the bound (issue 38, item 8).
func TestSaturatedNumbersSaidSo(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ body, field, want string }{
		{`{"key":"a","limit":1,"window_ms":10000000000000}`, "window_ms", "is more than 9223372036853 (saturated); the maximum is"},
		{`{"key":"a","limit":1,"window_ms":-10000000000000}`, "window_ms", "must be positive, got less than -9223372036853 (saturated)"},
		{`{"key":"a","limit":1,"window_ms":10000000000000,"algorithm":"SLIDING_WINDOW_LOG"}`, "window_ms", "more than 9223372036853 (saturated)"},
		{`{"key":"a","limit":1,"window_ms":1000,"op":"RESERVE","ttl_ms":10000000000000}`, "ttl_ms", "got more than 9223372036853 (saturated)"},
		{`{"key":"a","limit":1,"window_ms":1000,"op":"RESERVE","ttl_ms":-5}`, "ttl_ms", "got -5"},
		{`{"key":"a","limit":1,"window_ms":99999999999}`, "window_ms", "is 99999999999; the maximum is"},
	} {
		rec := e.do(http.MethodPost, "/v1/check", tc.body)
		require.Equal(t, http.StatusBadRequest, rec.Code, tc.body)
		got := errorOfBody(t, rec.Body.Bytes())
		assert.Equal(t, tc.field, got.Field, tc.body)
		assert.Contains(t, got.Message, tc.want, tc.body)
		assert.NotContains(t, got.Message, "9223372036854;", tc.body)
	}
}

// The check is one pass that allocates nothing for what clients send,
// so that it costs the hot path next to nothing.
func TestCheckUnambiguousDoesNotAllocate(t *testing.T) {
	body := []byte(`{"checks":[{"key":"user:42","limit":5,"window_ms":60000,"algorithm":"SLIDING_WINDOW_LOG","hits":1},` +
		`{"key":"é","limit":1,"window_ms":1000,"op":"RESERVE","ttl_ms":500}],"all_or_nothing":true}`)
	require.NoError(t, checkUnambiguous(body))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = checkUnambiguous(body) }))
}
