package peerrpc

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

var (
	traceID = trace.TraceID{0x46, 0x3a, 0xc3, 0x5c, 0x9f, 0x64, 0x13, 0xad, 0x48, 0x48, 0x5a, 0x39, 0x53, 0xbb, 0x61, 0x24}
	spanID  = trace.SpanID{0xa2, 0xfb, 0x4a, 0x1d, 0x1a, 0x96, 0xd3, 0x12}
)

func spanContext(sampled bool) trace.SpanContext {
	cfg := trace.SpanContextConfig{TraceID: traceID, SpanID: spanID}
	if sampled {
		cfg.TraceFlags = trace.FlagsSampled
	}
	return trace.NewSpanContext(cfg)
}

// Only a sampled check carries its span: an unsampled or untraced one
// adds nothing to the batch.
func TestOnlySampledChecksCarryTheirSpan(t *testing.T) {
	sampled := sampledParent(trace.SpanFromContext(trace.ContextWithSpanContext(context.Background(), spanContext(true))))
	for name, ctx := range map[string]context.Context{
		"untraced":  context.Background(),
		"unsampled": trace.ContextWithSpanContext(context.Background(), spanContext(false)),
	} {
		if p := sampledParent(trace.SpanFromContext(ctx)); p != nil {
			t.Errorf("%s: carries %v", name, p)
		}
	}
	if sampled == nil {
		t.Fatal("a sampled check carries nothing")
	}
	got := traceParents([]fwdItem{{}, {span: sampled}, {}})
	if len(got) != 1 || got[0].GetCheck() != 1 || string(got[0].GetTraceId()) != string(traceID[:]) ||
		string(got[0].GetSpanId()) != string(spanID[:]) || got[0].GetFlags() != uint32(trace.FlagsSampled) {
		t.Fatalf("traceParents = %v; want check 1's span", got)
	}
	if got := traceParents([]fwdItem{{}, {}}); got != nil {
		t.Fatalf("an untraced batch carries %v", got)
	}
}

// Whatever trace parents a peer sends, the owner starts a span only for
// a valid one naming a check of the batch, once per check, and ends all.
func TestTheOwnerTakesOnlyValidTraceParents(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := &Server{Tracer: tp.Tracer("test"), NodeID: "owner"}
	good := &pb.TraceParent{Check: 0, TraceId: traceID[:], SpanId: spanID[:], Flags: 1}
	in := &pb.ForwardRequest{Origin: "sender", Checks: []*pb.CheckRequest{{Key: "a"}, {Key: "b"}}, Traces: []*pb.TraceParent{
		good,
		{Check: 0, TraceId: traceID[:], SpanId: spanID[:], Flags: 1}, // the same check again
		{Check: 2, TraceId: traceID[:], SpanId: spanID[:], Flags: 1}, // no such check
		{Check: 1, TraceId: traceID[:5], SpanId: spanID[:], Flags: 1},
		{Check: 1, TraceId: traceID[:], SpanId: nil, Flags: 1},
		{Check: 1, TraceId: make([]byte, 16), SpanId: make([]byte, 8), Flags: 1}, // all zero: invalid
		{Check: 1, TraceId: traceID[:], SpanId: spanID[:], Flags: 1 << 20},
	}}
	end := s.startDecideSpans(context.Background(), in)
	end([]*pb.CheckResult{{Result: &pb.CheckResult_Response{Response: &pb.CheckResponse{Allowed: true}}}})
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended; want 1, for check 0", len(spans))
	}
	if sp := spans[0]; sp.Parent().SpanID() != spanID || sp.Parent().TraceID() != traceID || !sp.Parent().IsRemote() {
		t.Fatalf("the owner's span has parent %v; want the sender's span", sp.Parent())
	}
	if len(rec.Started()) != 1 {
		t.Fatalf("%d spans started", len(rec.Started()))
	}
	// Without a tracer nothing is started, whatever comes.
	(&Server{}).startDecideSpans(context.Background(), in)(nil)
}
