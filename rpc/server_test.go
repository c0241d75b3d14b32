package rpc_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/rpc"
)

// t0 is a whole number of seconds since the epoch, so 1000 ms windows start
// exactly at t0.
const t0 = 1_700_000_000_000

type env struct {
	clock *fakeclock.Clock
	store *limiter.Store
	svc   *route.Service
	srv   *rpc.Server
}

// svcConfig is what a route.Service is made of, in one struct that tests
// edit.
type svcConfig struct {
	route.Config
	route.Deps
}

type envOpts struct {
	store      limiter.Config
	partitions int
	rpc        func(*svcConfig)
	metrics    *route.Metrics
}

func newEnv(t testing.TB, opts ...func(*envOpts)) *env {
	t.Helper()
	o := envOpts{store: limiter.DefaultConfig(), partitions: partition.DefaultCount}
	for _, f := range opts {
		f(&o)
	}
	store, err := limiter.New(o.store, o.partitions)
	require.NoError(t, err)
	clock := fakeclock.AtMilli(t0)
	cfg := svcConfig{Config: route.DefaultConfig(), Deps: route.Deps{NodeID: "n1", Now: clock.Now, Store: store, Metrics: o.metrics}}
	if o.rpc != nil {
		o.rpc(&cfg)
	}
	svc, err := route.NewService(cfg.Config, cfg.Deps)
	require.NoError(t, err)
	return &env{clock: clock, store: store, svc: svc, srv: rpc.NewServer(svc)}
}

func withMaxBatch(n int) func(*envOpts) {
	return func(o *envOpts) { o.rpc = func(c *svcConfig) { c.MaxBatch = n } }
}

// serveGRPC serves e over a real gRPC server on loopback and returns a
// connected client.
func (e *env) serveGRPC(t *testing.T) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(rpc.NewStrictCodec().ServerOptions()...)
	pb.RegisterRateLimiterServer(gs, e.srv)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		assert.NoError(t, <-served)
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func ptr[T any](v T) *T { return &v }

func logReq(key string, limit, windowMS int64) *pb.CheckRequest {
	return &pb.CheckRequest{Key: key, Limit: limit, WindowMs: windowMS, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG}
}

func resp(allowed bool, limit, remaining, count, retry, reset, refill int64) *pb.CheckResponse {
	return &pb.CheckResponse{Allowed: allowed, Limit: limit, Remaining: remaining, CurrentCount: count,
		RetryAfterMs: retry, ResetAfterMs: reset, RefillAfterMs: refill, Owner: "n1"}
}

func assertProtoEqual(t *testing.T, want, got proto.Message, msgAndArgs ...any) {
	t.Helper()
	assert.True(t, proto.Equal(want, got), "want %v\ngot  %v %s", want, got, fmt.Sprint(msgAndArgs...))
}

// requireInvalid requires err to be INVALID_ARGUMENT with a BadRequest
// detail naming field.
func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	require.Equal(t, codes.InvalidArgument, st.Code(), st.Message())
	assert.Contains(t, st.Message(), "invalid "+field+":")
	var br *errdetails.BadRequest
	for _, d := range st.Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	require.NotNil(t, br, "no BadRequest detail in %v", st.Details())
	require.Len(t, br.GetFieldViolations(), 1)
	assert.Equal(t, field, br.GetFieldViolations()[0].GetField())
	assert.Equal(t, st.Message(), br.GetFieldViolations()[0].GetDescription())
}

func TestServerCheck(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	req := logReq("user:42", 2, 1000)

	got, err := e.srv.Check(ctx, req)
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 2, 1, 0, 0, 1000, 1000), got)
	got, err = e.srv.Check(ctx, req)
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 2, 0, 1, 0, 1000, 1000), got)

	// A denial is an answer, not an error.
	got, err = e.srv.Check(ctx, req)
	require.NoError(t, err)
	assertProtoEqual(t, resp(false, 2, 0, 2, 1000, 1000, 1000), got)

	e.clock.Advance(999 * time.Millisecond)
	got, err = e.srv.Check(ctx, req)
	require.NoError(t, err)
	assertProtoEqual(t, resp(false, 2, 0, 2, 1, 1, 1), got)
	e.clock.Advance(time.Millisecond)
	got, err = e.srv.Check(ctx, req)
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 2, 1, 0, 0, 1000, 1000), got)
}

func TestServerCheckCounterAndHits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The zero algorithm is the counter; hits absent is 1.
	req := &pb.CheckRequest{Key: "k", Limit: 2, WindowMs: 1000}
	for i, want := range []*pb.CheckResponse{
		resp(true, 2, 1, 0, 0, 2000, 1000),
		resp(true, 2, 0, 1, 0, 2000, 1000),
		resp(false, 2, 0, 2, 1001, 2000, 1000),
	} {
		got, err := e.srv.Check(ctx, req)
		require.NoError(t, err)
		assertProtoEqual(t, want, got, "request ", i)
	}
	assert.Equal(t, 1, e.store.Stats().CounterKeys)

	// hits = 0 is a peek: it reports and consumes nothing, and creates no
	// state for a fresh key.
	peek := &pb.CheckRequest{Key: "fresh", Limit: 3, WindowMs: 1000, Hits: ptr(int64(0))}
	for range 3 {
		got, err := e.srv.Check(ctx, peek)
		require.NoError(t, err)
		assertProtoEqual(t, resp(true, 3, 3, 0, 0, 0, 1000), got)
	}
	assert.Equal(t, 1, e.store.Stats().CounterKeys)

	got, err := e.srv.Check(ctx, &pb.CheckRequest{Key: "fresh", Limit: 3, WindowMs: 1000, Hits: ptr(int64(3))})
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 3, 0, 0, 0, 2000, 1000), got)
}

func invalidRequests() []struct {
	name  string
	req   *pb.CheckRequest
	field string
} {
	return []struct {
		name  string
		req   *pb.CheckRequest
		field string
	}{
		{"empty key", &pb.CheckRequest{Limit: 1, WindowMs: 1000}, "key"},
		{"oversize key", &pb.CheckRequest{Key: strings.Repeat("k", 1025), Limit: 1, WindowMs: 1000}, "key"},
		{"invalid UTF-8 key", &pb.CheckRequest{Key: "a\xffb", Limit: 1, WindowMs: 1000}, "key"},
		{"zero limit", &pb.CheckRequest{Key: "a", WindowMs: 1000}, "limit"},
		{"negative limit", &pb.CheckRequest{Key: "a", Limit: -1, WindowMs: 1000}, "limit"},
		{"zero window", &pb.CheckRequest{Key: "a", Limit: 1}, "window_ms"},
		{"negative window", &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: -1}, "window_ms"},
		{"window overflows Duration", &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: math.MaxInt64}, "window_ms"},
		{"window over MaxWindow", &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: 366*24*3600*1000 + 1}, "window_ms"},
		{"log window over 2^32-1", &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: 1 << 32, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG}, "window_ms"},
		{"negative hits", &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: 1000, Hits: ptr(int64(-1))}, "hits"},
		{"hits over limit", &pb.CheckRequest{Key: "a", Limit: 2, WindowMs: 1000, Hits: ptr(int64(3))}, "hits"},
		{"unknown algorithm", &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: 1000, Algorithm: pb.Algorithm(7)}, "algorithm"},
		{"negative algorithm", &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: 1000, Algorithm: pb.Algorithm(-1)}, "algorithm"},
		{"log limit over 10000", logReq("a", 10001, 1000), "limit"},
	}
}

func TestServerCheckInvalidArgument(t *testing.T) {
	e := newEnv(t)
	for _, tt := range invalidRequests() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.srv.Check(context.Background(), tt.req)
			assert.Nil(t, got)
			requireInvalid(t, err, tt.field)
		})
	}
	assert.Equal(t, limiter.Stats{}, e.store.Stats())
}

func TestServerCheckCapacity(t *testing.T) {
	e := newEnv(t, func(o *envOpts) {
		o.store.MaxKeys, o.store.Overflow, o.partitions = 1, limiter.OverflowReject, 1
	})
	ctx := context.Background()
	_, err := e.srv.Check(ctx, &pb.CheckRequest{Key: "first", Limit: 1, WindowMs: 1000})
	require.NoError(t, err)

	_, err = e.srv.Check(ctx, &pb.CheckRequest{Key: "second", Limit: 1, WindowMs: 1000})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	st, _ := status.FromError(err)
	assert.Empty(t, st.Details(), "no field is at fault")

	out, err := e.srv.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
		{Key: "second", Limit: 1, WindowMs: 1000},
	}})
	require.NoError(t, err)
	require.Len(t, out.GetResults(), 1)
	assert.Equal(t, uint32(codes.ResourceExhausted), out.GetResults()[0].GetError().GetCode())
	assert.Empty(t, out.GetResults()[0].GetError().GetField())
}

func TestServerCheckBatch(t *testing.T) {
	e := newEnv(t)
	in := &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
		logReq("a", 2, 1000),
		{Limit: 2, WindowMs: 1000}, // empty key
		{Key: "b", Limit: 5, WindowMs: 1000, Hits: ptr(int64(5))},
		{Key: "a", Limit: 2, WindowMs: 1000, Algorithm: pb.Algorithm(7)},
		logReq("a", 2, 1000),
		{Key: "c", Limit: 2, WindowMs: 1000, Hits: ptr(int64(3))},
		logReq("a", 2, 1000),
		{Key: "d", Limit: 1, WindowMs: math.MaxInt64},
	}}
	out, err := e.srv.CheckBatch(context.Background(), in)
	require.NoError(t, err)
	require.Len(t, out.GetResults(), len(in.Checks))

	for i, want := range map[int]*pb.CheckResponse{
		0: resp(true, 2, 1, 0, 0, 1000, 1000),
		2: resp(true, 5, 0, 0, 0, 2000, 1000),
		4: resp(true, 2, 0, 1, 0, 1000, 1000),
		6: resp(false, 2, 0, 2, 1000, 1000, 1000),
	} {
		r := out.GetResults()[i]
		assert.Nil(t, r.GetError(), "item %d", i)
		assertProtoEqual(t, want, r.GetResponse(), "item ", i)
	}
	for i, field := range map[int]string{1: "key", 3: "algorithm", 5: "hits", 7: "window_ms"} {
		r := out.GetResults()[i]
		assert.Nil(t, r.GetResponse(), "item %d", i)
		e := r.GetError()
		require.NotNil(t, e, "item %d", i)
		assert.Equal(t, uint32(codes.InvalidArgument), e.GetCode(), "item %d", i)
		assert.Equal(t, field, e.GetField(), "item %d", i)
		assert.Contains(t, e.GetMessage(), "invalid "+field, "item %d", i)
	}
}

func TestServerCheckBatchSameArrivalTime(t *testing.T) {
	// A clock that moves on every reading: a batch must read it once.
	e := newEnv(t, func(o *envOpts) {
		o.rpc = func(c *svcConfig) {
			var ms atomic.Int64
			ms.Store(t0)
			c.Now = func() time.Time { return time.UnixMilli(ms.Add(1)) }
		}
	})
	req := logReq("tick", 1, 1)
	out, err := e.srv.CheckBatch(context.Background(), &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{req, req, req}})
	require.NoError(t, err)
	require.Len(t, out.GetResults(), 3)
	assert.True(t, out.GetResults()[0].GetResponse().GetAllowed())
	for _, r := range out.GetResults()[1:] {
		assertProtoEqual(t, resp(false, 1, 0, 1, 1, 1, 1), r.GetResponse())
	}
	// Single checks each read the clock, so the window has moved on.
	got, err := e.srv.Check(context.Background(), req)
	require.NoError(t, err)
	assert.True(t, got.GetAllowed())
}

func TestServerCheckBatchLimits(t *testing.T) {
	e := newEnv(t, withMaxBatch(3))
	ctx := context.Background()
	batch := func(n int) *pb.CheckBatchRequest {
		in := &pb.CheckBatchRequest{}
		for range n {
			in.Checks = append(in.Checks, &pb.CheckRequest{Key: "a", Limit: 100, WindowMs: 1000})
		}
		return in
	}

	out, err := e.srv.CheckBatch(ctx, batch(0))
	require.NoError(t, err)
	assert.Empty(t, out.GetResults())

	out, err = e.srv.CheckBatch(ctx, batch(3))
	require.NoError(t, err)
	assert.Len(t, out.GetResults(), 3)

	out, err = e.srv.CheckBatch(ctx, batch(4))
	assert.Nil(t, out)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "4 items; the maximum is 3")

	// Bad items count towards the cap too.
	bad := batch(2)
	bad.Checks = append(bad.Checks, &pb.CheckRequest{}, &pb.CheckRequest{})
	_, err = e.srv.CheckBatch(ctx, bad)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))

	// Nothing of the refused batches was decided.
	got, err := e.srv.Check(ctx, &pb.CheckRequest{Key: "a", Limit: 100, WindowMs: 1000, Hits: ptr(int64(0))})
	require.NoError(t, err)
	assert.Equal(t, int64(3), got.GetCurrentCount())
}

// rawCodec sends and receives bytes as they are, so a test can put anything
// on the wire.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*p = data.Materialize()
	return nil
}

const (
	checkMethod      = "/peerlimit.v1.RateLimiter/Check"
	checkBatchMethod = "/peerlimit.v1.RateLimiter/CheckBatch"
)

// invalidUTF8Key is a CheckRequest, built by hand because proto.Marshal
// refuses it, whose key (field 1, bytes) is not UTF-8.
func invalidUTF8Key() []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte{'a', 0xff, 0xfe})
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 5)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 1000)
	return b
}

func TestGRPC(t *testing.T) {
	e := newEnv(t, withMaxBatch(4))
	conn := e.serveGRPC(t)
	client := pb.NewRateLimiterClient(conn)
	ctx := context.Background()

	t.Run("check", func(t *testing.T) {
		req := logReq("grpc", 2, 1000)
		for _, want := range []*pb.CheckResponse{
			resp(true, 2, 1, 0, 0, 1000, 1000),
			resp(true, 2, 0, 1, 0, 1000, 1000),
			resp(false, 2, 0, 2, 1000, 1000, 1000),
		} {
			got, err := client.Check(ctx, req)
			require.NoError(t, err)
			assertProtoEqual(t, want, got)
		}
	})

	t.Run("invalid argument", func(t *testing.T) {
		for _, tt := range invalidRequests() {
			if strings.Contains(tt.name, "UTF-8") {
				continue // the client refuses to marshal it; see "malformed"
			}
			_, err := client.Check(ctx, tt.req)
			requireInvalid(t, err, tt.field)
		}
	})

	t.Run("batch", func(t *testing.T) {
		out, err := client.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
			logReq("grpc-batch", 1, 1000),
			{Key: "grpc-batch", Limit: 1, WindowMs: 1000, Algorithm: pb.Algorithm(7)},
			logReq("grpc-batch", 1, 1000),
			{Key: "", Limit: 1, WindowMs: 1000},
		}})
		require.NoError(t, err)
		require.Len(t, out.GetResults(), 4)
		assertProtoEqual(t, resp(true, 1, 0, 0, 0, 1000, 1000), out.GetResults()[0].GetResponse())
		assertProtoEqual(t, &pb.Error{Code: 3, Field: "algorithm", Message: out.GetResults()[1].GetError().GetMessage()}, out.GetResults()[1].GetError())
		assertProtoEqual(t, resp(false, 1, 0, 1, 1000, 1000, 1000), out.GetResults()[2].GetResponse())
		assertProtoEqual(t, &pb.Error{Code: 3, Field: "key", Message: "invalid key: must not be empty"}, out.GetResults()[3].GetError())
	})

	t.Run("batch too large", func(t *testing.T) {
		in := &pb.CheckBatchRequest{}
		for range 5 {
			in.Checks = append(in.Checks, logReq("big", 10, 1000))
		}
		_, err := client.CheckBatch(ctx, in)
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	})

	t.Run("malformed", func(t *testing.T) {
		good, err := proto.Marshal(&pb.CheckRequest{Key: "after", Limit: 10, WindowMs: 1000})
		require.NoError(t, err)
		goodBatch, err := proto.Marshal(&pb.CheckBatchRequest{Checks: []*pb.CheckRequest{{Key: "after-batch", Limit: 10, WindowMs: 1000}}})
		require.NoError(t, err)
		for _, tt := range []struct {
			name, method string
			body         []byte
		}{
			{"truncated varint tag", checkMethod, []byte{0xff, 0xff, 0xff}},
			{"truncated length", checkMethod, []byte{0x0a, 0x05, 'a'}},
			{"unmatched end-group tag", checkMethod, []byte{0x0c}},
			{"field number 0", checkMethod, []byte{0x00, 0x01}},
			{"batch: truncated varint tag", checkBatchMethod, []byte{0xff, 0xff, 0xff}},
			{"batch: truncated item", checkBatchMethod, []byte{0x0a, 0x03, 0x0a, 0x05, 'a'}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				var reply []byte
				err := conn.Invoke(ctx, tt.method, tt.body, &reply, grpc.ForceCodecV2(rawCodec{}))
				require.Equal(t, codes.InvalidArgument, status.Code(err), "want INVALID_ARGUMENT, not INTERNAL: %v", err)
				assert.Contains(t, status.Convert(err).Message(), "malformed request")
				assert.Empty(t, reply)

				// The server still answers, on the same connection.
				reply = nil
				require.NoError(t, conn.Invoke(ctx, checkMethod, good, &reply, grpc.ForceCodecV2(rawCodec{})))
				var got pb.CheckResponse
				require.NoError(t, proto.Unmarshal(reply, &got))
				assert.True(t, got.GetAllowed())
				assert.Equal(t, "n1", got.GetOwner())

				reply = nil
				require.NoError(t, conn.Invoke(ctx, checkBatchMethod, goodBatch, &reply, grpc.ForceCodecV2(rawCodec{})))
				var gotBatch pb.CheckBatchResponse
				require.NoError(t, proto.Unmarshal(reply, &gotBatch))
				require.Len(t, gotBatch.GetResults(), 1)
				assert.True(t, gotBatch.GetResults()[0].GetResponse().GetAllowed())
			})
		}
	})

	// The codec (internal/wire) does not check strings for UTF-8, as
	// protobuf-go would while decoding; the limiter does, and refuses the
	// key naming the field. In a batch only that item is refused.
	t.Run("invalid UTF-8 key", func(t *testing.T) {
		var reply []byte
		err := conn.Invoke(ctx, checkMethod, invalidUTF8Key(), &reply, grpc.ForceCodecV2(rawCodec{}))
		requireInvalid(t, err, "key")
		assert.Contains(t, status.Convert(err).Message(), "UTF-8")

		good, err := proto.Marshal(&pb.CheckRequest{Key: "next-to-bad", Limit: 10, WindowMs: 1000})
		require.NoError(t, err)
		var batch []byte // a batch of a bad key and a good one
		for _, item := range [][]byte{invalidUTF8Key(), good} {
			batch = protowire.AppendTag(batch, 1, protowire.BytesType)
			batch = protowire.AppendBytes(batch, item)
		}
		reply = nil
		require.NoError(t, conn.Invoke(ctx, checkBatchMethod, batch, &reply, grpc.ForceCodecV2(rawCodec{})))
		var got pb.CheckBatchResponse
		require.NoError(t, proto.Unmarshal(reply, &got))
		require.Len(t, got.GetResults(), 2)
		assert.Equal(t, uint32(codes.InvalidArgument), got.GetResults()[0].GetError().GetCode())
		assert.Equal(t, "key", got.GetResults()[0].GetError().GetField())
		assert.True(t, got.GetResults()[1].GetResponse().GetAllowed())
	})

	t.Run("unknown fields are ignored", func(t *testing.T) {
		good, err := proto.Marshal(&pb.CheckRequest{Key: "unknown-fields", Limit: 1, WindowMs: 1000})
		require.NoError(t, err)
		good = protowire.AppendTag(good, 99, protowire.VarintType)
		good = protowire.AppendVarint(good, 1)
		var reply []byte
		require.NoError(t, conn.Invoke(ctx, checkMethod, good, &reply, grpc.ForceCodecV2(rawCodec{})))
		var got pb.CheckResponse
		require.NoError(t, proto.Unmarshal(reply, &got))
		assertProtoEqual(t, resp(true, 1, 0, 0, 0, 2000, 1000), &got)
	})
}

func TestGRPCConcurrentChecksAreExact(t *testing.T) {
	e := newEnv(t)
	client := pb.NewRateLimiterClient(e.serveGRPC(t))
	const (
		limit   = 50
		callers = 8
		each    = 20
	)
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for range callers {
		wg.Go(func() {
			for range each {
				r, err := client.Check(context.Background(), logReq("shared", limit, 60_000))
				if err != nil {
					errs <- err
					return
				}
				if r.GetAllowed() {
					allowed.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, int64(limit), allowed.Load())
	assert.Equal(t, int64(callers*each-limit), denied.Load())
}

// window_ms × 10^6 overflows int64 for window_ms < MinInt64/10^6 too, and
// 1000 − 2^58 wraps to exactly 1 s, which the store accepts: the public
// API refuses it, naming the field (limiter's TestNewRequest has the
// conversion).
func TestNewRequestNegativeWindowOverflow(t *testing.T) {
	const ms = 1000 - 1<<58
	e := newEnv(t)
	_, err := e.srv.Check(context.Background(), &pb.CheckRequest{Key: "a", Limit: 1, WindowMs: ms})
	requireInvalid(t, err, "window_ms")
}

func TestFromProto(t *testing.T) {
	r, err := protoconv.FromProto(&pb.CheckRequest{Key: "k", Limit: 3, WindowMs: 20, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, Hits: ptr(int64(2))})
	require.NoError(t, err)
	assert.Equal(t, limiter.Request{Key: "k", Limit: 3, Window: 20 * time.Millisecond, Algorithm: limiter.SlidingWindowLog, Hits: 2}, r)

	r, err = protoconv.FromProto(&pb.CheckRequest{Key: "k", Limit: 3, WindowMs: 20})
	require.NoError(t, err)
	assert.Equal(t, limiter.SlidingWindowCounter, r.Algorithm)
	assert.Equal(t, int64(1), r.Hits)

	_, err = protoconv.FromProto(&pb.CheckRequest{Algorithm: pb.Algorithm(4)}) // one past CONCURRENCY
	assert.Equal(t, "algorithm", peer.FieldOf(err))
	assert.Equal(t, codes.InvalidArgument, grpcapi.Code(err))
}

func TestToProto(t *testing.T) {
	got := protoconv.ToProto(peer.Result{Owner: "n7", Decision: limiter.Decision{
		Allowed: false, Limit: 9, Remaining: 0, CurrentCount: 9,
		RetryAfter: 1500*time.Millisecond + 999*time.Microsecond, ResetAfter: 3 * time.Second, RefillAfter: 2 * time.Second,
	}})
	assertProtoEqual(t, &pb.CheckResponse{Allowed: false, Limit: 9, CurrentCount: 9, RetryAfterMs: 1500, ResetAfterMs: 3000,
		RefillAfterMs: 2000, Owner: "n7"}, got)
}

// What an owner answers a forward comes back as the Result it decided,
// every field of it: a field the conversion forgot would read as zero on
// the node the client asked.
func TestForwardedResultRoundTrips(t *testing.T) {
	want := peer.Result{Owner: "n7", Degraded: true, Decision: limiter.Decision{
		Allowed: true, Limit: 9, Remaining: 4, CurrentCount: 5,
		RetryAfter: 1500 * time.Millisecond, ResetAfter: 3 * time.Second, RefillAfter: 2 * time.Second,
	}}
	assert.Equal(t, want, protoconv.FromProtoResult(protoconv.ToProtoResult(want)))
}

func TestCodeFieldStatus(t *testing.T) {
	argErr := fmt.Errorf("ctx: %w", &limiter.ArgumentError{Field: "limit", Reason: "bad"})
	tests := []struct {
		name  string
		err   error
		code  codes.Code
		field string
	}{
		{"nil", nil, codes.OK, ""},
		{"argument", argErr, codes.InvalidArgument, "limit"},
		{"capacity", fmt.Errorf("x: %w", limiter.ErrCapacity), codes.ResourceExhausted, ""},
		{"batch", fmt.Errorf("x: %w", route.ErrBatchTooLarge), codes.ResourceExhausted, ""},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded, ""},
		{"canceled", context.Canceled, codes.Canceled, ""},
		{"status", status.Error(codes.Unavailable, "down"), codes.Unavailable, ""},
		{"other", errors.New("boom"), codes.Internal, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.code, grpcapi.Code(tt.err))
			assert.Equal(t, tt.field, peer.FieldOf(tt.err))
			if tt.err == nil {
				return
			}
			st := grpcapi.Status(tt.err)
			assert.Equal(t, tt.code, st.Code())
			assert.Equal(t, tt.err.Error(), st.Message())
			if tt.field == "" {
				assert.Empty(t, st.Details())
			} else {
				requireInvalid(t, st.Err(), tt.field)
			}
		})
	}
}

// PeersConfig's invalid values are errors naming the field, never
// replaced by defaults.
func TestPeersConfigValidate(t *testing.T) {
	require.NoError(t, peerrpc.DefaultConfig().Validate())
	for name, mutate := range map[string]func(*peerrpc.Config){
		"BatchLimit":  func(c *peerrpc.Config) { c.BatchLimit = 0 },
		"MaxInflight": func(c *peerrpc.Config) { c.MaxInflight = 0 },
		"Timeout":     func(c *peerrpc.Config) { c.Timeout = 0 },
	} {
		c := peerrpc.DefaultConfig()
		mutate(&c)
		assert.ErrorContains(t, c.Validate(), name)
		_, err := peerrpc.NewPeers(c, "n1", nil)
		assert.ErrorContains(t, err, name)
	}
	_, err := peerrpc.NewPeers(peerrpc.DefaultConfig(), "", nil)
	assert.ErrorContains(t, err, "self")
}

func TestServiceCheckBatchTooLarge(t *testing.T) {
	e := newEnv(t, withMaxBatch(1))
	res, err := e.svc.CheckBatch(context.Background(), make([]limiter.Request, 2))
	assert.Nil(t, res)
	require.ErrorIs(t, err, route.ErrBatchTooLarge)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := route.NewMetrics(reg)
	require.NoError(t, err)
	e := newEnv(t, func(o *envOpts) { o.metrics = m })
	ctx := context.Background()

	for range 3 {
		_, _ = e.srv.Check(ctx, logReq("m", 2, 1000))
	}
	_, err = e.srv.Check(ctx, &pb.CheckRequest{Key: "", Limit: 1, WindowMs: 1000})
	require.Error(t, err)
	_, err = e.srv.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{{Key: "c", Limit: 1, WindowMs: 1000}}})
	require.NoError(t, err)

	count := func(algo, outcome string) float64 { return counterValue(t, reg, algo, outcome) }
	assert.Equal(t, 2.0, count("SLIDING_WINDOW_LOG", "allowed"))
	assert.Equal(t, 1.0, count("SLIDING_WINDOW_LOG", "denied"))
	assert.Equal(t, 1.0, count("SLIDING_WINDOW_COUNTER", "error"))
	assert.Equal(t, 1.0, count("SLIDING_WINDOW_COUNTER", "allowed"))

	// Registering twice fails rather than double-counting.
	_, err = route.NewMetrics(reg)
	assert.Error(t, err)
}

// counterValue reads one local series of peerlimit_checks_total from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, algo, outcome string) float64 {
	t.Helper()
	return metric(t, reg, "peerlimit_checks_total", "algorithm", algo, "outcome", outcome, "route", "local")
}

func TestStrictCodec(t *testing.T) {
	c := rpc.NewStrictCodec()
	assert.Equal(t, "proto", c.Name())

	data, err := c.Marshal(&pb.CheckRequest{Key: "k", Limit: 1})
	require.NoError(t, err)
	var m pb.CheckRequest
	require.NoError(t, c.Unmarshal(data, &m))
	assert.Equal(t, "k", m.GetKey())

	// A bad message decodes to an empty one without an error here; the
	// interceptor answers it.
	bad := &pb.CheckRequest{Key: "stale"}
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff, 0xff})}, bad))
	assert.True(t, proto.Equal(&pb.CheckRequest{}, bad), "reset: %v", bad)
}
