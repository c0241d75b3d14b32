// Package grpcapi is what the gRPC faces of a node share: the RateLimiter
// and Peer services (package rpc) and Envoy's rate limit service
// (envoyrls). It turns errors of the request path into gRPC statuses and
// carries request ids in gRPC metadata.
package grpcapi

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// MaxMessage caps the message of an error answered to a caller, in bytes,
// "…" included.
const MaxMessage = 1024

// Code is err's gRPC code: peer.CodeOf's, whose values are gRPC's. An
// error the request path does not know that is a gRPC status keeps its
// code.
func Code(err error) codes.Code {
	c := peer.CodeOf(err)
	if c == peer.Internal {
		if st, ok := status.FromError(err); ok {
			return st.Code()
		}
	}
	return codes.Code(c)
}

// Status converts an error to a gRPC status. Invalid input carries a
// BadRequest detail naming the field, for clients that read details.
// The message is capped at MaxMessage bytes: each value it repeats of the
// caller's is capped already (limiter.Echo); this bounds the rest.
func Status(err error) *status.Status {
	msg := logging.ClipWithin(err.Error(), MaxMessage)
	st := status.New(Code(err), msg)
	if f := peer.FieldOf(err); f != "" {
		if d, derr := st.WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: limiter.Echo(f), Description: msg}},
		}); derr == nil {
			return d
		}
	}
	return st
}

// Field returns the field a status's BadRequest detail names, or "".
func Field(st *status.Status) string {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}
