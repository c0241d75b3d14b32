package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/policy"
)

// t0 is 2023-11-14T22:13:20Z: a calendar day in UTC has 1h46m40s left,
// a day in Paris (UTC+1 in November) 46m40s.
const (
	leftOfUTCDay   = int64((time.Hour + 46*time.Minute + 40*time.Second) / time.Millisecond)
	leftOfParisDay = int64((46*time.Minute + 40*time.Second) / time.Millisecond)
)

func TestCalendarCheckJSON(t *testing.T) {
	e := newEnv(t)
	assert.Equal(t, CheckResponse{Allowed: true, Limit: 2, Remaining: 1, ResetAfterMS: leftOfParisDay, RefillAfterMS: leftOfParisDay, Owner: "n1"},
		e.check(`{"key":"u","limit":2,"calendar":"day","time_zone":"Europe/Paris"}`))
	assert.Equal(t, CheckResponse{Allowed: true, Limit: 2, Remaining: 1, ResetAfterMS: leftOfUTCDay, RefillAfterMS: leftOfUTCDay, Owner: "n1"},
		e.check(`{"key":"u","limit":2,"calendar":"DAY"}`), "UTC is another limit")
	e.check(`{"key":"u","limit":2,"calendar":"day","time_zone":"Europe/Paris"}`)
	assert.Equal(t, CheckResponse{Allowed: false, Limit: 2, CurrentCount: 2, RetryAfterMS: leftOfParisDay, ResetAfterMS: leftOfParisDay,
		RefillAfterMS: leftOfParisDay, Owner: "n1"}, e.check(`{"key":"u","limit":2,"calendar":"day","time_zone":"Europe/Paris"}`))

	e.clock.Advance(time.Duration(leftOfParisDay) * time.Millisecond)
	assert.True(t, e.check(`{"key":"u","limit":2,"calendar":"day","time_zone":"Europe/Paris"}`).Allowed, "a new day in Paris")

	for body, field := range map[string]string{
		`{"key":"u","limit":2,"calendar":"fortnight"}`:                            "calendar",
		`{"key":"u","limit":2,"calendar":"day","time_zone":"Mars/Olympus"}`:       "time_zone",
		`{"key":"u","limit":2,"calendar":"day","time_zone":"Local"}`:              "time_zone",
		`{"key":"u","limit":2,"window_ms":1000,"time_zone":"Europe/Paris"}`:       "time_zone",
		`{"key":"u","limit":2,"calendar":"day","window_ms":1000}`:                 "window_ms",
		`{"key":"u","limit":2,"calendar":"day","algorithm":"SLIDING_WINDOW_LOG"}`: "algorithm",
		`{"key":"u","limit":2,"calendar":7}`:                                      "calendar",
	} {
		rec := e.do(http.MethodPost, "/v1/check", body)
		require.Equal(t, http.StatusBadRequest, rec.Code, body)
		assert.Equal(t, field, errorOfBody(t, rec.Body.Bytes()).Field, body)
	}
}

func TestCalendarPolicyAndResetJSON(t *testing.T) {
	set, err := policy.Parse("policies.yaml", []byte("monthly: {limit: 3, calendar: month, time_zone: Europe/Paris}\n"), nil)
	require.NoError(t, err)
	e := newEnv(t, func(o *envOpts) {
		o.rpc = func(c *svcConfig) { c.Policies = set }
		o.http.Policies = func() *policy.Set { return set }
	})
	e.check(`{"key":"u","policy":"monthly","hits":3}`)
	assert.EqualValues(t, 3, e.check(`{"key":"u","limit":3,"calendar":"month","time_zone":"Europe/Paris","hits":0}`).CurrentCount,
		"the policy's state is its numbers' inline")
	for body, field := range map[string]string{
		`{"key":"u","policy":"monthly","calendar":"month"}`:         "calendar",
		`{"key":"u","policy":"monthly","time_zone":"Europe/Paris"}`: "time_zone",
	} {
		rec := e.do(http.MethodPost, "/v1/check", body)
		require.Equal(t, http.StatusBadRequest, rec.Code, body)
		assert.Equal(t, field, errorOfBody(t, rec.Body.Bytes()).Field, body)
	}

	rec := e.do(http.MethodGet, "/v1/policies", "")
	require.Equal(t, http.StatusOK, rec.Code)
	var ps Policies
	strictDecode(t, rec.Body.Bytes(), &ps)
	assert.Equal(t, []PolicyInfo{{Name: "monthly", Algorithm: "SLIDING_WINDOW_COUNTER", Limit: 3, Window: "0s", Calendar: "MONTH", TimeZone: "Europe/Paris"}}, ps.Policies)

	rec = e.do(http.MethodGet, "/v1/inspect?key=u", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var in Inspect
	strictDecode(t, rec.Body.Bytes(), &in)
	require.Len(t, in.Limits, 1)
	assert.Equal(t, "MONTH", in.Limits[0].Calendar)
	assert.Equal(t, "Europe/Paris", in.Limits[0].TimeZone)
	assert.EqualValues(t, 3, in.Limits[0].Counter.Current)

	rec = e.do(http.MethodPost, "/v1/reset", `{"key":"u","calendar":"month"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"existed":false`, "month in UTC is another limit")
	rec = e.do(http.MethodPost, "/v1/reset", `{"key":"u","calendar":"month","time_zone":"Europe/Paris"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	assert.Contains(t, rec.Body.String(), `"existed":true`)
	assert.Zero(t, e.check(`{"key":"u","policy":"monthly","hits":0}`).CurrentCount)
	rec = e.do(http.MethodPost, "/v1/reset", `{"key":"u","calendar":"month","all_windows":true}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	assert.Equal(t, "calendar", errorOfBody(t, rec.Body.Bytes()).Field)
}
