package protoconv

import (
	"fmt"
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// benchRound is a replication round of n changed counter states, as a
// round over uniform keys sends (docs/benchmarks.md, "Replicas").
func benchRound(n int) peer.Replication {
	r := peer.Replication{Sent: time.UnixMilli(1_750_000_000_000), Boot: "boot-1"}
	for i := range n {
		r.States = append(r.States, limiter.KeyState{Key: fmt.Sprintf("tenant:7:user:%d", i), Window: time.Minute,
			Algorithm: limiter.SlidingWindowCounter, WindowID: 29_166_666, Prev: int64(i % 97), Curr: int64(i % 13)})
	}
	return r
}

// BenchmarkReplicateEncode and BenchmarkReplicateDecode are one round's
// conversion and (un)marshalling, per state (b.N states).
func BenchmarkReplicateEncode(b *testing.B) {
	r := benchRound(1000)
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(r.States) {
		if _, err := ToProtoReplicate("node1", r).MarshalVT(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReplicateDecode(b *testing.B) {
	data, err := ToProtoReplicate("node1", benchRound(1000)).MarshalVT()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i += 1000 {
		var in pb.ReplicateRequest
		if err := in.UnmarshalVT(data); err != nil {
			b.Fatal(err)
		}
		if len(FromProtoReplicate(&in).States) != 1000 {
			b.Fatal("states lost")
		}
	}
}

// BenchmarkDecodeReplicate is BenchmarkReplicateDecode's round through
// DecodeReplicate: no message object per state.
func BenchmarkDecodeReplicate(b *testing.B) {
	data, err := ToProtoReplicate("node1", benchRound(1000)).MarshalVT()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i += 1000 {
		_, r, err := DecodeReplicate(data)
		if err != nil || len(r.States) != 1000 {
			b.Fatal(err, len(r.States))
		}
	}
}

// BenchmarkAppendReplicate is BenchmarkReplicateEncode's round through
// SizeReplicate and AppendReplicate, as a Replicate call marshals it.
func BenchmarkAppendReplicate(b *testing.B) {
	r := benchRound(1000)
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i += len(r.States) {
		buf = AppendReplicate(make([]byte, 0, SizeReplicate("node1", r)), "node1", r)
	}
	_ = buf
}

// benchAnswer is a forwarded batch's answer of 4 checks, as a busy link
// carries (docs/benchmarks.md: 2.7 to 3 checks per message).
func benchAnswer(b *testing.B) []byte {
	in := &pb.ForwardResponse{Seq: 7}
	for range 4 {
		in.Results = append(in.Results, &pb.CheckResult{Result: &pb.CheckResult_Response{Response: &pb.CheckResponse{
			Allowed: true, Limit: 1000, Remaining: 420, ResetAfterMs: 59_000, Owner: "node2"}}})
	}
	data, err := in.MarshalVT()
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkForwardAnswerVT and BenchmarkDecodeForwardResponse are one
// forwarded check's share of decoding its batch's answer, before and after
// DecodeForwardResponse (b.N checks).
func BenchmarkForwardAnswerVT(b *testing.B) {
	data := benchAnswer(b)
	b.ReportAllocs()
	for i := 0; i < b.N; i += 4 {
		var in pb.ForwardResponse
		if err := in.UnmarshalVT(data); err != nil {
			b.Fatal(err)
		}
		out := make([]peer.Result, len(in.Results))
		for j, r := range in.Results {
			out[j] = FromProtoResult(r)
		}
	}
}

func BenchmarkDecodeForwardResponse(b *testing.B) {
	data := benchAnswer(b)
	b.ReportAllocs()
	for i := 0; i < b.N; i += 4 {
		if _, _, err := DecodeForwardResponse(data); err != nil {
			b.Fatal(err)
		}
	}
}
