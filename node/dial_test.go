package node

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDialFromBindsThePeerConnectionsSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	require.Nil(t, dialFrom(&net.TCPAddr{IP: net.IPv4zero, Port: 9090}), "a wildcard bind leaves the source to the kernel")
	d := dialFrom(&net.TCPAddr{IP: net.ParseIP("127.0.0.24"), Port: 9090})
	require.NotNil(t, d)
	conn, err := d(context.Background(), ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	in, err := ln.Accept()
	require.NoError(t, err)
	defer in.Close()
	require.Equal(t, "127.0.0.24", in.RemoteAddr().(*net.TCPAddr).IP.String())
}
