// Package protoconv converts between the wire messages of
// proto/peerlimit/v1 and the request path's types (limiter, peer), for
// every gRPC face of a node: the public RateLimiter service (package rpc)
// and the peer protocol's client and server (package peerrpc). It holds
// no logic beyond conversion and the range checks that keep a conversion
// from wrapping a number.
package protoconv

import (
	"fmt"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// FromProto converts and range-checks a wire request that carries its
// numbers; the store checks the rest. A policy name is refused: only the
// public API resolves policies (on the node that received the request),
// and a forwarded check always carries numbers.
func FromProto(in *pb.CheckRequest) (limiter.Request, error) {
	algo, err := AlgorithmFromProto(in.GetAlgorithm())
	if err != nil {
		return limiter.Request{}, err
	}
	if in.GetPolicy() != "" {
		return limiter.Request{}, errPolicyForwarded
	}
	r := limiter.NewRequest(in.GetKey(), in.GetLimit(), in.GetWindowMs(), algo, in.Hits)
	if r.Calendar, err = CalendarFromProto(in.GetCalendar(), in.GetTimeZone()); err != nil {
		return limiter.Request{}, err
	}
	if r.Burst, err = BurstFromAPI(in.Burst); err != nil {
		return limiter.Request{}, err
	}
	return r, SetOp(&r, in)
}

// BurstFromAPI converts a public request's optional burst to
// limiter.Request.Burst, where 0 means absent (the limit): an explicit
// burst must therefore be positive, or it is refused naming the field
// rather than read as "absent". Every public face (gRPC, HTTP) converts
// burst through here.
func BurstFromAPI(burst *int64) (int64, error) {
	switch {
	case burst == nil:
		return 0, nil
	case *burst <= 0:
		return 0, &limiter.ArgumentError{Field: "burst", Reason: fmt.Sprintf("must be positive, got %d; leave it out for a bucket of limit hits", *burst)}
	}
	return *burst, nil
}

// CalendarFromProto converts a public request's calendar and time_zone;
// an unknown unit or zone, or a zone without a unit, is refused naming
// the field (limiter.NewCalendar).
func CalendarFromProto(u pb.CalendarUnit, zone string) (limiter.Calendar, error) {
	if u == pb.CalendarUnit_CALENDAR_NONE && zone == "" {
		return 0, nil // the hot path: a sliding window
	}
	return limiter.NewCalendar(calendarUnit(u), zone)
}

// calendarUnit is u as the limiter's unit, an unknown value kept unknown.
func calendarUnit(u pb.CalendarUnit) limiter.CalendarUnit {
	if u < 0 || u > 255 {
		return 255
	}
	return limiter.CalendarUnit(u)
}

// CalendarToProto is c as the wire carries it: its unit and its zone's
// name ("" for UTC, the default, and for no calendar).
func CalendarToProto(c limiter.Calendar) (pb.CalendarUnit, string) {
	if c == 0 {
		return 0, ""
	}
	zone := c.Zone()
	if zone == "UTC" {
		zone = ""
	}
	return pb.CalendarUnit(c.Unit()), zone
}

// calendarFromMember is the calendar another member sent: never refused
// here, so that the store refuses a unit or zone this node does not know
// naming the field (limiter.CalendarOf).
func calendarFromMember(u pb.CalendarUnit, zone string) limiter.Calendar {
	if u == pb.CalendarUnit_CALENDAR_NONE && zone == "" {
		return 0
	}
	return limiter.CalendarOf(calendarUnit(u), zone)
}

// SetOp sets r's op, reservation and TTL from in, refusing an op the API
// does not know (limiter.Request.SetOp).
func SetOp(r *limiter.Request, in *pb.CheckRequest) error {
	op := in.GetOp()
	if op < 0 || int(op) >= len(pb.Op_name) {
		return &limiter.ArgumentError{Field: "op", Reason: fmt.Sprintf("unknown value %d", op)}
	}
	if op == pb.Op_CHECK && in.GetReservation() == "" && in.GetTtlMs() == 0 {
		return nil // the hot path: nothing more to set
	}
	return r.SetOp(limiter.Op(op), in.GetReservation(), in.GetTtlMs(), in.Hits != nil)
}

var errPolicyForwarded = &limiter.ArgumentError{Field: "policy",
	Reason: "not accepted on this path: a forwarded check carries limit, window_ms and algorithm, resolved by the node that received it"}

// FromForwarded converts a check another member forwarded. An algorithm
// this node does not know is passed on as it came (clamped to the type's
// range), so that the store refuses it naming the field and the owner
// logs that the two nodes differ, as for any other field; only a policy
// name, which no member sends, is refused here.
func FromForwarded(in *pb.CheckRequest) (limiter.Request, error) {
	if in.GetPolicy() != "" {
		return limiter.Request{}, errPolicyForwarded
	}
	a := in.GetAlgorithm()
	if a < 0 || a > 255 {
		a = 255
	}
	r := limiter.NewRequest(in.GetKey(), in.GetLimit(), in.GetWindowMs(), limiter.Algorithm(a), in.Hits)
	r.Calendar = calendarFromMember(in.GetCalendar(), in.GetTimeZone())
	r.Burst = in.GetBurst() // a member sends only a positive burst; any other is the store's to refuse
	if op := in.GetOp(); op != pb.Op_CHECK || in.GetReservation() != "" || in.GetTtlMs() != 0 {
		// An unknown op too is the store's to refuse, naming the field.
		_ = r.SetOp(limiter.Op(min(max(op, 0), 255)), in.GetReservation(), in.GetTtlMs(), true) // a member always sends hits
	}
	return r, nil
}

// AlgorithmFromProto converts an algorithm of the public API; an unknown
// value is refused naming the field.
func AlgorithmFromProto(a pb.Algorithm) (limiter.Algorithm, error) {
	switch a {
	case pb.Algorithm_SLIDING_WINDOW_COUNTER:
		return limiter.SlidingWindowCounter, nil
	case pb.Algorithm_SLIDING_WINDOW_LOG:
		return limiter.SlidingWindowLog, nil
	case pb.Algorithm_GCRA:
		return limiter.GCRA, nil
	case pb.Algorithm_CONCURRENCY:
		return limiter.Concurrency, nil
	}
	return 0, &limiter.ArgumentError{Field: "algorithm",
		Reason: fmt.Sprintf("unknown value %d; want SLIDING_WINDOW_COUNTER (0), SLIDING_WINDOW_LOG (1), GCRA (2) or CONCURRENCY (3)", a)}
}

// ToProtoRequest converts a validated limiter request for the wire.
func ToProtoRequest(r limiter.Request) *pb.CheckRequest { return NewRequestSlab(1).Put(0, r) }

// ToProto converts a decided result to the wire response.
func ToProto(r peer.Result) *pb.CheckResponse {
	out := new(pb.CheckResponse)
	fillResponse(out, r)
	return out
}

// fillResponse sets the fields of a fresh out from r.
func fillResponse(out *pb.CheckResponse, r peer.Result) {
	d := r.Decision
	out.Allowed = d.Allowed
	out.Limit = d.Limit
	out.Remaining = d.Remaining
	out.CurrentCount = d.CurrentCount
	out.RetryAfterMs = d.RetryAfter.Milliseconds()
	out.ResetAfterMs = d.ResetAfter.Milliseconds()
	out.RefillAfterMs = d.RefillAfter.Milliseconds()
	out.Owner = r.Owner
	out.Degraded = r.Degraded
	if a := d.Adjust; a != nil {
		out.Reservation = a.Reservation
		out.ExpiresInMs = a.ExpiresIn.Milliseconds()
		out.Refunded = a.Refunded
		out.Over = a.Over
		out.Settled = pb.Settled(a.Settled)
	}
}

// ToProtoResult converts a Result for the wire.
func ToProtoResult(r peer.Result) *pb.CheckResult { return NewResultSlab(1).Put(0, r) }

// FromProtoResult converts an owner's answer. A per-check error keeps its
// code and, for invalid input, its field (FromProtoError).
func FromProtoResult(r *pb.CheckResult) peer.Result {
	if e := r.GetError(); e != nil {
		return peer.Result{Err: FromProtoError(e)}
	}
	resp := r.GetResponse()
	w := wireResponse{allowed: resp.GetAllowed(), limit: resp.GetLimit(), remaining: resp.GetRemaining(),
		current: resp.GetCurrentCount(), retryMS: resp.GetRetryAfterMs(), resetMS: resp.GetResetAfterMs(),
		refillMS: resp.GetRefillAfterMs(), owner: resp.GetOwner(), degraded: resp.GetDegraded(),
		reservation: resp.GetReservation(), expiresMS: resp.GetExpiresInMs(), refunded: resp.GetRefunded(),
		over: resp.GetOver(), settled: int32(resp.GetSettled())}
	return w.result()
}

// ErrorResult is the wire result of a check refused with err.
func ErrorResult(err error) *pb.CheckResult {
	return &pb.CheckResult{Result: &pb.CheckResult_Error{Error: ErrorProto(err)}}
}

// ErrorProto is err as a per-check wire error: its code, its field and
// its whole message.
func ErrorProto(err error) *pb.Error {
	return &pb.Error{Code: uint32(grpcapi.Code(err)), Field: peer.FieldOf(err), Message: err.Error()}
}

// FromProtoError converts a per-check error another member sent into a
// *peer.Error with its code, field and message as they came.
func FromProtoError(e *pb.Error) error {
	return wireErr{code: e.GetCode(), field: e.GetField(), message: e.GetMessage()}.err()
}

// Batch is a batch of wire checks converted for the request path: the
// valid ones as requests, the others already answered.
type Batch struct {
	Reqs    []limiter.Request
	idx     []int // result slot of each request
	results []*pb.CheckResult
}

// FromProtoBatch converts checks with conv (the public API resolves
// policies; the peer protocol takes numbers only): a check conv refuses
// is answered with its error, in its place.
func FromProtoBatch(checks []*pb.CheckRequest, conv func(*pb.CheckRequest) (limiter.Request, error)) Batch {
	b := Batch{Reqs: make([]limiter.Request, 0, len(checks)), idx: make([]int, 0, len(checks)),
		results: make([]*pb.CheckResult, len(checks))}
	for i, c := range checks {
		req, err := conv(c)
		if err != nil {
			b.results[i] = ErrorResult(err)
			continue
		}
		b.Reqs = append(b.Reqs, req)
		b.idx = append(b.idx, i)
	}
	return b
}

// Answer fills in the results of b.Reqs, one per request, and returns
// every result in the batch's order.
func (b Batch) Answer(results []peer.Result) []*pb.CheckResult {
	slab := NewResultSlab(len(results))
	for j, r := range results {
		b.results[b.idx[j]] = slab.Put(j, r)
	}
	return b.results
}

// ResultSlab holds the wire messages of one batch's answers in one array,
// so that a batch of n costs one allocation instead of 3n: answering
// batches was the node's largest allocation site (pprof,
// docs/benchmarks.md). The messages live and die together, with the
// response that points at them.
type ResultSlab []wireResult

// wireResult is one answer's messages: the result, its oneof wrapper and
// the response they point at.
type wireResult struct {
	result pb.CheckResult
	oneof  pb.CheckResult_Response
	resp   pb.CheckResponse
}

// NewResultSlab returns a slab for n answers.
func NewResultSlab(n int) ResultSlab { return make(ResultSlab, n) }

// Put converts r into the slab's i-th messages (an error, rare, gets its
// own) and returns the result.
func (s ResultSlab) Put(i int, r peer.Result) *pb.CheckResult {
	if r.Err != nil {
		return ErrorResult(r.Err)
	}
	w := &s[i]
	fillResponse(&w.resp, r)
	w.oneof.Response = &w.resp
	w.result.Result = &w.oneof
	return &w.result
}

// RequestSlab is ResultSlab's counterpart for the checks of one outgoing
// batch: each message with its optional hits, in one array.
type RequestSlab []wireRequest

type wireRequest struct {
	req   pb.CheckRequest
	hits  int64
	burst int64
}

// NewRequestSlab returns a slab for n checks.
func NewRequestSlab(n int) RequestSlab { return make(RequestSlab, n) }

// Put converts the validated r into the slab's i-th message.
func (s RequestSlab) Put(i int, r limiter.Request) *pb.CheckRequest {
	w := &s[i]
	w.hits = r.Hits
	m := &w.req
	m.Key, m.Limit, m.WindowMs, m.Algorithm, m.Hits = r.Key, r.Limit, r.Window.Milliseconds(), pb.Algorithm(r.Algorithm), &w.hits
	m.Op, m.Reservation, m.TtlMs = pb.Op(r.Op), r.Reservation, r.TTL.Milliseconds()
	if r.Calendar != 0 {
		m.Calendar, m.TimeZone = CalendarToProto(r.Calendar)
	}
	if r.Burst != 0 {
		w.burst = r.Burst
		m.Burst = &w.burst
	}
	return m
}

// ToProtoRequests converts reqs into one slab's messages.
func ToProtoRequests(reqs []limiter.Request) []*pb.CheckRequest {
	out := make([]*pb.CheckRequest, len(reqs))
	slab := NewRequestSlab(len(reqs))
	for i, r := range reqs {
		out[i] = slab.Put(i, r)
	}
	return out
}
