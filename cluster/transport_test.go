package cluster

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"
)

// The point of boundTransport: a TCP connection to another member leaves
// from the bound address, not from whatever the kernel picks (127.0.0.1
// for every loopback destination).
func TestBoundTransportDialsFromBoundAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	tr, port, err := newBoundTransport("127.0.0.23", 0, io.Discard)
	require.NoError(t, err)
	defer tr.Shutdown()
	require.NotZero(t, port, "port 0 picks a free port and reports it")
	require.Equal(t, port, tr.GetAutoBindPort())

	conn, err := tr.DialAddressTimeout(memberlist.Address{Addr: ln.Addr().String()}, time.Second)
	require.NoError(t, err)
	defer conn.Close()
	in, err := ln.Accept()
	require.NoError(t, err)
	defer in.Close()
	require.Equal(t, "127.0.0.23", in.RemoteAddr().(*net.TCPAddr).IP.String())

	conn2, err := tr.DialTimeout(ln.Addr().String(), time.Second)
	require.NoError(t, err)
	defer conn2.Close()
	in2, err := ln.Accept()
	require.NoError(t, err)
	defer in2.Close()
	require.Equal(t, "127.0.0.23", in2.RemoteAddr().(*net.TCPAddr).IP.String())
}

func TestBoundTransportNeedsSpecificIP(t *testing.T) {
	_, _, err := newBoundTransport("0.0.0.0", 0, io.Discard)
	require.ErrorContains(t, err, "specific IP")
}
