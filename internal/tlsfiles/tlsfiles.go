// Package tlsfiles reads a TLS client's configuration from PEM files: the
// Go client's (client.LoadTLS) and the xDS subscription's share it.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Client builds a client's TLS configuration. caFile verifies the
// servers' certificates (empty: the system's roots); certFile and keyFile,
// both or neither, are the client certificate for mutual TLS; serverName,
// if not empty, is the name verified instead of the address dialed. The
// errors name the file; callers add whose files they are.
func Client(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
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
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}
