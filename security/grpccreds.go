package security

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
)

// AuthInfo is what the gRPC server's TLS handshake learned about a
// connection, computed once per connection so that each call's check is
// a field read.
type AuthInfo struct {
	credentials.TLSInfo
	// ClientCert: the client presented a certificate that verified against
	// the client or the peer CA.
	ClientCert bool
	// PeerCert: that certificate is a peer certificate (TLS.IsPeer).
	PeerCert bool
}

// ServerCredentials are the gRPC server's transport credentials: TLS with
// t's material, recording AuthInfo per connection. A client that speaks
// plaintext HTTP/2 to the port has its call failed with a status saying
// the port needs TLS, instead of a bare "connection closed" or a deadline;
// onPlaintext, if set, is told.
func ServerCredentials(t *TLS, onPlaintext func(remote net.Addr)) credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: credentials.NewTLS(t.GRPCServerConfig()), t: t, onPlaintext: onPlaintext}
}

type serverCreds struct {
	credentials.TransportCredentials
	t           *TLS
	onPlaintext func(net.Addr)
}

// ErrPlaintext fails the handshake of a plaintext client on a TLS port.
var ErrPlaintext = errors.New("plaintext HTTP/2 client on a TLS port")

// http2Preface is what every HTTP/2 client sends first.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// tlsHandshakeRecord is the first byte of every TLS connection.
const tlsHandshakeRecord = 0x16

func (c *serverCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// grpc-go has set raw's deadline (the connection timeout), so these
	// reads cannot hang.
	var first [1]byte
	if _, err := io.ReadFull(raw, first[:]); err != nil {
		return nil, nil, err
	}
	if first[0] != tlsHandshakeRecord {
		rest := make([]byte, len(http2Preface)-1)
		if _, err := io.ReadFull(raw, rest); err == nil && first[0] == http2Preface[0] && string(rest) == http2Preface[1:] {
			rejectPlaintext(raw)
			if c.onPlaintext != nil {
				c.onPlaintext(raw.RemoteAddr())
			}
			return nil, nil, ErrPlaintext
		}
		return nil, nil, errors.New("not a TLS handshake")
	}
	conn, ai, err := c.TransportCredentials.ServerHandshake(&prefixConn{Conn: raw, prefix: first[:]})
	if err != nil {
		return nil, nil, err
	}
	info, ok := ai.(credentials.TLSInfo)
	if !ok {
		return conn, ai, nil
	}
	return conn, AuthInfo{TLSInfo: info, ClientCert: len(info.State.VerifiedChains) > 0, PeerCert: c.t.IsPeer(info.State)}, nil
}

func (c *serverCreds) Clone() credentials.TransportCredentials {
	return &serverCreds{TransportCredentials: c.TransportCredentials.Clone(), t: c.t, onPlaintext: c.onPlaintext}
}

// plaintextMessage is what a plaintext client's call fails with.
const plaintextMessage = "peerlimit: this port requires TLS; dial it with TLS credentials"

// rejectPlaintext plays just enough of an HTTP/2 server to fail the
// client's first call with a gRPC status that says why (UNAVAILABLE, like
// any other transport failure, so a client moves on to another node and
// finally reports this message), then sends GOAWAY. A GOAWAY alone would
// leave grpc-go reconnecting until the caller's deadline, with "waiting
// for connections to become ready" as the only explanation. raw's
// deadline bounds every read.
func rejectPlaintext(raw net.Conn) {
	fr := http2.NewFramer(raw, raw)
	if fr.WriteSettings() != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.HeadersFrame:
			var block bytes.Buffer
			enc := hpack.NewEncoder(&block)
			for _, h := range [][2]string{{":status", "200"}, {"content-type", "application/grpc"},
				{"grpc-status", strconv.Itoa(int(codes.Unavailable))}, {"grpc-message", plaintextMessage}} {
				_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
			}
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
			_ = fr.WriteGoAway(f.StreamID, http2.ErrCodeInadequateSecurity, []byte(plaintextMessage))
			return
		}
	}
}

// prefixConn replays bytes already read before the rest of the stream.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
