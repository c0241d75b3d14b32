package protoconv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

func calendar(t *testing.T, u limiter.CalendarUnit, zone string) limiter.Calendar {
	t.Helper()
	c, err := limiter.NewCalendar(u, zone)
	require.NoError(t, err)
	return c
}

// A calendar limit travels as its unit and its zone's name, through the
// public API and between members, and comes back as the same limit.
func TestCalendarRequestsRoundTrip(t *testing.T) {
	hits := int64(2)
	in := &pb.CheckRequest{Key: "k", Limit: 10, Hits: &hits, Calendar: pb.CalendarUnit_MONTH, TimeZone: "Europe/Paris"}
	r, err := FromProto(in)
	require.NoError(t, err)
	paris := calendar(t, limiter.CalendarMonth, "Europe/Paris")
	assert.Equal(t, limiter.Request{Key: "k", Limit: 10, Calendar: paris, Hits: 2}, r)

	// Forwarded to the owner, through the wire's own codec.
	data, err := ToProtoRequest(r).MarshalVT()
	require.NoError(t, err)
	var back pb.CheckRequest
	require.NoError(t, back.UnmarshalVT(data))
	fwd, err := FromForwarded(&back)
	require.NoError(t, err)
	assert.Equal(t, r, fwd)

	// UTC, the default, travels as no zone.
	day := calendar(t, limiter.CalendarDay, "")
	m := ToProtoRequest(limiter.Request{Key: "k", Limit: 1, Calendar: day, Hits: 1})
	assert.Equal(t, pb.CalendarUnit_DAY, m.GetCalendar())
	assert.Empty(t, m.GetTimeZone())
	m = ToProtoRequest(limiter.Request{Key: "k", Limit: 1, Window: time.Second, Hits: 1})
	assert.Equal(t, pb.CalendarUnit_CALENDAR_NONE, m.GetCalendar())
}

func TestCalendarFromProtoNamesTheField(t *testing.T) {
	for _, c := range []struct {
		unit  pb.CalendarUnit
		zone  string
		field string
	}{
		{pb.CalendarUnit_CALENDAR_NONE, "Europe/Paris", "time_zone"},
		{pb.CalendarUnit_MONTH, "Mars/Olympus_Mons", "time_zone"},
		{pb.CalendarUnit(42), "", "calendar"},
		{pb.CalendarUnit(-1), "", "calendar"},
	} {
		_, err := FromProto(&pb.CheckRequest{Key: "k", Limit: 1, Calendar: c.unit, TimeZone: c.zone})
		assert.Equal(t, c.field, peer.FieldOf(err), "%v %q: %v", c.unit, c.zone, err)
	}
}

// A key's state carries its calendar between members; a zone the
// receiver does not know arrives as such, and its store refuses the
// state naming time_zone instead of merging it into another limit.
func TestCalendarKeyStatesRoundTrip(t *testing.T) {
	paris := calendar(t, limiter.CalendarWeek, "Europe/Paris")
	ks := limiter.KeyState{Key: "k", Calendar: paris, WindowID: 1_750_000_000_000, Curr: 7}
	for _, m := range []*pb.KeyState{ToProtoKeyState(ks), ToProtoKeyStates([]limiter.KeyState{ks})[0]} {
		data, err := m.MarshalVT()
		require.NoError(t, err)
		var back pb.KeyState
		require.NoError(t, back.UnmarshalVT(data))
		assert.Equal(t, ks, FromProtoKeyState(&back))
	}

	unknown := FromProtoKeyState(&pb.KeyState{Key: "k", Calendar: pb.CalendarUnit_DAY, TimeZone: "Mars/Olympus_Mons", WindowId: 1, Curr: 1})
	store, err := limiter.New(limiter.DefaultConfig(), 4)
	require.NoError(t, err)
	_, errs := store.Transfer().Merge(time.UnixMilli(1_750_000_000_000), []limiter.KeyState{unknown})
	require.Len(t, errs, 1)
	assert.Equal(t, "time_zone", peer.FieldOf(errs[0]))
}
