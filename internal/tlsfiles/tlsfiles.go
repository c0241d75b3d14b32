// Package tlsfiles reads a TLS client's configuration from PEM files: the
// Go client's (client.LoadTLS) and the xDS subscription's share it.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// MaxPEMBytes bounds each file: a bundle of every public root CA is
// about 250 KiB; past the bound the path is a mistake.
const MaxPEMBytes = 4 << 20

// Client builds a client's TLS configuration. caFile verifies the
// servers' certificates (empty: the system's roots); certFile and keyFile,
// both or neither, are the client certificate for mutual TLS; serverName,
// if not empty, is the name verified instead of the address dialed. Each
// file must be a regular file (after symlinks) of at most MaxPEMBytes: a
// named pipe would hold the caller up. The errors name the file; callers
// add whose files they are.
func Client(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		b, err := regularfile.Read(caFile, MaxPEMBytes)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate and its key go together")
	}
	if certFile != "" {
		kp, err := keyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

// keyPair is tls.LoadX509KeyPair, the files read by regularfile.Read.
func keyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := regularfile.Read(certFile, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := regularfile.Read(keyFile, MaxPEMBytes)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key: %w", err)
	}
	return tls.X509KeyPair(cert, key)
}
