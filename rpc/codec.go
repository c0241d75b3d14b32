package rpc

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/internal/wire"
)

// StrictCodec is the server's protobuf codec, wire.Codec with one
// difference: gRPC answers a request it cannot decode with INTERNAL, which
// blames the server; this answers INVALID_ARGUMENT, which is what it is.
//
// Unmarshal cannot return a status of its own (grpc-go rewraps it), so a
// failed decode leaves the message empty, records the error against the
// message, and the interceptors, which see the same message next, answer
// with it. Install with ServerOptions.
type StrictCodec struct {
	base   encoding.CodecV2
	failed sync.Map // proto.Message → error, for one call's lifetime
}

// NewStrictCodec returns a codec over wire.Codec.
func NewStrictCodec() *StrictCodec {
	return &StrictCodec{base: wire.Codec}
}

// ServerOptions installs the codec and its interceptors. Further unary
// interceptors run after the check.
func (c *StrictCodec) ServerOptions(unary ...grpc.UnaryServerInterceptor) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(c),
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{c.unary}, unary...)...),
		grpc.ChainStreamInterceptor(c.stream),
	}
}

// Name implements encoding.CodecV2.
func (c *StrictCodec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (c *StrictCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal implements encoding.CodecV2.
func (c *StrictCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if m, ok := v.(proto.Message); ok && err != nil {
		proto.Reset(m)
		c.failed.Store(m, err)
		return nil
	}
	return err
}

func (c *StrictCodec) check(m any) error {
	if err, ok := c.failed.LoadAndDelete(m); ok {
		return status.Errorf(codes.InvalidArgument, "malformed request: %v", err)
	}
	return nil
}

func (c *StrictCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := c.check(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (c *StrictCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &strictStream{ServerStream: ss, c: c})
}

type strictStream struct {
	grpc.ServerStream
	c *StrictCodec
}

func (s *strictStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.c.check(m)
}
