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
)

const httpToken = "http-token-0123456789"

func withTokenAuth(t *testing.T, metrics bool) func(*envOpts) {
	toks, err := security.NewTokens([]string{httpToken})
	require.NoError(t, err)
	auth := security.NewClientAuth(toks, false)
	return func(o *envOpts) {
		o.http.Auth = func(r *http.Request) error {
			if reason := auth.Check(r.Header.Get("Authorization"), false); reason != security.OK {
				return errors.New(reason.Message())
			}
			return nil
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
