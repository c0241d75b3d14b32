package grpcapi

import (
	"context"

	"github.com/peerlimit/peerlimit/peer"
	"google.golang.org/grpc/metadata"
)

// RequestIDKey is the gRPC metadata key of a request id (see
// peer.WithRequestID): a client may send one, and every call between
// nodes carries one.
const RequestIDKey = "x-request-id"

// OriginKey is the gRPC metadata key in which a member calling another
// names itself on a stream (Peer.ForwardStream), whose messages come only
// after the access check.
const OriginKey = "x-peerlimit-origin"

// Incoming returns a server call's ctx carrying the request id of its
// incoming metadata, if it has a valid one; an invalid one is ignored,
// never refused.
func Incoming(ctx context.Context) context.Context {
	if id := FirstValue(ctx, RequestIDKey); id != "" {
		return peer.WithRequestID(ctx, id)
	}
	return ctx
}

// Outgoing returns ctx with id in the metadata of an outgoing call.
func Outgoing(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, RequestIDKey, id)
}

// FirstValue returns the first value of key in a server call's incoming
// metadata, or "".
func FirstValue(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}
