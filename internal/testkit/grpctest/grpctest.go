// Package grpctest runs real gRPC servers on loopback for tests.
package grpctest

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// Serve runs a gRPC server made with opts and register's services on
// loopback until the test ends (it stops the server and checks that it
// served without error), and returns its address.
func Serve(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(opts...)
	register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		assert.NoError(t, <-served)
	})
	return lis.Addr().String()
}

// DeadAddr returns a loopback address nothing listens on: calls to it are
// refused at once.
func DeadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
