package grpcapi

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/peerlimit/peerlimit/route"
)

// RequestIDKey is the gRPC metadata key of a request id (see
// route.WithRequestID): a client may send one, and every call between
// nodes carries one.
const RequestIDKey = "x-request-id"

// Incoming returns a server call's ctx carrying the request id of its
// incoming metadata, if it has a valid one; an invalid one is ignored,
// never refused.
func Incoming(ctx context.Context) context.Context {
	if v := metadata.ValueFromIncomingContext(ctx, RequestIDKey); len(v) > 0 {
		return route.WithRequestID(ctx, v[0])
	}
	return ctx
}

// Outgoing returns ctx with id in the metadata of an outgoing call.
func Outgoing(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, RequestIDKey, id)
}
