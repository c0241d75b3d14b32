package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/field"
)

// browserPost is a request as a browser sends it from a page: a "simple"
// request (no preflight) with its Origin and Sec-Fetch-Site headers; empty
// values are left out.
func (e *env) browserPost(path, contentType, body, origin, fetchSite string) *httptest.ResponseRecorder {
	e.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://node.internal:8080"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if fetchSite != "" {
		req.Header.Set("Sec-Fetch-Site", fetchSite)
	}
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	return rec
}

func assertNoCORS(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	for name := range rec.Header() {
		assert.False(t, strings.HasPrefix(name, "Access-Control-"), "CORS header %s in %v", name, rec.Header())
	}
}

// TestCrossSiteBrowserRequestsRefused: a page on another site cannot reset
// a key or spend a limit through a visitor's browser (issue 38, item 5),
// whatever body it can send without a preflight; curl-shaped requests,
// which carry neither Origin nor Sec-Fetch-Site, keep working.
func TestCrossSiteBrowserRequestsRefused(t *testing.T) {
	e := newEnv(t)
	const spend = `{"key":"victim","limit":5,"window_ms":60000}`
	e.check(spend)
	e.check(spend)

	for _, tc := range []struct{ name, path, ctype, body, origin, site string }{
		{"text/plain reset", "/v1/reset", "text/plain", `{"key":"victim","window_ms":60000}`, "https://evil.example", "cross-site"},
		{"text/plain reset, Origin only", "/v1/reset", "text/plain", `{"key":"victim","window_ms":60000}`, "https://evil.example", ""},
		{"form spend", "/v1/check", "application/x-www-form-urlencoded", spend, "https://evil.example", "cross-site"},
		{"multipart batch", "/v1/check:batch", "multipart/form-data; boundary=x", `{"checks":[` + spend + `]}`, "https://evil.example", ""},
		{"same-site is not same-origin", "/v1/check", "text/plain", spend, "http://other.internal:8080", "same-site"},
		{"Sec-Fetch-Site alone", "/v1/check", "text/plain", spend, "", "cross-site"},
		{"null origin (sandboxed frame)", "/v1/check", "text/plain", spend, "null", ""},
	} {
		rec := e.browserPost(tc.path, tc.ctype, tc.body, tc.origin, tc.site)
		require.Equal(t, http.StatusForbidden, rec.Code, "%s: %s", tc.name, rec.Body.String())
		got := errorOfBody(t, rec.Body.Bytes())
		assert.Equal(t, "PERMISSION_DENIED", got.Code, tc.name)
		assert.Equal(t, "Origin", got.Field, tc.name)
		assert.Contains(t, got.Message, "--allowed-origins", tc.name)
		assertNoCORS(t, rec)
	}
	// Neither the resets nor the spends happened.
	assert.Equal(t, int64(2), e.check(`{"key":"victim","limit":5,"window_ms":60000,"hits":0}`).CurrentCount)

	// curl -d sends a form Content-Type, and no Origin: it still works, as
	// do same-origin requests (the console's page) and JSON clients.
	for _, tc := range []struct{ name, ctype, origin, site string }{
		{"curl -d", "application/x-www-form-urlencoded", "", ""},
		{"server-side JSON client", "application/json", "", ""},
		{"same origin by Sec-Fetch-Site", "application/json", "http://node.internal:8080", "same-origin"},
		{"same origin by Origin", "text/plain", "http://node.internal:8080", ""},
		{"typed in the address bar", "text/plain", "", "none"},
	} {
		rec := e.browserPost("/v1/check", tc.ctype, spend, tc.origin, tc.site)
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", tc.name, rec.Body.String())
		assertNoCORS(t, rec)
	}
	// A cross-site GET changes nothing and gets no CORS header: the page
	// cannot read the answer.
	req := httptest.NewRequest(http.MethodGet, "http://node.internal:8080/healthz", nil)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code)
	assertNoCORS(t, rec)
}

// TestAllowedOrigins: an origin the operator allows may call the API from
// a browser, preflight included, and only it gets CORS headers.
func TestAllowedOrigins(t *testing.T) {
	e := newEnv(t, func(o *envOpts) { o.http.AllowedOrigins = []string{"https://app.example"} })
	const spend = `{"key":"k","limit":5,"window_ms":60000}`

	pre := httptest.NewRequest(http.MethodOptions, "http://node.internal:8080/v1/check", nil)
	pre.Header.Set("Origin", "https://app.example")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, pre)
	require.Equal(t, http.StatusNoContent, rec.Code)
	assert.Equal(t, "https://app.example", rec.Header().Get("Access-Control-Allow-Origin"))
	assert.Contains(t, rec.Header().Get("Access-Control-Allow-Methods"), "POST")
	assert.Contains(t, rec.Header().Get("Access-Control-Allow-Headers"), "Authorization")

	rec = e.browserPost("/v1/check", "application/json", spend, "https://app.example", "cross-site")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "https://app.example", rec.Header().Get("Access-Control-Allow-Origin"))
	assert.Equal(t, "Origin", rec.Header().Get("Vary"))

	rec = e.browserPost("/v1/check", "application/json", spend, "https://app.example.evil", "cross-site")
	require.Equal(t, http.StatusForbidden, rec.Code)
	assertNoCORS(t, rec)
}

func TestAllowedOriginsValidated(t *testing.T) {
	for _, bad := range []string{"app.example", "https://app.example/path", "*", ""} {
		cfg := DefaultConfig()
		cfg.AllowedOrigins = []string{"https://ok.example", bad}
		err := cfg.Validate()
		var fe *field.Error
		require.ErrorAs(t, err, &fe, "%q", bad)
		assert.Equal(t, "AllowedOrigins[1]", fe.Path)
	}
	cfg := DefaultConfig()
	cfg.AllowedOrigins = []string{"https://ok.example", "http://localhost:3000"}
	require.NoError(t, cfg.Validate())
}
