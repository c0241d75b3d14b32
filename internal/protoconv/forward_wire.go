package protoconv

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// DecodeForwardResponse decodes a peerlimit.v1.ForwardResponse's bytes
// straight into the results a forwarder hands its callers, and its seq:
// what UnmarshalVT followed by FromProtoResult on each result gives,
// without the three message objects per check (the result, its oneof
// and its response) that were most of a forwarded check's allocations on
// the forwarder (docs/benchmarks.md, "The hop between two processes").
// The owners of a batch's results, one member's id, share one string.
//
// It accepts nothing UnmarshalVT refuses (FuzzDecodeForwardResponseMatchesVT);
// it is stricter on malformed groups and varints, which no member sends.
// An error names the field it stopped at.
func DecodeForwardResponse(data []byte) (seq uint64, results []peer.Result, err error) {
	results = make([]peer.Result, 0, min(countField(data, 1), maxPresized))
	var owner string // the last result's, for the next to share
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, nil, wireError("forward response", parseError(n))
		}
		data = data[n:]
		switch num {
		case 1:
			if typ != protowire.BytesType {
				return 0, nil, wireError("results", parseError(errCodeWireType))
			}
			var b []byte
			if b, n = protowire.ConsumeBytes(data); n >= 0 {
				var r peer.Result
				if r, err = decodeCheckResult(b, &owner); err != nil {
					return 0, nil, err
				}
				results = append(results, r)
			}
		case 2:
			var v int64
			v, n = consumeInt64(typ, data)
			seq = uint64(v)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return 0, nil, wireError([]string{"forward response", "results", "seq"}[min(int(num), 2)], parseError(n))
		}
		data = data[n:]
	}
	return seq, results, nil
}

// wireResponse is a CheckResponse's fields as the wire has them, read by
// FromProtoResult from a message or by DecodeForwardResponse from bytes.
type wireResponse struct {
	allowed, degraded                     bool
	limit, remaining, current             int64
	retryMS, resetMS, refillMS, expiresMS int64
	refunded, over                        int64
	settled                               int32
	owner, reservation                    string
}

// wireErr is an Error's fields as the wire has them.
type wireErr struct {
	code           uint32
	field, message string
}

// decodeCheckResult decodes one CheckResult as FromProtoResult converts
// it. The oneof follows protobuf's rules, as the generated code does: the
// last of response and error wins, and a second copy of the same one
// merges into the first.
func decodeCheckResult(b []byte, owner *string) (peer.Result, error) {
	var (
		resp wireResponse
		e    wireErr
		kind protowire.Number // 0 none, 1 response, 2 error
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return peer.Result{}, wireError("result", parseError(n))
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return peer.Result{}, wireError([]string{"", "response", "error"}[num], parseError(m))
			}
			if kind != num {
				resp, e = wireResponse{}, wireErr{}
			}
			kind = num
			var err error
			if num == 1 {
				err = decodeResponse(v, &resp, owner)
			} else {
				err = decodeError(v, &e)
			}
			if err != nil {
				return peer.Result{}, err
			}
			n = m
		} else if num == 1 || num == 2 {
			return peer.Result{}, wireError([]string{"", "response", "error"}[num], parseError(errCodeWireType))
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return peer.Result{}, wireError("result", parseError(n))
			}
		}
		b = b[n:]
	}
	if kind == 2 {
		return peer.Result{Err: e.err()}, nil
	}
	return resp.result(), nil
}

// err is a per-check error another member sent, as a *peer.Error with
// its code, field and message as they came.
func (e wireErr) err() error {
	return &peer.Error{Code: peer.Code(e.code), Field: e.field, Message: e.message}
}

// result converts a response: FromProtoResult's rules, for it and for
// DecodeForwardResponse.
func (w *wireResponse) result() peer.Result {
	res := peer.Result{
		Decision: limiter.Decision{Allowed: w.allowed, Limit: w.limit, Remaining: w.remaining, CurrentCount: w.current,
			RetryAfter: time.Duration(w.retryMS) * time.Millisecond, ResetAfter: time.Duration(w.resetMS) * time.Millisecond,
			RefillAfter: time.Duration(w.refillMS) * time.Millisecond},
		Owner: w.owner, Degraded: w.degraded,
	}
	if w.reservation != "" || w.refunded != 0 || w.over != 0 || w.settled != 0 {
		res.Decision.Adjust = &limiter.Adjustment{Reservation: w.reservation, ExpiresIn: limiter.WindowFromMS(w.expiresMS),
			Refunded: w.refunded, Over: w.over, Settled: limiter.SettleOutcome(min(max(w.settled, 0), 255))}
	}
	return res
}

// responseFields names CheckResponse's fields by number, for errors.
var responseFields = []string{"response", "allowed", "limit", "remaining", "current_count", "retry_after_ms",
	"reset_after_ms", "owner", "degraded", "refill_after_ms", "reservation", "expires_in_ms", "refunded", "over",
	"settled", "response"}

// decodeResponse merges a CheckResponse's fields into w. owner is the
// batch's last owner: an equal one is shared, not copied again.
func decodeResponse(b []byte, w *wireResponse, owner *string) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return wireError("response", parseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			n = consumeBool(typ, b, &w.allowed)
		case 2:
			w.limit, n = consumeInt64(typ, b)
		case 3:
			w.remaining, n = consumeInt64(typ, b)
		case 4:
			w.current, n = consumeInt64(typ, b)
		case 5:
			w.retryMS, n = consumeInt64(typ, b)
		case 6:
			w.resetMS, n = consumeInt64(typ, b)
		case 7:
			n = consumeOwner(typ, b, owner)
			w.owner = *owner
		case 8:
			n = consumeBool(typ, b, &w.degraded)
		case 9:
			w.refillMS, n = consumeInt64(typ, b)
		case 10:
			w.reservation, n = consumeString(typ, b)
		case 11:
			w.expiresMS, n = consumeInt64(typ, b)
		case 12:
			w.refunded, n = consumeInt64(typ, b)
		case 13:
			w.over, n = consumeInt64(typ, b)
		case 14:
			w.settled, n = consumeInt32(typ, b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return wireError(responseFields[min(int(num), len(responseFields)-1)], parseError(n))
		}
		b = b[n:]
	}
	return nil
}

// consumeBool decodes a bool field's varint into *v.
func consumeBool(typ protowire.Type, b []byte, v *bool) int {
	x, n := consumeInt64(typ, b)
	if n >= 0 {
		*v = x != 0
	}
	return n
}

// consumeOwner decodes an owner string into *owner, copying it only when
// it differs from the one there.
func consumeOwner(typ protowire.Type, b []byte, owner *string) int {
	if typ != protowire.BytesType {
		return errCodeWireType
	}
	v, n := protowire.ConsumeBytes(b)
	if n >= 0 && string(v) != *owner { // the comparison does not allocate
		*owner = string(v)
	}
	return n
}

// decodeError merges an Error's fields into e.
func decodeError(b []byte, e *wireErr) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return wireError("error", parseError(n))
		}
		b = b[n:]
		switch num {
		case 1:
			var v int64
			v, n = consumeInt64(typ, b)
			e.code = uint32(v)
		case 2:
			e.field, n = consumeString(typ, b)
		case 3:
			e.message, n = consumeString(typ, b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return wireError([]string{"error", "code", "field", "message", "error"}[min(int(num), 4)], parseError(n))
		}
		b = b[n:]
	}
	return nil
}
