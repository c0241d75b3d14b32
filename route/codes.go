package route

import (
	"context"
	"errors"
	"strconv"

	"github.com/peerlimit/peerlimit/limiter"
)

// Code classifies the outcome of a request. The values are google.rpc.Code's,
// which gRPC's codes share, so every face of the request path maps them
// without a table: package rpc as they are, httpapi to HTTP statuses,
// envoyrls to the RLS call's status.
type Code uint32

// The codes the request path produces, and the others google.rpc.Code
// defines, so that a code another member sends keeps its meaning.
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

// ErrBatchTooLarge is returned, wrapped, for a batch over Config.MaxBatch.
var ErrBatchTooLarge = errors.New("batch too large")

// ErrTooManyForwards is returned, wrapped, for a check refused because
// Config.MaxInflightForwards checks already wait for their owners.
var ErrTooManyForwards = errors.New("too many forwarded checks in flight")

// ErrOwnerUnreachable is returned, wrapped, by Reset when the key's owner
// could not be asked: UNAVAILABLE, never a success that cleared nothing.
var ErrOwnerUnreachable = errors.New("owner unreachable")

// Error is an error whose code was decided by another member: its answer
// to a forwarded check, or its refusal of a call. Peers implementations
// return it for what the member said, so that the code survives the hop.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Message }

// CodeOf maps an error of the request path to its code.
func CodeOf(err error) Code {
	var (
		ae *limiter.ArgumentError
		re *Error
	)
	switch {
	case err == nil:
		return OK
	case errors.As(err, &ae):
		return InvalidArgument
	case errors.Is(err, ErrOwnerUnreachable):
		return Unavailable
	case errors.Is(err, limiter.ErrCapacity), errors.Is(err, ErrBatchTooLarge), errors.Is(err, ErrTooManyForwards):
		return ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.As(err, &re):
		return re.Code
	}
	return Internal
}

// Field returns the request field an error is about, or "".
func Field(err error) string {
	var ae *limiter.ArgumentError
	if errors.As(err, &ae) {
		return ae.Field
	}
	return ""
}
