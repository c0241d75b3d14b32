package rpc_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/wire"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

const fuzzMaxBatch = 32

func FuzzUnmarshalCheckBatch(f *testing.F) {
	seeds := []*pb.CheckBatchRequest{
		{},
		{Checks: []*pb.CheckRequest{{Key: "a", Limit: 2, WindowMs: 1000}}},
		{Checks: []*pb.CheckRequest{
			logReq("a", 2, 1000), logReq("a", 2, 1000), logReq("a", 2, 1000),
			{Key: "b", Limit: 5, WindowMs: 10, Hits: ptr(int64(0))},
			{Key: "b", Limit: 5, WindowMs: 10, Hits: ptr(int64(5))},
		}},
		{Checks: []*pb.CheckRequest{{Key: "a", Limit: 1, WindowMs: 1000 - 1<<58}}},
		{Checks: []*pb.CheckRequest{
			{}, {Key: "a"}, {Key: "a", Limit: 1, WindowMs: -1},
			{Key: "a", Limit: 1, WindowMs: math.MaxInt64},
			{Key: "a", Limit: 1, WindowMs: 1000, Algorithm: pb.Algorithm(7)},
			{Key: "a", Limit: 2, WindowMs: 1000, Hits: ptr(int64(3))},
			{Key: "a", Limit: 10001, WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG},
			{Key: "a", Limit: math.MaxInt64, WindowMs: 31622400000, Hits: ptr(int64(math.MaxInt64))},
		}},
		// The ops of token budgets (docs/limiter.md), good and bad.
		{Checks: []*pb.CheckRequest{
			{Key: "t", Limit: 10, WindowMs: 1000, Op: pb.Op_CHARGE, Hits: ptr(int64(25))},
			{Key: "t", Limit: 10, WindowMs: 1000, Op: pb.Op_REFUND, Hits: ptr(int64(7))},
			{Key: "t", Limit: 10, WindowMs: 1000, Op: pb.Op_RESERVE, Hits: ptr(int64(3)), TtlMs: 500},
			{Key: "t", Limit: 10, WindowMs: 1000, Op: pb.Op_HOLD, Hits: ptr(int64(3)), TtlMs: -1},
			{Key: "t", Limit: 10, WindowMs: 1000, Op: pb.Op_SETTLE, Hits: ptr(int64(2)), Reservation: "AQAAAAAAAAABAAAAAAAAA-gAAAAAAAAAAwAAAAAAAAPoAAAAAAA"},
			{Key: "t", Limit: 10, WindowMs: 1000, Op: pb.Op_RELEASE, Reservation: "x"},
			{Key: "t", Limit: 10, WindowMs: 1000, Op: pb.Op(42)},
			{Key: "t", Limit: 10, WindowMs: 1000, Reservation: "AQ", TtlMs: 5},
		}},
		{AllOrNothing: true, Checks: []*pb.CheckRequest{{Key: "u", Limit: 3, WindowMs: 1000}, {Key: "v", Limit: 1, WindowMs: 1000, Hits: ptr(int64(1))}}},
		{AllOrNothing: true, Checks: []*pb.CheckRequest{{Key: "u", Limit: 3, WindowMs: 1000, Op: pb.Op_REFUND}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		require.NoError(f, err)
		f.Add(b)
	}
	var tooMany pb.CheckBatchRequest
	for range fuzzMaxBatch + 1 {
		tooMany.Checks = append(tooMany.Checks, &pb.CheckRequest{Key: "x", Limit: 1, WindowMs: 1})
	}
	b, err := proto.Marshal(&tooMany)
	require.NoError(f, err)
	f.Add(b)
	var badUTF8 []byte
	badUTF8 = protowire.AppendTag(badUTF8, 1, protowire.BytesType)
	badUTF8 = protowire.AppendBytes(badUTF8, invalidUTF8Key())
	f.Add(badUTF8)
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{0x0a, 0x00, 0x0a, 0x00})

	// One server for the whole run, so state builds up across inputs; its
	// clock moves 1 ms per batch.
	e := newEnv(f, func(o *envOpts) {
		o.rpc = func(c *svcConfig) {
			c.MaxBatch = fuzzMaxBatch
			clock := fakeclock.AtMilli(t0)
			c.Now = func() time.Time { clock.Advance(time.Millisecond); return clock.Now() }
		}
	})
	// Current tokens of this server's own reservation (issue 38): as
	// issued, and rewritten; and fields twice on the wire.
	rewritten, valid := tokenSeeds(f, e)
	for _, batch := range []*pb.CheckBatchRequest{{Checks: rewritten}, {Checks: valid}, {Checks: append(rewritten[:2:2], valid...)}} {
		b, err := proto.Marshal(batch)
		require.NoError(f, err)
		f.Add(b)
	}
	for _, b := range duplicateFieldSeeds(f, valid[0].GetReservation(), rewritten[0].GetReservation()) {
		f.Add(b)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		// Decoded as the server decodes it, leniencies included (see
		// internal/wire): a key that is not UTF-8 reaches the Server.
		var in pb.CheckBatchRequest
		if wire.Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &in) != nil {
			return
		}
		out, err := e.srv.CheckBatch(context.Background(), &in)
		if len(in.GetChecks()) > fuzzMaxBatch {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			require.Nil(t, out)
			return
		}
		if in.GetAllOrNothing() && err != nil {
			// Refused whole, naming the item: nothing of it may count.
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), "checks[", "%v", err)
			return
		}
		require.NoError(t, err)
		allOrNothingRefused := in.GetAllOrNothing() && !allAllowed(out.GetResults())
		require.Len(t, out.GetResults(), len(in.GetChecks()), "one result per item")
		for i, r := range out.GetResults() {
			req := in.GetChecks()[i]
			resp, rerr := r.GetResponse(), r.GetError()
			require.True(t, (resp == nil) != (rerr == nil), "item %d: want exactly one of response and error, got %v", i, r)
			if rerr != nil {
				if req.GetOp() == pb.Op_SETTLE && rerr.GetCode() == uint32(codes.FailedPrecondition) {
					// A settle retried at another cost than the first: a
					// conflict with what was applied, named on hits.
					require.Equal(t, "hits", rerr.GetField(), "item %d: %v", i, rerr)
					continue
				}
				require.Equal(t, uint32(codes.InvalidArgument), rerr.GetCode(), "item %d: %v", i, rerr)
				require.NotEmpty(t, rerr.GetField(), "item %d", i)
				require.NotEmpty(t, rerr.GetMessage(), "item %d", i)
				continue
			}
			require.Equal(t, "n1", resp.GetOwner())
			require.Equal(t, req.GetLimit(), resp.GetLimit(), "item %d answered out of order", i)
			require.GreaterOrEqual(t, resp.GetRemaining(), int64(0), "item %d", i)
			require.LessOrEqual(t, resp.GetRemaining(), resp.GetLimit(), "item %d", i)
			require.GreaterOrEqual(t, resp.GetCurrentCount(), int64(0), "item %d", i)
			require.GreaterOrEqual(t, resp.GetResetAfterMs(), int64(0), "item %d", i)
			require.GreaterOrEqual(t, resp.GetRefillAfterMs(), int64(0), "item %d", i)
			// A calendar limit has no window_ms: its period is the unit's.
			calendar := req.GetCalendar() != pb.CalendarUnit_CALENDAR_NONE
			if !calendar {
				require.LessOrEqual(t, resp.GetRefillAfterMs(), req.GetWindowMs(), "item %d: refill beyond one window", i)
			}
			switch {
			case resp.GetAllowed():
				require.Zero(t, resp.GetRetryAfterMs(), "item %d", i)
			case !allOrNothingRefused: // there, the items that fitted are denied with no wait
				require.Positive(t, resp.GetRetryAfterMs(), "item %d", i)
			}
			checkAdjustment(t, i, req, resp)
			// Only a request the API accepts is decided.
			_, ferr := protoconv.FromProto(req)
			require.NoError(t, ferr, "item %d", i)
			require.Positive(t, req.GetLimit(), "item %d", i)
			if !calendar && req.GetWindowMs() <= 0 {
				// See TestNewRequestNegativeWindowOverflow.
				t.Fatalf("item %d with window_ms %d was decided", i, req.GetWindowMs())
			}
		}
	})
}

// allAllowed reports whether every result is an allowed response.
func allAllowed(results []*pb.CheckResult) bool {
	for _, r := range results {
		if !r.GetResponse().GetAllowed() {
			return false
		}
	}
	return true
}

// checkAdjustment holds what an op's answer says beside the decision to
// the op's contract (docs/limiter.md).
func checkAdjustment(t *testing.T, i int, req *pb.CheckRequest, resp *pb.CheckResponse) {
	t.Helper()
	require.GreaterOrEqual(t, resp.GetRefunded(), int64(0), "item %d", i)
	require.GreaterOrEqual(t, resp.GetOver(), int64(0), "item %d", i)
	switch req.GetOp() {
	case pb.Op_REFUND:
		hits := int64(1) // absent: 1, as for a check
		if req.Hits != nil {
			hits = req.GetHits()
		}
		require.LessOrEqual(t, resp.GetRefunded(), hits, "item %d: refunded more than asked", i)
	case pb.Op_CHARGE:
		require.Equal(t, resp.GetOver() == 0, resp.GetAllowed(), "item %d: over 0 ⇔ allowed", i)
	case pb.Op_RESERVE, pb.Op_HOLD:
		require.Equal(t, resp.GetAllowed(), resp.GetReservation() != "", "item %d: a token ⇔ admitted", i)
		if resp.GetAllowed() {
			require.Positive(t, resp.GetExpiresInMs(), "item %d", i)
		}
	case pb.Op_SETTLE, pb.Op_RELEASE:
		require.NotEqual(t, pb.Settled_SETTLED_UNSPECIFIED, resp.GetSettled(), "item %d", i)
	default:
		require.Empty(t, resp.GetReservation(), "item %d", i)
		require.Zero(t, resp.GetRefunded()+resp.GetOver(), "item %d", i)
	}
}
