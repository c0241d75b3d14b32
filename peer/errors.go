package peer

import (
	"context"
	"errors"
	"strconv"

	"github.com/peerlimit/peerlimit/limiter"
)

// Code classifies the outcome of a request. The values are google.rpc.Code's,
// which gRPC's codes share, so every face of the request path maps them
// without a table (package rpc as they are, httpapi to HTTP statuses,
// envoyrls to the RLS call's status), and a code another member sends
// keeps its meaning.
type Code uint32

// The codes google.rpc.Code defines.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// String spells the code as google.rpc.Code does (INVALID_ARGUMENT,
// CANCELLED), which is what HTTP/JSON clients of gRPC-style APIs expect.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Error is an error another member decided: its answer to a forwarded
// check, or its refusal of a call. A transport returns it for what the
// member said, so that the code, and for invalid input the field, survive
// the hop; Message is the member's whole message.
type Error struct {
	Code    Code
	Field   string // the request field an InvalidArgument is about, or ""
	Message string
}

func (e *Error) Error() string { return e.Message }

// CallError is a failed call to another member and the request id it
// carried, so that the caller's log line names what the member's shows.
// Peers implementations return every error of a call as one: it means
// the member's answer, if any, never arrived.
type CallError struct {
	ID  string
	Err error
}

func (e *CallError) Error() string { return e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// CallID returns the request id of the call to another member that err
// comes from, or "".
func CallID(err error) string {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.ID
	}
	return ""
}

// IsCallError reports whether err is the transport's (the check never got
// an answer from the member asked) rather than the member's answer.
func IsCallError(err error) bool {
	var ce *CallError
	return err != nil && errors.As(err, &ce)
}

// ErrOwnerUnreachable is returned, wrapped, when a call that must reach a
// key's owner could not (a reset, an inspection, a relay that could not
// get a check decided): UNAVAILABLE, never a success that did nothing.
var ErrOwnerUnreachable = NewError(Unavailable, "owner unreachable")

// ErrNoReplicas refuses a replication to a node that keeps no replicas
// (its replication factor is 0).
var ErrNoReplicas = NewError(FailedPrecondition, "this node keeps no replicas (its replication factor is 0)")

// ErrLeaving refuses a handoff to a node that is leaving: it owns
// nothing, so it could only pass the states on, and when every member is
// leaving (a stop of the whole cluster) it would keep them on its disk,
// where their owner, back first, does not look.
var ErrLeaving = NewError(Unavailable, "this node is leaving: it takes no handoffs")

// NewError returns an *Error with code and message, for the sentinel
// errors of the request path (route.ErrTooManyForwards, say): their
// code then travels with them, and CodeOf needs no table of them.
func NewError(code Code, message string) *Error { return &Error{Code: code, Message: message} }

// CodeOf maps an error to its code: invalid input (a
// *limiter.ArgumentError) is INVALID_ARGUMENT, a request that conflicts
// with an earlier one (a *limiter.ConflictError) FAILED_PRECONDITION, a
// full store
// (limiter.ErrCapacity) RESOURCE_EXHAUSTED, a caller's context ending
// DEADLINE_EXCEEDED or CANCELLED, an *Error its own code, anything else
// INTERNAL.
func CodeOf(err error) Code {
	if err == nil { // the common case, and before errors.As's targets escape to the heap
		return OK
	}
	var (
		ae *limiter.ArgumentError
		ce *limiter.ConflictError
		pe *Error
	)
	switch {
	case errors.As(err, &ae):
		return InvalidArgument
	case errors.As(err, &ce):
		return FailedPrecondition
	case errors.As(err, &pe):
		return pe.Code
	case errors.Is(err, limiter.ErrCapacity):
		return ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	return Internal
}

// FieldOf returns the request field an error is about, or "": a bad
// field this node found, or one another member named.
func FieldOf(err error) string {
	if err == nil {
		return ""
	}
	var (
		ae *limiter.ArgumentError
		ce *limiter.ConflictError
		pe *Error
	)
	switch {
	case errors.As(err, &ae):
		return ae.Field
	case errors.As(err, &ce):
		return ce.Field
	case errors.As(err, &pe):
		return pe.Field
	}
	return ""
}
