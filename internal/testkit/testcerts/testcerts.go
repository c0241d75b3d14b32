// Package testcerts makes throwaway X.509 material for tests: a CA, and
// leaf certificates it signs, written as PEM files in t.TempDir(). Keys are
// ECDSA P-256 (fast to generate); certificates are valid from an hour ago
// for a day, so clock jitter cannot fail a handshake.
package testcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate as a PEM file, for --*-ca-file settings.
	File string
	dir  string
}

var serial atomic.Int64

// NewCA makes a self-signed CA named name and writes its certificate to
// a temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testcerts: CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: CA %s: %v", name, err)
	}
	ca := &CA{Cert: cert, key: key, dir: t.TempDir()}
	ca.File = writePEM(t, filepath.Join(ca.dir, name+"-ca.pem"), "CERTIFICATE", der)
	return ca
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// Name is the subject's common name and the files' base name; unique
	// per CA.
	Name string
	// DNSNames and IPs are the subject alternative names.
	DNSNames []string
	IPs      []net.IP
	// Server and Client set the extended key usages (TLS server and TLS
	// client authentication). Neither means both.
	Server, Client bool
	// Expired makes a certificate whose validity ended an hour ago.
	Expired bool
	// CommonName, if set, is the subject's common name instead of Name.
	CommonName string
	// AnyUsage leaves out the extended key usages (Server and Client are
	// then ignored): Go takes such a certificate as good for any use, and
	// Envoy Gateway's certgen issues its certificates so.
	AnyUsage bool
	// RSA makes an RSA 2048 key written as PKCS#1 ("RSA PRIVATE KEY"), as
	// Envoy Gateway's certgen writes them, instead of ECDSA P-256 in
	// PKCS#8.
	RSA bool
}

// Pair is an issued certificate and its key as PEM files.
type Pair struct {
	CertFile, KeyFile string
	Cert              *x509.Certificate
}

// Issue signs a certificate for l and writes it and its key next to the
// CA's file.
func (ca *CA) Issue(t testing.TB, l Leaf) Pair {
	t.Helper()
	key, keyBlock := l.newKey(t)
	cn := l.Name
	if l.CommonName != "" {
		cn = l.CommonName
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
	}
	if l.Expired {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	}
	if !l.AnyUsage && (l.Server || !l.Client) {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if !l.AnyUsage && (l.Client || !l.Server) {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		t.Fatalf("testcerts: issue %s: %v", l.Name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: issue %s: %v", l.Name, err)
	}
	base := filepath.Join(ca.dir, l.Name)
	return Pair{
		CertFile: writePEM(t, base+".pem", "CERTIFICATE", der),
		KeyFile:  writePEM(t, base+"-key.pem", keyBlock.Type, keyBlock.Bytes),
		Cert:     cert,
	}
}

// newKey makes l's key and its PEM block.
func (l Leaf) newKey(t testing.TB) (crypto.Signer, *pem.Block) {
	t.Helper()
	if l.RSA {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatalf("testcerts: key of %s: %v", l.Name, err)
		}
		return key, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}
	}
	key := newKey(t)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcerts: key of %s: %v", l.Name, err)
	}
	return key, &pem.Block{Type: "PRIVATE KEY", Bytes: der}
}

// Loopback is the IP SAN of a certificate for a server on 127.0.0.1.
var Loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcerts: key: %v", err)
	}
	return key
}

func writePEM(t testing.TB, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testcerts: %v", err)
	}
	return path
}
