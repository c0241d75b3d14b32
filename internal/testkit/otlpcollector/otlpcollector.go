// Package otlpcollector is an OpenTelemetry collector for tests: it
// receives spans over OTLP/gRPC (TraceService.Export) and OTLP/HTTP
// (POST /v1/traces, protobuf), on loopback free ports, and keeps them for
// the test to read. A Collector is a value: both servers stop through
// t.Cleanup, after whatever the test registered later (a node exporting
// to it flushes first).
package otlpcollector

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
)

// Span is one received span, flattened for assertions.
type Span struct {
	Name                          string
	Kind                          tracepb.Span_SpanKind
	TraceID, SpanID, ParentSpanID string // lowercase hex; ParentSpanID "" for a root
	// Attributes and Resource are the span's and its resource's
	// attributes, each value as text (fmt's %v of the typed value).
	Attributes, Resource map[string]string
	StatusCode           tracepb.Status_StatusCode
	StatusMessage        string
	Via                  string // "grpc" or "http": how it arrived
}

// Collector receives spans. Safe for concurrent use.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	// GRPCAddr is the OTLP/gRPC endpoint, host:port.
	GRPCAddr string
	// HTTPURL is the OTLP/HTTP base URL (http://host:port); spans are
	// posted under /v1/traces.
	HTTPURL string

	mu       sync.Mutex
	spans    []Span
	requests int
}

// New starts a Collector serving both protocols until the test ends.
func New(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{}
	c.GRPCAddr = grpctest.Serve(t, func(s *grpc.Server) { coltracepb.RegisterTraceServiceServer(s, c) })
	hs := httptest.NewServer(http.HandlerFunc(c.serveHTTP))
	c.HTTPURL = hs.URL
	t.Cleanup(hs.Close)
	return c
}

// Export implements coltracepb.TraceServiceServer.
func (c *Collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.add(req, "grpc")
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP answers OTLP/HTTP's POST /v1/traces with a protobuf body.
func (c *Collector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.add(req, "http")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *Collector) add(req *coltracepb.ExportTraceServiceRequest, via string) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{Name: s.GetName(), Kind: s.GetKind(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					Attributes: attrs(s.GetAttributes()), Resource: res, StatusCode: s.GetStatus().GetCode(),
					StatusMessage: s.GetStatus().GetMessage(), Via: via})
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	c.spans = append(c.spans, got...)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns every span received so far, in arrival order.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Requests returns how many export requests arrived, over both
// protocols: 0 when nothing ever exported to it.
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// Named returns the received spans called name.
func (c *Collector) Named(name string) []Span {
	var out []Span
	for _, s := range c.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
