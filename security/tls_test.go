package security

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
)

const peerName = "peerlimit-peer"

// pki is a cluster's CAs and certificates.
type pki struct {
	peerCA, clientCA *testcerts.CA
	server           testcerts.Pair // for clients: IP SAN
	peer             testcerts.Pair // for peers: the peer name
	client           testcerts.Pair // an application, from the client CA
}

func newPKI(t *testing.T) *pki {
	p := &pki{peerCA: testcerts.NewCA(t, "peers"), clientCA: testcerts.NewCA(t, "clients")}
	p.server = p.peerCA.Issue(t, testcerts.Leaf{Name: "server", IPs: testcerts.Loopback, Server: true})
	p.peer = p.peerCA.Issue(t, testcerts.Leaf{Name: "peer", DNSNames: []string{peerName}})
	p.client = p.clientCA.Issue(t, testcerts.Leaf{Name: "app", Client: true})
	return p
}

func (p *pki) files() TLSFiles {
	return TLSFiles{CertFile: p.server.CertFile, KeyFile: p.server.KeyFile, ClientCAFile: p.clientCA.File,
		PeerCAFile: p.peerCA.File, PeerCertFile: p.peer.CertFile, PeerKeyFile: p.peer.KeyFile, PeerServerName: peerName}
}

// tlsServer serves gRPC health with ServerCredentials and records the
// AuthInfo of the last call.
type tlsServer struct {
	addr      string
	mu        sync.Mutex
	last      AuthInfo
	plaintext int
}

func startTLSServer(t *testing.T, tl *TLS) *tlsServer {
	s := &tlsServer{}
	srv := grpc.NewServer(grpc.Creds(ServerCredentials(tl, func(net.Addr) { s.mu.Lock(); s.plaintext++; s.mu.Unlock() })),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			s.mu.Lock()
			s.last, _ = p.AuthInfo.(AuthInfo)
			s.mu.Unlock()
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	s.addr = ln.Addr().String()
	return s
}

func (s *tlsServer) lastInfo() AuthInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func call(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func clientTLS(t *testing.T, ca *testcerts.CA, cert *testcerts.Pair) *tls.Config {
	t.Helper()
	pool, err := readPool(ca.File)
	require.NoError(t, err)
	c := &tls.Config{RootCAs: pool}
	if cert != nil {
		kp, err := tls.LoadX509KeyPair(cert.CertFile, cert.KeyFile)
		require.NoError(t, err)
		c.Certificates = []tls.Certificate{kp}
	}
	return c
}

func TestTLSTellsPeersFromClients(t *testing.T) {
	p := newPKI(t)
	tl, err := LoadTLS(p.files())
	require.NoError(t, err)
	srv := startTLSServer(t, tl)

	// A peer: this node's own dial configuration.
	require.NoError(t, call(t, srv.addr, credentials.NewTLS(tl.PeerDialConfig())))
	assert.True(t, srv.lastInfo().PeerCert)
	assert.True(t, srv.lastInfo().ClientCert)

	// An application with a client certificate: verified, not a peer.
	require.NoError(t, call(t, srv.addr, credentials.NewTLS(clientTLS(t, p.peerCA, &p.client))))
	assert.True(t, srv.lastInfo().ClientCert)
	assert.False(t, srv.lastInfo().PeerCert)

	// A certificate from the peer CA without the peer name (one CA for
	// everything) is not a peer certificate either.
	app := p.peerCA.Issue(t, testcerts.Leaf{Name: "app-from-peer-ca", Client: true})
	require.NoError(t, call(t, srv.addr, credentials.NewTLS(clientTLS(t, p.peerCA, &app))))
	assert.True(t, srv.lastInfo().ClientCert)
	assert.False(t, srv.lastInfo().PeerCert)

	// No client certificate: fine at the TLS layer; the rules decide.
	require.NoError(t, call(t, srv.addr, credentials.NewTLS(clientTLS(t, p.peerCA, nil))))
	assert.False(t, srv.lastInfo().ClientCert)

	// A certificate from a CA the node does not know fails the handshake.
	stranger := testcerts.NewCA(t, "stranger")
	bad := stranger.Issue(t, testcerts.Leaf{Name: "x", DNSNames: []string{peerName}})
	forged := clientTLS(t, p.peerCA, &bad)
	// Go's client sends only a certificate the server's CA list accepts;
	// an attacker sends it anyway.
	forged.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &forged.Certificates[0], nil }
	err = call(t, srv.addr, credentials.NewTLS(forged))
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
}

func TestPeerDialRefusesAServerOutsideTheCluster(t *testing.T) {
	ours, theirs := newPKI(t), newPKI(t)
	tlOurs, err := LoadTLS(ours.files())
	require.NoError(t, err)
	tlTheirs, err := LoadTLS(theirs.files())
	require.NoError(t, err)
	srv := startTLSServer(t, tlTheirs)
	err = call(t, srv.addr, credentials.NewTLS(tlOurs.PeerDialConfig()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a peer certificate of this cluster")
}

func TestPlaintextClientOnTLSPortIsToldWhy(t *testing.T) {
	p := newPKI(t)
	tl, err := LoadTLS(p.files())
	require.NoError(t, err)
	srv := startTLSServer(t, tl)
	err = call(t, srv.addr, insecure.NewCredentials())
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Contains(t, err.Error(), "this port requires TLS")
	t.Log(err)
	// The refusal is written to the client before it is counted: the
	// client may read it first.
	wait.For(t, 5*time.Second, func() (bool, string) {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.plaintext > 0, "the plaintext call is not counted"
	})
}

func TestTLSReloadServesNewCertificates(t *testing.T) {
	p := newPKI(t)
	tl, err := LoadTLS(p.files())
	require.NoError(t, err)
	srv := startTLSServer(t, tl)

	serial := func() string {
		t.Helper()
		var got string
		cfg := clientTLS(t, p.peerCA, nil)
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			got = cs.PeerCertificates[0].SerialNumber.String()
			return nil
		}
		require.NoError(t, call(t, srv.addr, credentials.NewTLS(cfg)))
		return got
	}
	before := serial()
	assert.Equal(t, p.server.Cert.SerialNumber.String(), before)

	renewed := p.peerCA.Issue(t, testcerts.Leaf{Name: "server-renewed", IPs: testcerts.Loopback, Server: true})
	copyFile(t, renewed.CertFile, p.server.CertFile)
	copyFile(t, renewed.KeyFile, p.server.KeyFile)
	require.NoError(t, tl.Reload())
	assert.Equal(t, renewed.Cert.SerialNumber.String(), serial())

	// A broken file keeps what is in use.
	require.NoError(t, os.WriteFile(p.server.KeyFile, []byte("garbage"), 0o600))
	require.Error(t, tl.Reload())
	assert.Equal(t, renewed.Cert.SerialNumber.String(), serial())
}

func TestLoadTLSErrors(t *testing.T) {
	p := newPKI(t)
	noName := p.peerCA.Issue(t, testcerts.Leaf{Name: "noname"})
	serverOnly := p.peerCA.Issue(t, testcerts.Leaf{Name: "serveronly", DNSNames: []string{peerName}, Server: true})
	notPEM := p.server.KeyFile // a key is not a CA certificate
	for _, c := range []struct {
		edit func(*TLSFiles)
		want string
	}{
		{func(f *TLSFiles) { f.CertFile = "" }, "server certificate and key are required"},
		{func(f *TLSFiles) { f.PeerCAFile = "" }, "peer CA is required"},
		{func(f *TLSFiles) { f.PeerServerName = "" }, "peer server name is required"},
		{func(f *TLSFiles) { f.PeerKeyFile = "" }, "go together"},
		{func(f *TLSFiles) { f.KeyFile = p.peer.KeyFile }, "server certificate"},
		{func(f *TLSFiles) { f.PeerCertFile, f.PeerKeyFile = noName.CertFile, noName.KeyFile }, "does not carry the peer server name"},
		{func(f *TLSFiles) { f.PeerCertFile, f.PeerKeyFile = serverOnly.CertFile, serverOnly.KeyFile }, "both the TLS server and TLS client"},
		{func(f *TLSFiles) { f.ClientCAFile = notPEM }, "holds no PEM certificate"},
		{func(f *TLSFiles) { f.PeerCAFile = "/nonexistent" }, "PeerCAFile: stat /nonexistent"},
	} {
		f := p.files()
		c.edit(&f)
		_, err := LoadTLS(f)
		assert.ErrorContains(t, err, c.want)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}
