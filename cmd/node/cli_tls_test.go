package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
)

// The client commands reach a node with everything on: TLS, client
// certificates required, an API token.
func TestCLIWithTLSAndToken(t *testing.T) {
	const token = "cli-token-0123456789abcdef"
	nodeCA, clientCA := testcerts.NewCA(t, "nodes"), testcerts.NewCA(t, "clients")
	app := clientCA.Issue(t, testcerts.Leaf{Name: "operator", Client: true})
	c := testcluster.New(t, 1, func(cfg *node.Config) {
		srv := nodeCA.Issue(t, testcerts.Leaf{Name: cfg.ID + "-server", DNSNames: []string{"node.test"}, IPs: testcerts.Loopback, Server: true})
		peer := nodeCA.Issue(t, testcerts.Leaf{Name: cfg.ID + "-peer", DNSNames: []string{"peerlimit-peer"}})
		s := &cfg.Security
		s.TLSCertFile, s.TLSKeyFile = srv.CertFile, srv.KeyFile
		s.PeerCAFile, s.PeerCertFile, s.PeerKeyFile = nodeCA.File, peer.CertFile, peer.KeyFile
		s.ClientCAFile, s.RequireClientCert = clientCA.File, true
		s.ClusterSecrets = [][]byte{[]byte("cluster-secret-0123456789abcdef")}
		s.APITokens = []string{token}
	})
	n := c.Node(0)
	addr := n.GRPCAddr()
	tokenFile := writeFile(t, t.TempDir(), "token", "# the operator's token\n"+token+"\n")
	full := []string{"--addr", addr, "--tls-ca-file", nodeCA.File, "--tls-cert-file", app.CertFile, "--tls-key-file", app.KeyFile}
	check := func(extra ...string) []string {
		return append(append([]string{"check", "--limit", "5", "--window", "1m", "user:1"}, full...), extra...)
	}

	code, out, errOut := cli(t, check("--token-file", tokenFile)...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "allowed: 4 of 5 remaining")

	// The environment's token, and the other commands.
	env := map[string]string{"PEERLIMIT_API_TOKEN": token}
	code, out, errOut = cliEnv(t, env, check()...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "allowed: 3 of 5 remaining")
	code, out, errOut = cliEnv(t, env, append([]string{"members"}, full...)...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, n.ID())
	code, out, errOut = cliEnv(t, env, append([]string{"ring", "user:1"}, full...)...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, n.ID())
	code, out, errOut = cliEnv(t, env, append([]string{"reset", "--window", "1m", "user:1"}, full...)...)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "cleared 1 state(s)")
	// A name in the certificate instead of the address dialed.
	code, _, errOut = cliEnv(t, env, append(check(), "--tls-server-name", "node.test")...)
	require.Equal(t, exitOK, code, errOut)

	// What is missing is said.
	code, _, errOut = cli(t, check()...)
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut, "Unauthenticated")
	assert.Contains(t, errOut, "token")
	code, _, errOut = cliEnv(t, env, "check", "--addr", addr, "--tls-ca-file", nodeCA.File, "--limit", "5", "--window", "1m", "user:1")
	assert.Equal(t, exitError, code, "no client certificate")
	assert.Contains(t, errOut, "Unauthenticated")
	code, _, errOut = cliEnv(t, env, "check", "--addr", addr, "--limit", "5", "--window", "1m", "user:1")
	assert.Equal(t, exitUsage, code, "a token is not sent in clear")
	assert.Contains(t, errOut, "refusing to send the API token over plaintext")
	code, _, errOut = cli(t, "check", "--addr", addr, "--limit", "5", "--window", "1m", "user:1")
	assert.Equal(t, exitError, code, "plaintext to a TLS node")
	assert.NotEmpty(t, errOut)
	code, _, errOut = cliEnv(t, env, append(check(), "--tls-server-name", "other.test")...)
	assert.Equal(t, exitError, code, "a certificate for another name")
	assert.Contains(t, errOut, "other.test")
	code, _, errOut = cli(t, check("--token-file", "/nonexistent/token")...)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--token-file")
	code, _, errOut = cliEnv(t, env, "check", "--addr", addr, "--tls-cert-file", app.CertFile, "--limit", "5", "--window", "1m", "user:1")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "go together")

	// healthcheck over TLS: /healthz needs no credentials.
	code, out, errOut = cli(t, "healthcheck", "--addr", n.HTTPAddr(), "--tls-ca-file", nodeCA.File)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "SERVING\n", out)
	code, _, _ = cli(t, "healthcheck", "--addr", n.HTTPAddr())
	assert.Equal(t, exitError, code, "plaintext to a TLS port")
}
