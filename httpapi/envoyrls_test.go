package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/envoyrls"
)

const testRLS = `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        algorithm: SLIDING_WINDOW_LOG
        shadow_mode: true
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {name: per_number, unit: minute, unit_multiplier: 10, requests_per_unit: 100}
    charge_over_limit: true
  - key: internal
    rate_limit: {unlimited: true}
all_or_nothing: true
`

func withRLS(t *testing.T, loadedAt time.Time) (func(*envOpts), *envoyrls.RuleSet) {
	rs, err := envoyrls.Parse("rls.yaml", []byte(testRLS), envoyrls.LoadOptions{})
	require.NoError(t, err)
	return func(o *envOpts) {
		o.http.EnvoyRLS = envoyrls.Viewer(func() (*envoyrls.RuleSet, time.Time) { return rs, loadedAt })
	}, rs
}

// GET /v1/envoy-rls/config shows the rules in force, as JSON or in the
// lines of envoyproxy/ratelimit's /rlconfig, with where they come from,
// their digest and when they were put in force.
func TestEnvoyRLSConfigEndpoint(t *testing.T) {
	loadedAt := time.UnixMilli(1_700_000_000_123)
	opt, rs := withRLS(t, loadedAt)
	e := newEnv(t, opt)

	rec := e.do(http.MethodGet, "/v1/envoy-rls/config", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	assertJSON(t, EnvoyRLSConfig{Source: "rls.yaml", Digest: rs.Digest, LoadedAtMS: 1_700_000_000_123, Domains: []string{"messaging"},
		AllOrNothingDomains: []string{"messaging"},
		Rules: []EnvoyRLSRule{
			{Key: "messaging.message_type_marketing.to_number", Domain: "messaging", Path: "message_type_marketing.to_number",
				Unit: "DAY", UnitMultiplier: 1, RequestsPerUnit: 5, WindowMS: 86_400_000, Algorithm: "SLIDING_WINDOW_LOG",
				ShadowMode: true, File: "rls.yaml", Line: 9},
			{Key: "messaging.to_number", Domain: "messaging", Path: "to_number", Name: "per_number", Unit: "MINUTE",
				UnitMultiplier: 10, RequestsPerUnit: 100, WindowMS: 600_000, Algorithm: "SLIDING_WINDOW_COUNTER", ChargeOverLimit: true,
				File: "rls.yaml", Line: 11},
			{Key: "messaging.internal", Domain: "messaging", Path: "internal", Unit: "UNKNOWN", UnitMultiplier: 1,
				Algorithm: "SLIDING_WINDOW_COUNTER", Unlimited: true, File: "rls.yaml", Line: 14},
		}}, rec.Body.Bytes())

	rec = e.do(http.MethodGet, "/v1/envoy-rls/config?format=text", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Equal(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
	assert.Equal(t, "# source: rls.yaml\n# digest: "+rs.Digest+"\n# loaded_at: 2023-11-14T22:13:20.123Z\n"+
		"messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: true, quota_mode: false, unit_multiplier: 1, algorithm: SLIDING_WINDOW_LOG, unlimited: false\n"+
		"messaging.to_number: unit=MINUTE requests_per_unit=100, shadow_mode: false, quota_mode: false, unit_multiplier: 10, algorithm: SLIDING_WINDOW_COUNTER, unlimited: false\n"+
		"messaging.internal: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false, unit_multiplier: 1, algorithm: SLIDING_WINDOW_COUNTER, unlimited: true\n",
		rec.Body.String())

	assert.Equal(t, http.StatusOK, e.do(http.MethodGet, "/v1/envoy-rls/config?format=json", "").Code)
	rec = e.do(http.MethodGet, "/v1/envoy-rls/config?format=yaml", "")
	require.Equal(t, http.StatusBadRequest, rec.Code)
	er := errorOfBody(t, rec.Body.Bytes())
	assert.Equal(t, "INVALID_ARGUMENT", er.Code)
	assert.Equal(t, "format", er.Field)
	assert.Contains(t, er.Message, `must be "json" or "text", got "yaml"`)
	assert.Equal(t, http.StatusMethodNotAllowed, e.do(http.MethodPost, "/v1/envoy-rls/config", "").Code)
}

func TestEnvoyRLSConfigWithoutService(t *testing.T) {
	none := newEnv(t, func(o *envOpts) {
		o.http.EnvoyRLS = envoyrls.Viewer(func() (*envoyrls.RuleSet, time.Time) { return nil, time.Time{} })
	})
	rec := none.do(http.MethodGet, "/v1/envoy-rls/config", "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	assert.Equal(t, "NOT_FOUND", errorOfBody(t, rec.Body.Bytes()).Code)
	assert.Equal(t, http.StatusNotFound, newEnv(t).do(http.MethodGet, "/v1/envoy-rls/config", "").Code, "not wired: no route")
}

// Guarded like every /v1/ route: the rules are the operator's business.
func TestEnvoyRLSConfigNeedsTheToken(t *testing.T) {
	opt, _ := withRLS(t, time.UnixMilli(0))
	e := newEnv(t, withTokenAuth(t, false), opt)
	assert.Equal(t, http.StatusUnauthorized, e.doAuth(http.MethodGet, "/v1/envoy-rls/config", "", "").Code)
	assert.Equal(t, http.StatusOK, e.doAuth(http.MethodGet, "/v1/envoy-rls/config?format=text", "", "Bearer "+httpToken).Code)
}

// The ratelimit mode's debug page is the same text, open: and a control
// plane's placeholder, never put in force, says so.
func TestRLConfigHandler(t *testing.T) {
	placeholder := &EnvoyRLSConfig{Source: "xds://cp:18000", Digest: "sha256:e3b0", Domains: []string{}, Rules: []EnvoyRLSRule{}}
	rec := httptest.NewRecorder()
	RLConfigHandler(func() *EnvoyRLSConfig { return placeholder }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/rlconfig", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, "# source: xds://cp:18000\n# digest: sha256:e3b0\n# loaded_at: never (no configuration yet)\n", rec.Body.String())

	rec = httptest.NewRecorder()
	RLConfigHandler(func() *EnvoyRLSConfig { return nil }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/rlconfig", nil))
	assert.Equal(t, http.StatusNotFound, rec.Code)
}
