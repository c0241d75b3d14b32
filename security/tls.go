package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// TLSFiles names a node's TLS material, PEM files all.
type TLSFiles struct {
	// CertFile and KeyFile are the server certificate of the public APIs
	// (gRPC and HTTP). Required.
	CertFile, KeyFile string
	// ClientCAFile verifies client certificates of the public APIs. A
	// client certificate is then verified if presented; whether one is
	// required is the ClientAuth rule's business. Optional.
	ClientCAFile string
	// PeerCAFile signs peer certificates: it verifies the peers this node
	// dials, and the certificates of peers calling it. Required.
	PeerCAFile string
	// PeerCertFile and PeerKeyFile are what this node presents to its
	// peers, as a client and (to calls that ask for PeerServerName) as a
	// server. Default CertFile and KeyFile.
	PeerCertFile, PeerKeyFile string
	// PeerServerName is the DNS name every peer certificate carries (a
	// role, not a host: peers dial each other by IP). Required.
	PeerServerName string
}

// TLS holds a node's certificates and CAs and the TLS configurations made
// from them. Reload re-reads the files; handshakes that start afterwards
// use the new material, established connections keep theirs. Safe for
// concurrent use.
type TLS struct {
	files TLSFiles
	state atomic.Pointer[tlsState]
}

type tlsState struct {
	server, peer *tls.Certificate
	peerCAs      *x509.CertPool
	grpc, http   *tls.Config // what a handshake of each server uses
}

// LoadTLS reads the files.
func LoadTLS(files TLSFiles) (*TLS, error) {
	if files.PeerCertFile == "" && files.PeerKeyFile == "" {
		files.PeerCertFile, files.PeerKeyFile = files.CertFile, files.KeyFile
	}
	switch {
	case files.CertFile == "" || files.KeyFile == "":
		return nil, errors.New("tls: a server certificate and key are required")
	case files.PeerCAFile == "":
		return nil, errors.New("tls: a peer CA is required")
	case files.PeerServerName == "":
		return nil, errors.New("tls: a peer server name is required")
	case files.PeerCertFile == "" || files.PeerKeyFile == "":
		return nil, errors.New("tls: the peer certificate and key go together")
	}
	t := &TLS{files: files}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload re-reads every file. On error the material in use stays. An
// error about reading a file names its field of Config (field.Wrap:
// "TLSCertFile"), and a file that is not a regular file is refused
// (internal/regularfile): a named pipe would hold the start or the
// reload up.
func (t *TLS) Reload() error {
	f := t.files
	server, err := loadKeyPair("server", "TLSCertFile", f.CertFile, "TLSKeyFile", f.KeyFile)
	if err != nil {
		return err
	}
	peerCertField, peerKeyField := "PeerCertFile", "PeerKeyFile"
	if f.PeerCertFile == f.CertFile && f.PeerKeyFile == f.KeyFile { // the default, or set so
		peerCertField, peerKeyField = "TLSCertFile", "TLSKeyFile"
	}
	peer, err := loadKeyPair("peer", peerCertField, f.PeerCertFile, peerKeyField, f.PeerKeyFile)
	if err != nil {
		return err
	}
	if err := checkPeerCert(peer, f.PeerServerName); err != nil {
		return fmt.Errorf("tls: peer certificate %s: %w", f.PeerCertFile, err)
	}
	// Each CA file is read once: the pools made from it then hold the same
	// certificates even if the file is rewritten during the reload.
	peerCA, err := readCA("PeerCAFile", f.PeerCAFile)
	if err != nil {
		return err
	}
	peerCAs, err := newPool(peerCA)
	if err != nil {
		return err
	}
	var clientCA caFile // none without ClientCAFile
	if f.ClientCAFile != "" {
		if clientCA, err = readCA("ClientCAFile", f.ClientCAFile); err != nil {
			return err
		}
	}
	// The gRPC port serves clients and peers: its client CAs are both
	// sets, so a peer's handshake succeeds; which one a certificate chains
	// to is decided per connection (IsPeer).
	both, err := newPool(peerCA, clientCA)
	if err != nil {
		return err
	}
	st := &tlsState{server: &server, peer: &peer, peerCAs: peerCAs}
	st.grpc = &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  both,
		// A peer asks for the peer server name; clients get the server
		// certificate, which may come from a public CA.
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName == f.PeerServerName {
				return st.peer, nil
			}
			return st.server, nil
		},
	}
	st.http = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{server},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if f.ClientCAFile != "" {
		clientCAs, err := newPool(clientCA)
		if err != nil {
			return err
		}
		st.http.ClientAuth, st.http.ClientCAs = tls.VerifyClientCertIfGiven, clientCAs
	}
	t.state.Store(st)
	return nil
}

// checkPeerCert refuses a peer certificate that its peers would refuse:
// caught at load, not at the first handshake.
func checkPeerCert(c tls.Certificate, name string) error {
	if c.Leaf == nil {
		return errors.New("no certificate")
	}
	if err := c.Leaf.VerifyHostname(name); err != nil {
		return fmt.Errorf("does not carry the peer server name: %w", err)
	}
	var server, client bool
	for _, u := range c.Leaf.ExtKeyUsage {
		server = server || u == x509.ExtKeyUsageServerAuth || u == x509.ExtKeyUsageAny
		client = client || u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny
	}
	if len(c.Leaf.ExtKeyUsage) > 0 && (!server || !client) {
		return errors.New("needs both the TLS server and TLS client extended key usages: peers are both")
	}
	return nil
}

// caFile is one CA file's PEM as read; the zero value is no file.
type caFile struct {
	name string
	pem  []byte
}

// MaxPEMBytes bounds a TLS file: a bundle of every public root CA is
// about 250 KiB; past the bound the path is a mistake.
const MaxPEMBytes = 4 << 20

// readPEM reads one TLS file, its errors naming fieldName, its field of
// Config.
func readPEM(fieldName, path string) ([]byte, error) {
	b, err := regularfile.Read(path, MaxPEMBytes)
	return b, field.Wrap(fieldName, err)
}

// loadKeyPair is tls.LoadX509KeyPair with readPEM's reads; what
// ("server", "peer") says which pair a bad one is.
func loadKeyPair(what, certField, certFile, keyField, keyFile string) (tls.Certificate, error) {
	cert, err := readPEM(certField, certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := readPEM(keyField, keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	kp, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("tls: %s certificate %s / key %s: %w", what, certFile, keyFile, err)
	}
	return kp, nil
}

func readCA(fieldName, name string) (caFile, error) {
	b, err := readPEM(fieldName, name)
	if err != nil {
		return caFile{}, err
	}
	return caFile{name: name, pem: b}, nil
}

// newPool makes a pool of the CA files' certificates; a zero caFile adds none.
func newPool(cas ...caFile) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, ca := range cas {
		if ca.name == "" {
			continue
		}
		if !pool.AppendCertsFromPEM(ca.pem) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", ca.name)
		}
	}
	return pool, nil
}

// readPool reads one CA file into a pool (what the tests trust).
func readPool(name string) (*x509.CertPool, error) {
	ca, err := readCA("CAFile", name)
	if err != nil {
		return nil, err
	}
	return newPool(ca)
}

// GRPCServerConfig is the gRPC server's configuration: client
// certificates from the client or the peer CA are verified if presented.
func (t *TLS) GRPCServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.state.Load().grpc, nil
		},
	}
}

// HTTPServerConfig is the HTTP API's: the server certificate, and client
// certificates from the client CA verified if presented.
func (t *TLS) HTTPServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.state.Load().http, nil
		},
	}
}

// PeerDialConfig is the configuration of calls to peers: this node's
// peer certificate as the client certificate, and the peer's verified
// against the peer CA under the peer server name.
func (t *TLS) PeerDialConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: t.files.PeerServerName,
		// Verification happens in VerifyConnection, against the peer CA
		// current at the handshake, which a Reload may have replaced; the
		// standard check would pin the pool of the moment the connection
		// was created.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return t.verifyPeer(cs, x509.ExtKeyUsageServerAuth)
		},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return t.state.Load().peer, nil
		},
	}
}

// IsPeer reports whether a connection's client certificate is a peer
// certificate: chained to the peer CA, for TLS clients, naming the peer
// server name. A certificate from the client CA is not, even when both CAs
// are the same file and it verified.
func (t *TLS) IsPeer(cs tls.ConnectionState) bool {
	return len(cs.VerifiedChains) > 0 && t.verifyPeer(cs, x509.ExtKeyUsageClientAuth) == nil
}

func (t *TLS) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         t.state.Load().peerCAs,
		Intermediates: inter,
		DNSName:       t.files.PeerServerName,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return fmt.Errorf("tls: not a peer certificate of this cluster: %w", err)
	}
	return nil
}
