package peer

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
)

// Request ids tie together the log lines that one request causes on the
// node that received it and on the owner it was forwarded to.
//
// A client may send one (gRPC metadata x-request-id, the HTTP header
// X-Request-Id); each API puts a valid one (ValidRequestID) into the
// request's context with WithRequestID, and ignores an invalid one, never
// refusing it: tracing must not fail a check. Nothing is generated for a
// check that logs nothing.
//
// Every call from one node to another (Forward, Handoff, Reset) carries an
// id, and both nodes log it as request_id:
//   - a call made for one request (a forwarded Check sent alone, the
//     forwards of one CheckBatch, a Reset) carries that request's id, or
//     one generated for the call if the client sent none
//     (RequestIDForCall);
//   - a call that coalesces checks of several requests carries an id of
//     its own, and the receiving node logs that one: on the sending node a
//     line about one of those checks shows request_id (the client's, when
//     it sent one) and forward_id (the call's).
//
// So one id per call, never per check, and only generated when a call is
// made; grep for it across the nodes' logs.

// MaxRequestIDBytes is the longest request id accepted.
const MaxRequestIDBytes = 128

// ValidRequestID reports whether id can be logged and propagated as is:
// 1 to MaxRequestIDBytes bytes of printable ASCII without spaces (UUIDs,
// trace ids, ULIDs), so a log line cannot be forged or bloated through it.
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying id as its request's id, if valid.
func WithRequestID(ctx context.Context, id string) context.Context {
	if !ValidRequestID(id) {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFrom returns the request id ctx carries, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// NewRequestID returns a fresh id: 16 hex digits from a non-cryptographic
// generator (ids need to be distinct, not secret).
func NewRequestID() string {
	var b [8]byte
	var out [16]byte
	u := rand.Uint64()
	for i := range b {
		b[i] = byte(u >> (8 * i))
	}
	hex.Encode(out[:], b[:])
	return string(out[:]) // one allocation, once per call between nodes
}

// RequestIDForCall is the id of a call to another member made for the
// request of ctx: its id, or a new one.
func RequestIDForCall(ctx context.Context) string {
	if id := RequestIDFrom(ctx); id != "" {
		return id
	}
	return NewRequestID()
}

// LogAttrs returns the log attributes naming a request and the call to
// another member that carried it: request_id is the client's id, else the
// call's; forward_id is the call's when it differs.
func LogAttrs(ctx context.Context, callID string) []any {
	rid := RequestIDFrom(ctx)
	switch {
	case rid == "" && callID == "":
		return nil
	case rid == "":
		return []any{"request_id", callID}
	case callID == "" || callID == rid:
		return []any{"request_id", rid}
	}
	return []any{"request_id", rid, "forward_id", callID}
}
