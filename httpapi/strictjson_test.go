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

func TestErrorsCapWhatTheyEcho(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 100_000)
	rec := e.do(http.MethodPost, "/v1/check", `{"`+long+`":1}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	got := errorOfBody(t, rec.Body.Bytes())
	assert.Equal(t, strings.Repeat("x", maxEcho)+"…", got.Field)
	assert.Less(t, rec.Body.Len(), 1024, rec.Body.String())
}
