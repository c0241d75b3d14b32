package rpc

import (
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// ToProtoRequest converts a validated limiter request for the wire.
func ToProtoRequest(r limiter.Request) *pb.CheckRequest { return newRequestSlab(1).put(0, r) }

// FromProtoResult converts an owner's answer. A per-check error keeps its
// code and, for invalid input, its field.
func FromProtoResult(r *pb.CheckResult) route.Result {
	if e := r.GetError(); e != nil {
		return route.Result{Err: fromProtoError(e)}
	}
	resp := r.GetResponse()
	return route.Result{
		Decision: limiter.Decision{
			Allowed:      resp.GetAllowed(),
			Limit:        resp.GetLimit(),
			Remaining:    resp.GetRemaining(),
			CurrentCount: resp.GetCurrentCount(),
			RetryAfter:   time.Duration(resp.GetRetryAfterMs()) * time.Millisecond,
			ResetAfter:   time.Duration(resp.GetResetAfterMs()) * time.Millisecond,
			RefillAfter:  time.Duration(resp.GetRefillAfterMs()) * time.Millisecond,
		},
		Owner:    resp.GetOwner(),
		Degraded: resp.GetDegraded(),
	}
}

// fromProtoError converts a per-check error another member sent: invalid
// input naming a field is a *limiter.ArgumentError again, anything else a
// *route.Error with its code.
func fromProtoError(e *pb.Error) error {
	if e.GetField() != "" && codes.Code(e.GetCode()) == codes.InvalidArgument {
		return &limiter.ArgumentError{Field: e.GetField(), Reason: strings.TrimPrefix(e.GetMessage(), "invalid "+e.GetField()+": ")}
	}
	return &route.Error{Code: route.Code(e.GetCode()), Message: e.GetMessage()}
}

// ToProtoResult converts a Result for the wire.
func ToProtoResult(r route.Result) *pb.CheckResult { return newResultSlab(1).put(0, r) }

// resultSlab holds the wire messages of one batch's answers in one array,
// so that a batch of n costs one allocation instead of 3n: answering
// batches was the node's largest allocation site (pprof,
// docs/benchmarks.md). The messages live and die together, with the
// response that points at them.
type resultSlab []wireResult

// wireResult is one answer's messages: the result, its oneof wrapper and
// the response they point at.
type wireResult struct {
	result pb.CheckResult
	oneof  pb.CheckResult_Response
	resp   pb.CheckResponse
}

func newResultSlab(n int) resultSlab { return make(resultSlab, n) }

// put converts r into the slab's i-th messages (an error, rare, gets its
// own) and returns the result.
func (s resultSlab) put(i int, r route.Result) *pb.CheckResult {
	if r.Err != nil {
		return errorResult(r.Err)
	}
	w := &s[i]
	fillProto(&w.resp, r)
	w.oneof.Response = &w.resp
	w.result.Result = &w.oneof
	return &w.result
}

// requestSlab is resultSlab's counterpart for the checks of one outgoing
// batch: each message with its optional hits, in one array.
type requestSlab []wireRequest

type wireRequest struct {
	req  pb.CheckRequest
	hits int64
}

func newRequestSlab(n int) requestSlab { return make(requestSlab, n) }

// put converts the validated r into the slab's i-th message.
func (s requestSlab) put(i int, r limiter.Request) *pb.CheckRequest {
	w := &s[i]
	w.hits = r.Hits
	m := &w.req
	m.Key, m.Limit, m.WindowMs, m.Algorithm, m.Hits = r.Key, r.Limit, r.Window.Milliseconds(), pb.Algorithm(r.Algorithm), &w.hits
	return m
}

// ToProtoKeyState converts a key's state for handoff.
func ToProtoKeyState(s limiter.KeyState) *pb.KeyState {
	out := &pb.KeyState{Key: s.Key, WindowMs: s.Window.Milliseconds(), Algorithm: pb.Algorithm(s.Algorithm),
		WindowId: s.WindowID, Prev: s.Prev, Curr: s.Curr}
	if len(s.Log) > 0 {
		out.LogBaseMs = s.Log[0]
		out.LogOffsetsMs = make([]uint32, len(s.Log))
		for i, t := range s.Log {
			out.LogOffsetsMs[i] = uint32(min(t-s.Log[0], math.MaxUint32))
		}
	}
	return out
}

// FromProtoKeyState converts a received key state; the store validates it.
func FromProtoKeyState(s *pb.KeyState) limiter.KeyState {
	out := limiter.KeyState{Key: s.GetKey(), Algorithm: limiter.Algorithm(min(max(s.GetAlgorithm(), 0), 255)),
		WindowID: s.GetWindowId(), Prev: s.GetPrev(), Curr: s.GetCurr()}
	if ms := s.GetWindowMs(); ms > 0 && ms <= math.MaxInt64/int64(time.Millisecond) {
		out.Window = time.Duration(ms) * time.Millisecond
	}
	if offs := s.GetLogOffsetsMs(); len(offs) > 0 {
		out.Log = make([]int64, len(offs))
		for i, o := range offs {
			out.Log[i] = s.GetLogBaseMs() + int64(o)
		}
	}
	return out
}
