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
		require.NoError(t, err)
		require.Len(t, out.GetResults(), len(in.GetChecks()), "one result per item")
		for i, r := range out.GetResults() {
			req := in.GetChecks()[i]
			resp, rerr := r.GetResponse(), r.GetError()
			require.True(t, (resp == nil) != (rerr == nil), "item %d: want exactly one of response and error, got %v", i, r)
			if rerr != nil {
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
			require.LessOrEqual(t, resp.GetRefillAfterMs(), req.GetWindowMs(), "item %d: refill beyond one window", i)
			if resp.GetAllowed() {
				require.Zero(t, resp.GetRetryAfterMs(), "item %d", i)
			} else {
				require.Positive(t, resp.GetRetryAfterMs(), "item %d", i)
			}
			// Only a request the API accepts is decided.
			_, ferr := protoconv.FromProto(req)
			require.NoError(t, ferr, "item %d", i)
			require.Positive(t, req.GetLimit(), "item %d", i)
			if req.GetWindowMs() <= 0 {
				// See TestNewRequestNegativeWindowOverflow.
				t.Fatalf("item %d with window_ms %d was decided", i, req.GetWindowMs())
			}
		}
	})
}
