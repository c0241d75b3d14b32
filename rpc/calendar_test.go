package rpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// t0 is 2023-11-14T22:13:20Z: 1h46m40s are left of the day in UTC,
// 46m40s of the day in Paris (UTC+1).
const (
	leftOfUTCDay   = int64((time.Hour + 46*time.Minute + 40*time.Second) / time.Millisecond)
	leftOfParisDay = int64((46*time.Minute + 40*time.Second) / time.Millisecond)
)

// A calendar limit over gRPC: the count resets at the boundary in its
// zone, each zone is its own limit, and a reset names the limit by its
// calendar.
func TestCalendarOverGRPC(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	paris := &pb.CheckRequest{Key: "u", Limit: 1, Calendar: pb.CalendarUnit_DAY, TimeZone: "Europe/Paris"}
	got, err := e.srv.Check(ctx, paris)
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 1, 0, 0, 0, leftOfParisDay, leftOfParisDay), got)
	got, err = e.srv.Check(ctx, paris)
	require.NoError(t, err)
	assertProtoEqual(t, resp(false, 1, 0, 1, leftOfParisDay, leftOfParisDay, leftOfParisDay), got)
	got, err = e.srv.Check(ctx, &pb.CheckRequest{Key: "u", Limit: 1, Calendar: pb.CalendarUnit_DAY})
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 1, 0, 0, 0, leftOfUTCDay, leftOfUTCDay), got)

	res, err := e.srv.Reset(ctx, &pb.ResetRequest{Key: "u", Calendar: pb.CalendarUnit_DAY, TimeZone: "Europe/Paris"})
	require.NoError(t, err)
	assert.True(t, res.GetExisted())
	got, err = e.srv.Check(ctx, paris)
	require.NoError(t, err)
	assert.True(t, got.GetAllowed(), "the reset cleared Paris's day")

	e.clock.Advance(time.Duration(leftOfParisDay) * time.Millisecond)
	got, err = e.srv.Check(ctx, paris)
	require.NoError(t, err)
	assert.True(t, got.GetAllowed(), "a new day in Paris")
}

func TestCalendarInvalidArgumentsNameTheField(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		req   *pb.CheckRequest
		field string
	}{
		{"unknown unit", &pb.CheckRequest{Key: "k", Limit: 1, Calendar: 9}, "calendar"},
		{"unknown zone", &pb.CheckRequest{Key: "k", Limit: 1, Calendar: pb.CalendarUnit_MONTH, TimeZone: "Mars/Olympus_Mons"}, "time_zone"},
		{"zone without calendar", &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1000, TimeZone: "Europe/Paris"}, "time_zone"},
		{"calendar and window", &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1000, Calendar: pb.CalendarUnit_MONTH}, "window_ms"},
		{"calendar log", &pb.CheckRequest{Key: "k", Limit: 1, Calendar: pb.CalendarUnit_MONTH, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG}, "algorithm"},
		{"policy and calendar", &pb.CheckRequest{Key: "k", Policy: "search", Calendar: pb.CalendarUnit_MONTH}, "calendar"},
		{"policy and zone", &pb.CheckRequest{Key: "k", Policy: "search", TimeZone: "UTC"}, "time_zone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.srv.Check(ctx, c.req)
			requireInvalid(t, err, c.field)
		})
	}
	_, err := e.srv.Reset(ctx, &pb.ResetRequest{Key: "k", Calendar: pb.CalendarUnit_DAY, TimeZone: "Nowhere"})
	requireInvalid(t, err, "time_zone")
	_, err = e.srv.Reset(ctx, &pb.ResetRequest{Key: "k", Calendar: pb.CalendarUnit_DAY, AllWindows: true})
	requireInvalid(t, err, "calendar")
}
