package route_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/peerlimit/peerlimit/limiter"
)

// tracedCluster is members a and b, whose request paths record forward
// spans into rec, and a tracer for the callers' spans.
func tracedCluster(t *testing.T) (*cluster, *tracetest.SpanRecorder, trace.Tracer) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(bg)) })
	c := newCluster(t, []string{"a", "b"}, func(o *clusterOpts) { o.tracer = tp.Tracer("route") })
	return c, rec, tp.Tracer("caller")
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// A check forwarded to its owner under a traced caller is a client span,
// the caller's child, naming the owner and how many of the caller's
// checks went; a batch's checks bound for one owner are one span.
func TestForwardSpanNamesTheOwner(t *testing.T) {
	c, rec, caller := tracedCluster(t)
	a := c.members["a"]
	owner := c.ring.Owner(c.key(t, "b", "one"))
	ctx, parent := caller.Start(bg, "call")
	require.NoError(t, a.svc.Check(ctx, logReq(c.key(t, "b", "one"), 10, time.Minute)).Err)
	_, err := a.svc.CheckBatch(ctx, []limiter.Request{logReq(c.key(t, "b", "x"), 10, time.Minute), logReq(c.key(t, "b", "y"), 10, time.Minute),
		logReq(c.key(t, "a", "own"), 10, time.Minute)})
	require.NoError(t, err)
	parent.End()

	var fwd []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "peerlimit.forward" {
			fwd = append(fwd, s)
		}
	}
	require.Len(t, fwd, 2, "one per hop; the check a decides itself has none")
	for i, want := range []int64{1, 2} {
		s := fwd[i]
		at := attrsOf(s)
		assert.Equal(t, trace.SpanKindClient, s.SpanKind())
		assert.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID())
		assert.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID())
		assert.Equal(t, "b", at["peerlimit.owner.id"].AsString())
		assert.Equal(t, owner.Addr, at["peerlimit.owner.addr"].AsString())
		assert.Equal(t, want, at["peerlimit.forward.checks"].AsInt64())
		assert.Equal(t, otelcodes.Unset, s.Status().Code)
	}
}

// Without a caller's span, or under one not sampled, a forward records
// nothing: no trace starts at a hop.
func TestForwardSpanOnlyUnderARecordingCaller(t *testing.T) {
	c, rec, _ := tracedCluster(t)
	a := c.members["a"]
	require.NoError(t, a.svc.Check(bg, logReq(c.key(t, "b", "k"), 10, time.Minute)).Err)
	unsampled := trace.ContextWithRemoteSpanContext(bg, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	require.NoError(t, a.svc.Check(unsampled, logReq(c.key(t, "b", "k"), 10, time.Minute)).Err)
	assert.Empty(t, rec.Ended())
	assert.Empty(t, rec.Started())
}

// A hop whose owner cannot be reached ends in error: the trace shows the
// fallback answered.
func TestForwardSpanRecordsTheFailure(t *testing.T) {
	c, rec, caller := tracedCluster(t)
	c.net.Cut("a", "b")
	ctx, parent := caller.Start(bg, "call")
	res := c.members["a"].svc.Check(ctx, logReq(c.key(t, "b", "k"), 10, time.Minute))
	parent.End()
	require.NoError(t, res.Err)
	assert.True(t, res.Degraded)
	var fwd sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "peerlimit.forward" {
			fwd = s
		}
	}
	require.NotNil(t, fwd)
	assert.Equal(t, otelcodes.Error, fwd.Status().Code)
	assert.NotEmpty(t, fwd.Events(), "the error is recorded")
}
