package rpc

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/limiter"
)

// Code maps an error of the request path to its gRPC code.
func Code(err error) codes.Code {
	var ae *limiter.ArgumentError
	switch {
	case err == nil:
		return codes.OK
	case errors.As(err, &ae):
		return codes.InvalidArgument
	case errors.Is(err, ErrOwnerUnreachable):
		return codes.Unavailable
	case errors.Is(err, limiter.ErrCapacity), errors.Is(err, ErrBatchTooLarge), errors.Is(err, ErrTooManyForwards):
		return codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Internal
}

// Field returns the request field an error is about, or "".
func Field(err error) string {
	var ae *limiter.ArgumentError
	if errors.As(err, &ae) {
		return ae.Field
	}
	return ""
}

// Status converts an error to a gRPC status. Invalid input carries a
// BadRequest detail naming the field, for clients that read details.
func Status(err error) *status.Status {
	st := status.New(Code(err), err.Error())
	if f := Field(err); f != "" {
		if d, derr := st.WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: f, Description: err.Error()}},
		}); derr == nil {
			return d
		}
	}
	return st
}
