package peerrpc

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/testkit/peertest"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
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
	_, end := s.startSpans(context.Background(), in, decideSpanName)
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
	ctx, end := (&Server{}).startSpans(context.Background(), in, decideSpanName)
	end(nil)
	if trace.SpanFromContext(ctx).SpanContext().IsValid() {
		t.Fatal("without a tracer the context gained a span")
	}
}

// A relay's checks come from one caller: each carries the caller's span
// when it is sampled, and none does otherwise.
func TestARelaysChecksShareTheirCallersSpan(t *testing.T) {
	sc := spanContext(true)
	got := sharedParents(2, &sc)
	if len(got) != 2 {
		t.Fatalf("sharedParents = %v; want one per check", got)
	}
	for i, tp := range got {
		if p, ok := remoteParent(tp); !ok || tp.GetCheck() != uint32(i) || p.SpanID() != spanID || p.TraceID() != traceID || !p.IsSampled() {
			t.Errorf("check %d carries %v", i, tp)
		}
	}
	if got := sharedParents(2, nil); got != nil {
		t.Fatalf("an unsampled relay carries %v", got)
	}
}

// relayer is a relay's Handler: it forwards what it is asked to relay to
// owner, as route's HandleRelay does, with the context it was given.
type relayer struct {
	*peertest.Recorder
	peers *Peers
	owner peer.Route
}

func (r relayer) HandleRelay(ctx context.Context, _ string, reqs []limiter.Request) []peer.Result {
	results, _, err := r.peers.ForwardBatch(ctx, r.owner, reqs)
	if err != nil {
		panic(err)
	}
	return results
}

// tracedServer serves a Server over h on a free port, recording its spans
// as node id with tp.
func tracedServer(t *testing.T, id string, h peer.Handler, tp trace.TracerProvider) peer.Route {
	s := NewServer(h)
	s.Tracer, s.NodeID = tp.Tracer("peerrpc"), id
	return peer.Route{ID: id, Addr: grpctest.Serve(t, func(gs *grpc.Server) { pb.RegisterPeerServer(gs, s) })}
}

func newTestPeers(t *testing.T, self string) *Peers {
	p, err := NewPeers(DefaultConfig(), self, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// A check relayed (a asks b to take it to its owner c, which a cannot
// reach) is traced as a forward is: b's relay span is a child of a's
// span, and c's decision a child of b's, in one trace.
func TestARelayedCheckShowsTheOwnersSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := tracedServer(t, "c", &peertest.Recorder{ID: "c"}, tp)
	b := tracedServer(t, "b", relayer{Recorder: &peertest.Recorder{ID: "b"}, peers: newTestPeers(t, "b"), owner: c}, tp)

	ctx, caller := tp.Tracer("caller").Start(context.Background(), "call")
	req := limiter.Request{Key: "k", Limit: 5, Window: time.Second, Algorithm: limiter.SlidingWindowLog, Hits: 1}
	results, err := newTestPeers(t, "a").Relay(ctx, b, []limiter.Request{req, req})
	caller.End()
	if err != nil || len(results) != 2 || results[0].Owner != "c" {
		t.Fatalf("Relay = %v, %v; want c's answers", results, err)
	}

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	relays, decides := byName[relaySpanName], byName[decideSpanName]
	if len(relays) != 2 || len(decides) != 2 {
		t.Fatalf("%d relay and %d decide spans; want one of each per check", len(relays), len(decides))
	}
	for _, r := range relays {
		if r.Parent().SpanID() != caller.SpanContext().SpanID() || r.SpanContext().TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("b's relay span has parent %v; want a's caller's span", r.Parent())
		}
	}
	// b forwards both checks in one call, with one check's span.
	relayIDs := map[trace.SpanID]bool{relays[0].SpanContext().SpanID(): true, relays[1].SpanContext().SpanID(): true}
	for _, d := range decides {
		if !relayIDs[d.Parent().SpanID()] || d.Parent().SpanID() != decides[0].Parent().SpanID() ||
			d.SpanContext().TraceID() != caller.SpanContext().TraceID() {
			t.Errorf("c's decide span has parent %v; want b's relay span", d.Parent())
		}
	}
}
