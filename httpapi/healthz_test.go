package httpapi

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A configuration that failed to reload is named in /healthz, with why,
// and the status stays SERVING: the node serves from the configuration in
// force, and a bad file must not take every node out of rotation at once.
func TestHealthzNamesFailingConfig(t *testing.T) {
	var mu sync.Mutex
	failing := map[string]string{}
	e := newEnv(t, func(o *envOpts) {
		o.http.ConfigErrors = func() map[string]string {
			mu.Lock()
			defer mu.Unlock()
			return failing
		}
	})
	rec := e.do(http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"status":"SERVING"}`, rec.Body.String(), "no config_errors while none fails")

	mu.Lock()
	failing = map[string]string{"envoy_rls": `/etc/rls/edge.yaml:2: domain "edge": unknown unit "fortnight"`}
	mu.Unlock()
	rec = e.do(http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `{"status":"SERVING","config_errors":{"envoy_rls":"/etc/rls/edge.yaml:2: domain \"edge\": unknown unit \"fortnight\""}}`,
		rec.Body.String())

	// Shutting down: 503 as before, the errors still told.
	e = newEnv(t, func(o *envOpts) {
		o.http.Healthy = func() bool { return false }
		o.http.ConfigErrors = func() map[string]string { return map[string]string{"policies": "bad"} }
	})
	rec = e.do(http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.JSONEq(t, `{"status":"NOT_SERVING","config_errors":{"policies":"bad"}}`, rec.Body.String())
}
