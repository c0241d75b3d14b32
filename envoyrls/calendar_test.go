package envoyrls

import (
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
)

// calendarConfig gives one key a monthly quota that resets on the 1st in
// Paris, and the same unit without calendar: true, upstream's 30 days.
const calendarConfig = `domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: month, requests_per_unit: 3, calendar: true, time_zone: Europe/Paris}
  - key: daily
    rate_limit: {unit: day, requests_per_unit: 1, calendar: true}
  - key: sliding
    rate_limit: {unit: month, requests_per_unit: 3}
`

func TestParseCalendar(t *testing.T) {
	cfg, err := Parse("f.yaml", []byte(calendarConfig), storeCheck(t))
	require.NoError(t, err)
	rules := cfg.Rules()
	require.Len(t, rules, 3)
	paris, err := limiter.NewCalendar(limiter.CalendarMonth, "Europe/Paris")
	require.NoError(t, err)
	assert.Equal(t, paris, rules[0].Calendar)
	assert.Zero(t, rules[0].Window)
	day, err := limiter.NewCalendar(limiter.CalendarDay, "")
	require.NoError(t, err)
	assert.Equal(t, day, rules[1].Calendar, "UTC by default")
	assert.Zero(t, rules[2].Calendar, "without calendar: true, upstream's meaning")
	assert.Equal(t, 30*24*time.Hour, rules[2].Window)
}

func TestParseCalendarErrors(t *testing.T) {
	rl := func(fields string) string {
		return "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      " + fields + "\n"
	}
	for _, c := range []struct {
		name, src string
		want      string
	}{
		{"seconds", rl("{unit: second, requests_per_unit: 1, calendar: true}"), `f.yaml:5: domain "a", descriptor k: calendar: true needs a unit of minute, hour, day, week, month or year`},
		{"multiplier", rl("{unit: day, unit_multiplier: 2, requests_per_unit: 1, calendar: true}"), `unit_multiplier must be 1 (or absent) with calendar: true`},
		{"unlimited", rl("{unlimited: true, calendar: true}"), `calendar has no use with unlimited: true`},
		{"zone alone", rl("{unit: day, requests_per_unit: 1, time_zone: Europe/Paris}"), `time_zone is only for calendar: true`},
		{"unknown zone", rl("{unit: day, requests_per_unit: 1, calendar: true, time_zone: Mars/Olympus}"), `time_zone unknown time zone "Mars/Olympus"`},
		{"local zone", rl("{unit: day, requests_per_unit: 1, calendar: true, time_zone: Local}"), `time_zone "Local" is each node's own zone`},
		{"not a bool", rl("{unit: day, requests_per_unit: 1, calendar: monthly}"), `calendar must be true or false, got "monthly"`},
		{"log", "domain: a\ndescriptors:\n  - key: k\n    algorithm: SLIDING_WINDOW_LOG\n    rate_limit: {unit: day, requests_per_unit: 1, calendar: true}\n",
			`f.yaml:4: domain "a", descriptor k: a calendar rate_limit is counted by SLIDING_WINDOW_COUNTER only`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(c.src), storeCheck(t))
			require.Error(t, err)
			assert.Nil(t, cfg)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// With calendar: true, a month is the calendar's: its quota is spent on
// the 30th, refused with duration_until_reset the time to the 1st in
// Paris, and whole again then; without it, upstream's 30-day window.
func TestShouldRateLimitCalendarMonth(t *testing.T) {
	h := newHarnessFor(t, calendarConfig, nil)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	h.clk.Set(time.Date(2025, 4, 30, 12, 0, 0, 0, paris))
	may := time.Date(2025, 5, 1, 0, 0, 0, 0, paris)
	for range 3 {
		resp := h.call(t, "ai", desc("tenant=t1"))
		require.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
	}
	resp := h.call(t, "ai", desc("tenant=t1"))
	require.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, resp.GetOverallCode())
	st := resp.GetStatuses()[0]
	assert.Equal(t, may.Sub(h.clk.Now()), st.GetDurationUntilReset().AsDuration())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_MONTH, st.GetCurrentLimit().GetUnit())

	h.clk.Set(may)
	assert.Equal(t, rlspb.RateLimitResponse_OK, h.call(t, "ai", desc("tenant=t1")).GetOverallCode(), "a new month in Paris")

	// Upstream's month, beside it: 30 days that slide, no reset on the 1st.
	h.clk.Set(time.Date(2025, 4, 30, 12, 0, 0, 0, paris))
	for range 3 {
		h.call(t, "ai", desc("sliding=t1"))
	}
	h.clk.Set(may)
	assert.Equal(t, rlspb.RateLimitResponse_OVER_LIMIT, h.call(t, "ai", desc("sliding=t1")).GetOverallCode())
}
