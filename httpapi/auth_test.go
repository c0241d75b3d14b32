package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/security"
	"github.com/peerlimit/peerlimit/security/scope"
)

const (
	httpToken = "http-token-0123456789"
	// appToken and opsToken have scopes (package scope): an
	// application's, and an operator's tools'.
	appToken = "app-token-0123456789"
	opsToken = "ops-token-0123456789"
)

func withTokenAuth(t *testing.T, metrics bool) func(*envOpts) {
	lines := []string{httpToken, appToken + " check,reserve", opsToken + " operator"}
	parsed, err := security.ParseTokenLines(lines)
	require.NoError(t, err)
	toks, err := security.NewScopedTokens(parsed)
	require.NoError(t, err)
	auth := security.NewClientAuth(toks, false)
	return func(o *envOpts) {
		o.http.Auth = func(r *http.Request) (scope.Set, error) {
			s, reason := auth.CheckScopes(r.Header.Get("Authorization"), false)
			if reason != security.OK {
				return 0, errors.New(reason.Message())
			}
			return s, nil
		}
		o.http.AuthMetrics = metrics
		o.http.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
		o.http.Members = func() Members { return Members{Self: "n1"} }
	}
}

func (e *env) doAuth(method, path, body, authorization string) *httptest.ResponseRecorder {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	return rec
}

func TestAuthGuardsTheAPIButNotProbes(t *testing.T) {
	e := newEnv(t, withTokenAuth(t, false))
	body := `{"key":"a","limit":5,"window_ms":60000}`
	for _, c := range []struct {
		method, path, body, auth string
		want                     int
	}{
		{http.MethodPost, "/v1/check", body, "", http.StatusUnauthorized},
		{http.MethodPost, "/v1/check", body, "Bearer wrong-token-0123456789", http.StatusUnauthorized},
		{http.MethodPost, "/v1/check", body, "Basic " + httpToken, http.StatusUnauthorized},
		{http.MethodPost, "/v1/check:batch", `{"checks":[` + body + `]}`, "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/members", "", "", http.StatusUnauthorized},
		{http.MethodGet, "/healthz", "", "", http.StatusOK},
		{http.MethodGet, "/metrics", "", "", http.StatusOK},
		{http.MethodGet, "/v1/members", "", "Bearer " + httpToken, http.StatusOK},
		{http.MethodPost, "/v1/check", body, "bearer " + httpToken, http.StatusOK},
		// The console's data is guarded; its page holds none and is not.
		{http.MethodGet, "/v1/cluster", "", "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/top", "", "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/inspect?key=a", "", "", http.StatusUnauthorized},
		{http.MethodGet, "/v1/cluster", "", "Bearer " + httpToken, http.StatusOK},
		{http.MethodGet, "/v1/inspect?key=a", "", "Bearer " + httpToken, http.StatusOK},
		{http.MethodGet, "/ui/", "", "", http.StatusOK},
	} {
		rec := e.doAuth(c.method, c.path, c.body, c.auth)
		require.Equal(t, c.want, rec.Code, "%s %s %q: %s", c.method, c.path, c.auth, rec.Body.String())
		if c.want == http.StatusUnauthorized {
			assert.Equal(t, `Bearer realm="peerlimit"`, rec.Header().Get("WWW-Authenticate"))
			e := errorOfBody(t, rec.Body.Bytes())
			assert.Equal(t, "UNAUTHENTICATED", e.Code)
			assert.Contains(t, e.Message, "token")
			assert.NotContains(t, rec.Body.String(), httpToken)
		}
	}
	// Only the one authorised check counted.
	rec := e.doAuth(http.MethodPost, "/v1/check", `{"key":"a","limit":5,"window_ms":60000,"hits":0}`, "Bearer "+httpToken)
	require.Equal(t, http.StatusOK, rec.Code)
	var out CheckResponse
	strictDecode(t, rec.Body.Bytes(), &out)
	assert.EqualValues(t, 1, out.CurrentCount)
}

func TestAuthMetricsOption(t *testing.T) {
	e := newEnv(t, withTokenAuth(t, true))
	assert.Equal(t, http.StatusUnauthorized, e.doAuth(http.MethodGet, "/metrics", "", "").Code)
	assert.Equal(t, http.StatusOK, e.doAuth(http.MethodGet, "/metrics", "", "Bearer "+httpToken).Code)
	assert.Equal(t, http.StatusOK, e.doAuth(http.MethodGet, "/healthz", "", "").Code)
}

// TestTokenScopes: an application's token checks and reserves, and is
// refused 403 naming the op for what gives budget back, forces it past
// the limit, clears or reads other callers' keys (issue 38, item 4); an
// operator's token does those and cannot spend; a token without scopes
// (the file's format before scopes) does everything, as before.
func TestTokenScopes(t *testing.T) {
	e := newEnv(t, withTokenAuth(t, false))
	const key = `"key":"k","limit":5,"window_ms":60000`
	check := `{` + key + `}`
	refund := `{` + key + `,"op":"REFUND","hits":1}`
	charge := `{` + key + `,"op":"CHARGE","hits":1}`
	reserve := `{` + key + `,"op":"RESERVE","hits":1}`
	hold := `{` + key + `,"op":"HOLD","hits":1,"ttl_ms":1}`
	reset := `{"key":"k","window_ms":60000}`
	type call struct{ method, path, body string }
	for _, c := range []struct {
		token string
		call
		want  int
		field string // of a 403: "op", or "" for a whole route
	}{
		{appToken, call{"POST", "/v1/check", check}, 200, ""},
		{appToken, call{"POST", "/v1/check", reserve}, 200, ""},
		{appToken, call{"POST", "/v1/check", hold}, 200, ""},
		{appToken, call{"GET", "/v1/members", ""}, 200, ""},
		{appToken, call{"POST", "/v1/check", refund}, 403, "op"},
		{appToken, call{"POST", "/v1/check", charge}, 403, "op"},
		{appToken, call{"POST", "/v1/reset", reset}, 403, ""},
		{appToken, call{"GET", "/v1/inspect?key=k", ""}, 403, ""},
		{appToken, call{"GET", "/v1/top", ""}, 403, ""},
		{appToken, call{"GET", "/v1/cluster", ""}, 403, ""},
		{appToken, call{"POST", "/v1/check:batch", `{"all_or_nothing":true,"checks":[` + check + `,` + refund + `]}`}, 403, "op"},
		{opsToken, call{"POST", "/v1/check", check}, 403, "op"},
		{opsToken, call{"POST", "/v1/check", reserve}, 403, "op"},
		{opsToken, call{"POST", "/v1/check", refund}, 200, ""},
		{opsToken, call{"POST", "/v1/check", charge}, 200, ""},
		{opsToken, call{"GET", "/v1/inspect?key=k", ""}, 200, ""},
		{opsToken, call{"POST", "/v1/reset", reset}, 200, ""},
		{httpToken, call{"POST", "/v1/check", refund}, 200, ""},
		{httpToken, call{"POST", "/v1/reset", reset}, 200, ""},
		{httpToken, call{"GET", "/v1/cluster", ""}, 200, ""},
	} {
		rec := e.doAuth(c.method, c.path, c.body, "Bearer "+c.token)
		require.Equal(t, c.want, rec.Code, "%s %s %s: %s", c.token[:3], c.path, c.body, rec.Body.String())
		if c.want == http.StatusForbidden {
			got := errorOfBody(t, rec.Body.Bytes())
			assert.Equal(t, "PERMISSION_DENIED", got.Code)
			assert.Equal(t, c.field, got.Field)
			assert.Contains(t, got.Message, "needs the token scope")
		}
	}

	// A batch answers per item: the refund refused, the check decided.
	rec := e.doAuth("POST", "/v1/check:batch", `{"checks":[`+check+`,`+refund+`]}`, "Bearer "+appToken)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	results := decodeBatch(t, rec.Body.Bytes())
	require.Len(t, results, 2)
	batchResponse(t, results[0])
	itemErr := batchError(t, results[1])
	assert.Equal(t, "PERMISSION_DENIED", itemErr.Code)
	assert.Equal(t, "op", itemErr.Field)
	assert.Contains(t, itemErr.Message, "REFUND")
}
