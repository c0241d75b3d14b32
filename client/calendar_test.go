package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/limiter"
)

// A calendar quota through the client: its count is the day's in its
// zone, another zone is another limit, a reset names it, and a bad zone
// is the caller's error naming the field.
func TestCalendarLimits(t *testing.T) {
	c := testcluster.New(t, 2, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Live()...)})
	ctx := context.Background()
	paris := client.Limit{Limit: 2, Calendar: client.Day, TimeZone: "Europe/Paris"}
	for range 2 {
		d, err := cl.Check(ctx, "tenant:1", paris)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := cl.Check(ctx, "tenant:1", paris)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Positive(t, d.RetryAfter)
	assert.LessOrEqual(t, d.RetryAfter, 25*time.Hour, "until midnight in Paris")
	assert.Equal(t, d.RetryAfter, d.RefillAfter, "the count starts again at the boundary")

	d, err = cl.Check(ctx, "tenant:1", client.Limit{Limit: 2, Calendar: client.Day, TimeZone: "Asia/Tokyo"})
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a day in Tokyo is another limit")

	res, err := cl.Reset(ctx, "tenant:1", paris)
	require.NoError(t, err)
	assert.True(t, res.Existed())
	d, err = cl.Check(ctx, "tenant:1", paris)
	require.NoError(t, err)
	assert.True(t, d.Allowed)

	_, err = cl.Check(ctx, "tenant:1", client.Limit{Limit: 2, Calendar: client.Month, TimeZone: "Mars/Olympus_Mons"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, err.Error(), "time_zone")
	_, err = cl.Check(ctx, "tenant:1", client.Limit{Limit: 2, Window: time.Hour, Calendar: client.Month})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, err.Error(), "window_ms")
}

// The client's calendar units are the server's, by value and by name.
func TestCalendarUnitsAreTheServers(t *testing.T) {
	for u := limiter.CalendarMinute; u <= limiter.CalendarYear; u++ {
		c, err := client.ParseCalendarUnit(u.String())
		require.NoError(t, err)
		assert.Equal(t, uint8(u), uint8(c))
		assert.Equal(t, u.String(), c.String())
	}
	m, err := client.ParseCalendarUnit("month")
	require.NoError(t, err)
	assert.Equal(t, client.Month, m)
	_, err = client.ParseCalendarUnit("fortnight")
	assert.ErrorContains(t, err, "invalid calendar")
}

// The middleware takes a calendar quota: no w in the policy header (a
// month has no fixed length), and t is the rest of the period.
func TestMiddlewareCalendar(t *testing.T) {
	monthly := client.Limit{Limit: 100, Calendar: client.Month, TimeZone: "Europe/Paris"}
	f := &fakeChecker{d: client.Decision{Allowed: true, Limit: 100, Remaining: 41, ResetAfter: 50 * time.Hour, RefillAfter: 50 * time.Hour}}
	rec, ran := mwServe(t, f, client.MiddlewareConfig{Limit: monthly, Key: client.KeyByIP}, mwRequest())
	require.True(t, ran)
	assert.Equal(t, `"default";q=100`, rec.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"default";r=41;t=180000`, rec.Header().Get("RateLimit"))
	assert.Equal(t, monthly, f.Calls()[0].limit)

	_, err := client.Middleware(f, client.MiddlewareConfig{Limit: client.Limit{Limit: 1, Window: time.Hour, Calendar: client.Day}, Key: client.KeyByIP})
	assert.ErrorContains(t, err, "Limit.Window must be 0 with Limit.Calendar")
}
