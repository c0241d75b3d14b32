package rpc_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// The offsets of a reservation token's fields before base64url, as
// limiter/token.go lays them out (version 2): what a caller without the
// key can rewrite, the MAC kept.
const (
	tokenHitsAt    = 17 // 8 bytes, big endian
	tokenExpiresAt = 25 // 8 bytes, big endian, unix ms
	tokenFlagsAt   = 33 // 1 byte: bit 0 a HOLD, the others unknown
	tokenIDAt      = 1  // 8 bytes
)

// rewriteToken returns tok with edit applied to its bytes.
func rewriteToken(t testing.TB, tok string, edit func(b []byte)) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(tok)
	require.NoError(t, err)
	edit(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// seedReserve is the reservation the token seeds settle: 3 hits of 10.
func seedReserve() *pb.CheckRequest {
	return &pb.CheckRequest{Key: "tok", Limit: 10, WindowMs: 60_000, Op: pb.Op_RESERVE, Hits: ptr(int64(3)), TtlMs: time.Hour.Milliseconds()}
}

// tokenSeeds reserves on e and returns SETTLE and RELEASE items of the
// reservation's token, a current one (version 2, with its MAC): rewritten
// (its hits, expiry, flags or id changed, the MAC kept), then as issued.
func tokenSeeds(t testing.TB, e *env) (rewritten, valid []*pb.CheckRequest) {
	t.Helper()
	out, err := e.srv.CheckBatch(context.Background(), &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{seedReserve()}})
	require.NoError(t, err)
	tok := out.GetResults()[0].GetResponse().GetReservation()
	require.NotEmpty(t, tok, "the seed reservation was admitted: %v", out)
	settle := func(tok string, op pb.Op, hits int64) *pb.CheckRequest {
		r := seedReserve()
		r.Op, r.Reservation, r.TtlMs, r.Hits = op, tok, 0, ptr(hits)
		if op == pb.Op_RELEASE {
			r.Hits = nil
		}
		return r
	}
	for _, edit := range []func(b []byte){
		func(b []byte) { binary.BigEndian.PutUint64(b[tokenHitsAt:], 10) },
		func(b []byte) {
			binary.BigEndian.PutUint64(b[tokenExpiresAt:], binary.BigEndian.Uint64(b[tokenExpiresAt:])+uint64(time.Hour.Milliseconds()))
		},
		func(b []byte) { b[tokenFlagsAt] |= 1 },
		func(b []byte) { b[tokenFlagsAt] |= 2 },
		func(b []byte) { b[tokenIDAt] ^= 0xff },
	} {
		bad := rewriteToken(t, tok, edit)
		rewritten = append(rewritten, settle(bad, pb.Op_SETTLE, 3), settle(bad, pb.Op_RELEASE, 0))
	}
	return rewritten, []*pb.CheckRequest{settle(tok, pb.Op_SETTLE, 2), settle(tok, pb.Op_RELEASE, 0)}
}

// fieldNumber is the number of CheckRequest's field name.
func fieldNumber(name protoreflect.Name) protowire.Number {
	return (&pb.CheckRequest{}).ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// duplicateFieldSeeds are batches whose one item has a field twice on the
// wire (the protobuf side of JSON's duplicate keys: the last one wins, as
// protobuf says): limit, op, and reservation, first the valid token, then
// a rewritten one.
func duplicateFieldSeeds(t testing.TB, valid, rewritten string) [][]byte {
	t.Helper()
	item := func(r *pb.CheckRequest, extra func([]byte) []byte) []byte {
		b, err := proto.Marshal(r)
		require.NoError(t, err)
		var batch []byte
		batch = protowire.AppendTag(batch, 1, protowire.BytesType) // CheckBatchRequest.checks
		return protowire.AppendBytes(batch, extra(b))
	}
	varint := func(name protoreflect.Name, v uint64) func([]byte) []byte {
		return func(b []byte) []byte {
			return protowire.AppendVarint(protowire.AppendTag(b, fieldNumber(name), protowire.VarintType), v)
		}
	}
	check := &pb.CheckRequest{Key: "dup", Limit: 1, WindowMs: 1000}
	settle := seedReserve()
	settle.Op, settle.Reservation, settle.TtlMs, settle.Hits = pb.Op_SETTLE, valid, 0, ptr(int64(2))
	return [][]byte{
		item(check, varint("limit", 1000)),
		item(check, varint("op", uint64(pb.Op_REFUND))),
		item(settle, func(b []byte) []byte {
			return protowire.AppendString(protowire.AppendTag(b, fieldNumber("reservation"), protowire.BytesType), rewritten)
		}),
	}
}

// A rewritten current token is refused in its own item, INVALID_ARGUMENT
// naming reservation, nothing refunded; the token as issued settles, once.
// These are FuzzUnmarshalCheckBatch's token seeds, answered as they must be.
func TestTokenSeedsAnswerAsTheyMust(t *testing.T) {
	e := newEnv(t)
	rewritten, valid := tokenSeeds(t, e)
	out, err := e.srv.CheckBatch(context.Background(), &pb.CheckBatchRequest{Checks: append(rewritten, valid...)})
	require.NoError(t, err)
	for i, r := range out.GetResults()[:len(rewritten)] {
		require.NotNil(t, r.GetError(), "rewritten item %d: %v", i, r)
		assert.Equal(t, uint32(codes.InvalidArgument), r.GetError().GetCode(), "rewritten item %d", i)
		assert.Equal(t, "reservation", r.GetError().GetField(), "rewritten item %d", i)
	}
	settled := out.GetResults()[len(rewritten)].GetResponse()
	require.NotNil(t, settled, "%v", out.GetResults()[len(rewritten)])
	assert.Equal(t, pb.Settled_SETTLED_NOW, settled.GetSettled())
	assert.EqualValues(t, 1, settled.GetRefunded(), "reserved 3, settled at 2")
	assert.EqualValues(t, 2, settled.GetCurrentCount())
	released := out.GetResults()[len(rewritten)+1].GetResponse()
	require.NotNil(t, released)
	assert.Equal(t, pb.Settled_SETTLED_BEFORE, released.GetSettled(), "a release after the settle changes nothing")
}
