package wire

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

func batchResponse(n int) *pb.CheckBatchResponse {
	out := &pb.CheckBatchResponse{}
	for i := range n {
		if i%7 == 3 {
			out.Results = append(out.Results, &pb.CheckResult{Result: &pb.CheckResult_Error{Error: &pb.Error{Code: 3, Field: "key", Message: "invalid key: must not be empty"}}})
			continue
		}
		out.Results = append(out.Results, &pb.CheckResult{Result: &pb.CheckResult_Response{Response: &pb.CheckResponse{
			Allowed: i%2 == 0, Limit: 1e12, Remaining: int64(i), CurrentCount: 7, RetryAfterMs: int64(i), ResetAfterMs: 60_000,
			RefillAfterMs: int64(i % 4), Owner: "node2", Degraded: i%5 == 0}}})
	}
	return out
}

func batchRequest(n int) *pb.CheckBatchRequest {
	out := &pb.CheckBatchRequest{}
	for i := range n {
		hits := int64(i % 3)
		out.Checks = append(out.Checks, &pb.CheckRequest{Key: fmt.Sprintf("tenant:%d:ключ", i), Limit: 100, WindowMs: 60_000,
			Algorithm: pb.Algorithm(i % 2), Hits: &hits, Policy: strings.Repeat("p", i%2)})
	}
	return out
}

// Codec's bytes are protobuf: protobuf-go decodes them to an equal
// message, and Codec decodes protobuf-go's. Both the small (plain slice)
// and the large (pooled buffer) paths.
func TestCodecIsProtobuf(t *testing.T) {
	for _, m := range []proto.Message{
		batchResponse(1), batchResponse(100), batchRequest(1), batchRequest(100),
		&pb.KeyState{Key: "k", WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG, LogBaseMs: 1 << 40, LogOffsetsMs: []uint32{0, 1, 1, 999}},
		&pb.MembersResponse{Self: "n1", Members: []*pb.Member{{Id: "n1", GrpcAddr: "a:1", Config: map[string]string{"policies": "0123456789ab"},
			ConfigDiffers: []string{"policies"}}}, PartitionCount: 3, PartitionOwners: []uint32{0, 1, 0}},
	} {
		t.Run(fmt.Sprintf("%T/%d", m, proto.Size(m)), func(t *testing.T) {
			data, err := Codec.Marshal(m)
			require.NoError(t, err)
			defer data.Free()
			viaProto := m.ProtoReflect().New().Interface()
			require.NoError(t, proto.Unmarshal(data.Materialize(), viaProto))
			assert.True(t, proto.Equal(m, viaProto), "protobuf-go decodes Codec's bytes to the same message")

			want, err := proto.Marshal(m)
			require.NoError(t, err)
			viaCodec := m.ProtoReflect().New().Interface()
			require.NoError(t, Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, viaCodec))
			assert.True(t, proto.Equal(m, viaCodec), "Codec decodes protobuf-go's bytes to the same message")
		})
	}
}

// Unmarshal replaces what the message held, as proto.Unmarshal does
// (UnmarshalVT alone would merge).
func TestCodecUnmarshalReplaces(t *testing.T) {
	data, err := proto.Marshal(&pb.CheckRequest{Key: "new", Limit: 5})
	require.NoError(t, err)
	m := &pb.CheckRequest{Key: "old", WindowMs: 1000, Policy: "p"}
	require.NoError(t, Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, m))
	assert.True(t, proto.Equal(&pb.CheckRequest{Key: "new", Limit: 5}, m), "got %v", m)
}

// A message without generated vtprotobuf code (gRPC health here, Envoy's
// rate-limit service in the node) goes through grpc-go's codec.
func TestCodecFallsBack(t *testing.T) {
	in := &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}
	data, err := Codec.Marshal(in)
	require.NoError(t, err)
	var out grpc_health_v1.HealthCheckResponse
	require.NoError(t, Codec.Unmarshal(data, &out))
	assert.True(t, proto.Equal(in, &out))
}

func TestCodecRefusesMalformed(t *testing.T) {
	for _, b := range [][]byte{{0xff, 0xff, 0xff}, {0x0a, 0x05, 'a'}, {0x0c}, {0x00, 0x01}} {
		err := Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &pb.CheckBatchRequest{})
		assert.Error(t, err, "% x", b)
	}
}

// FuzzCodecMatchesProtobufGo decodes arbitrary bytes both ways. Whatever
// protobuf-go decodes, Codec decodes to an equal message, with one
// exception: a known field sent with the wrong wire type, which
// protobuf-go keeps as an unknown field and Codec refuses. On input
// protobuf-go refuses, Codec may be lenient (strings that are not UTF-8,
// some malformed tags and unknown groups): what it decodes is then
// checked like any request, field by field (see the package doc). It must
// never panic.
func FuzzCodecMatchesProtobufGo(f *testing.F) {
	for _, m := range []proto.Message{batchRequest(3), batchResponse(3),
		&pb.ForwardRequest{Origin: "n1", Seq: 7, RequestId: "r-1", WaitMs: 250, Checks: batchRequest(2).GetChecks()},
		&pb.CheckStreamResponse{Seq: 9, Error: &pb.Error{Code: 8, Message: "too many"}},
		&pb.ReportResponse{HotSinceUnixMs: 1_700_000_000_000, Checks: []*pb.HotKey{{Key: "k", Count: 9, Error: 1}},
			Samples: []*pb.Sample{{TimeUnixMs: 1, LocalAllowed: 2.5, ForwardP99Ms: new(0.7)}}},
		&pb.InspectResponse{Key: "k", Owner: "n2", Limits: []*pb.KeyView{{WindowMs: 1000, Count: 3, EntriesUnixMs: []int64{1, 2}}}},
		&pb.SettleRequest{Origin: "n1", Uses: []*pb.LeaseUse{{Id: 7, Used: 2, OffsetsMs: []int64{3, 40}}}},
		&pb.LeaseResponse{Id: 7, Hits: 50, DurationMs: 250, Result: &pb.CheckResult{Result: &pb.CheckResult_Response{Response: &pb.CheckResponse{Allowed: true}}}},
		// Calendar limits: a check, a key's state, a view.
		&pb.CheckBatchRequest{Checks: []*pb.CheckRequest{{Key: "tenant:7", Limit: 100000, Calendar: pb.CalendarUnit_MONTH, TimeZone: "Europe/Paris"}}},
		&pb.HandoffRequest{Origin: "n1", States: []*pb.KeyState{{Key: "k", Calendar: pb.CalendarUnit_WEEK, TimeZone: "Asia/Tokyo", WindowId: 1_750_000_000_000, Curr: 7}}},
		&pb.InspectResponse{Key: "k", Limits: []*pb.KeyView{{Calendar: pb.CalendarUnit_DAY, TimeZone: "America/New_York", Current: 3}},
			Reservations: []*pb.ReservationView{{Calendar: pb.CalendarUnit_YEAR, Hits: 2}}}} {
		data, err := proto.Marshal(m)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte{0x0a, 0x05, 0x0a, 0x03, 'a', 0xff, 'b'})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, newMsg := range []func() proto.Message{
			func() proto.Message { return &pb.CheckBatchRequest{} },
			func() proto.Message { return &pb.CheckBatchResponse{} },
			func() proto.Message { return &pb.HandoffRequest{} },
			// The messages of the streams: every batch between nodes
			// and from the Go client is one of these.
			func() proto.Message { return &pb.ForwardRequest{} },
			func() proto.Message { return &pb.ForwardResponse{} },
			func() proto.Message { return &pb.CheckStreamRequest{} },
			func() proto.Message { return &pb.CheckStreamResponse{} },
			// The console's calls between members.
			func() proto.Message { return &pb.ReportRequest{} },
			func() proto.Message { return &pb.ReportResponse{} },
			func() proto.Message { return &pb.PeerInspectRequest{} },
			func() proto.Message { return &pb.InspectResponse{} },
			// Budget leases.
			func() proto.Message { return &pb.LeaseRequest{} },
			func() proto.Message { return &pb.LeaseResponse{} },
			func() proto.Message { return &pb.SettleRequest{} },
		} {
			want, got := newMsg(), newMsg()
			// Unknown fields are compared by their presence only:
			// protobuf-go re-encodes their tags minimally, Codec keeps
			// the bytes as sent.
			wantErr := proto.Unmarshal(data, want)
			gotErr := Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, got)
			switch {
			case wantErr == nil && gotErr != nil:
				require.Contains(t, gotErr.Error(), "wrong wireType", "Codec refused what protobuf-go decodes")
			case wantErr == nil:
				require.Equal(t, dropUnknown(want.ProtoReflect()), dropUnknown(got.ProtoReflect()), "unknown fields")
				require.True(t, proto.Equal(want, got), "protobuf-go: %v\nCodec: %v", want, got)
			}
		}
	})
}

// dropUnknown clears the unknown fields of m and of the messages in it,
// and reports whether there were any.
func dropUnknown(m protoreflect.Message) bool {
	found := len(m.GetUnknown()) > 0
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				found = dropUnknown(v.List().Get(i).Message()) || found
			}
		case fd.Message() != nil && !fd.IsMap():
			found = dropUnknown(v.Message()) || found
		}
		return true
	})
	return found
}
