package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/node"
)

func TestParseFlagsSecurityErrors(t *testing.T) {
	for args, want := range map[string]string{
		"-target redis -tls-ca-file ca.pem":    "apply only to -target peerlimit",
		"-target redis -api-token-file t":      "apply only to -target peerlimit",
		"-tls-ca-file ca.pem -tls-cert-file c": "-tls-cert-file and -tls-key-file go together",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		if assert.Error(t, err, args) {
			assert.Contains(t, err.Error(), want, args)
		}
	}
}

// TestPeerlimitOverTLSWithToken loads a cluster that requires TLS, a
// client certificate and a token, through the raw and the client routes.
func TestPeerlimitOverTLSWithToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	const token = "loadgen-token-0123456789"
	nodeCA, clientCA := testcerts.NewCA(t, "nodes"), testcerts.NewCA(t, "clients")
	app := clientCA.Issue(t, testcerts.Leaf{Name: "loadgen", Client: true})
	c := testcluster.New(t, 2, func(cfg *node.Config) {
		srv := nodeCA.Issue(t, testcerts.Leaf{Name: cfg.ID + "-server", IPs: testcerts.Loopback, Server: true})
		peer := nodeCA.Issue(t, testcerts.Leaf{Name: cfg.ID + "-peer", DNSNames: []string{"peerlimit-peer"}})
		s := &cfg.Security
		s.TLSCertFile, s.TLSKeyFile, s.PeerCAFile, s.PeerCertFile, s.PeerKeyFile = srv.CertFile, srv.KeyFile, nodeCA.File, peer.CertFile, peer.KeyFile
		s.ClientCAFile, s.RequireClientCert, s.APITokens = clientCA.File, true, []string{token}
	})
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	endpoints := c.Node(0).GRPCAddr() + "," + c.Node(1).GRPCAddr()
	tlsArgs := []string{"-tls-ca-file", nodeCA.File, "-tls-cert-file", app.CertFile, "-tls-key-file", app.KeyFile}

	for _, route := range []string{routeNode, routeOwner} {
		var stdout bytes.Buffer
		args := append([]string{"-endpoints", endpoints, "-route", route, "-workers", "4", "-duration", "300ms",
			"-keys", "100", "-progress=false", "-json", "-", "-api-token-file", tokenFile}, tlsArgs...)
		require.Equal(t, 0, realMain(args, &stdout, testlog.New(t)), route)
		var res Result
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &res))
		assert.Positive(t, res.Checks, route)
		assert.Zero(t, res.Errors, "%s: %v", route, res.FirstErrors)
		assert.Zero(t, res.Degraded, route)
	}

	// Without the token every call is refused, and the run says so.
	var stdout, stderr bytes.Buffer
	args := append([]string{"-endpoints", endpoints, "-route", routeNode, "-workers", "2", "-duration", "200ms",
		"-progress=false", "-json", "-"}, tlsArgs...)
	assert.Equal(t, 1, realMain(args, &stdout, &stderr))
	var res Result
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res))
	assert.Zero(t, res.Checks)
	assert.Positive(t, res.Errors)
	assert.Contains(t, stderr.String(), "code = Unauthenticated desc = peerlimit: missing bearer token")
}
