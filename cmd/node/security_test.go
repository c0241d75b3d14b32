package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	tokenOld = "old-token-0123456789abcdef"
	tokenNew = "new-token-0123456789abcdef"
)

// onLoopback are the flags a test of other settings parses the defaults
// with: the default --grpc-addr is beyond loopback, where Peer calls need
// authentication or --insecure-open-peers.
var onLoopback = []string{"--grpc-addr", "127.0.0.1:9090"}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func TestSecurityFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{
		"PEERLIMIT_API_TOKEN":            tokenOld,
		"PEERLIMIT_CLUSTER_SECRET":       "cluster-secret-0123456789",
		"PEERLIMIT_TLS_CERT_FILE":        "/etc/peerlimit/node.pem",
		"PEERLIMIT_TLS_KEY_FILE":         "/etc/peerlimit/node-key.pem",
		"PEERLIMIT_PEER_TLS_CA_FILE":     "/etc/peerlimit/peers-ca.pem",
		"PEERLIMIT_TLS_CLIENT_AUTH":      "require",
		"PEERLIMIT_TLS_CLIENT_CA_FILE":   "/etc/peerlimit/clients-ca.pem",
		"PEERLIMIT_PEER_TLS_SERVER_NAME": "peers.example",
	}
	o, err := parseFlags([]string{"--auth-metrics", "--peer-grace", "1m"}, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	sc := o.node.Security
	assert.Equal(t, []string{tokenOld}, sc.APITokens)
	assert.Equal(t, [][]byte{[]byte("cluster-secret-0123456789")}, sc.ClusterSecrets)
	assert.Equal(t, "/etc/peerlimit/node.pem", sc.TLSCertFile)
	assert.Equal(t, "/etc/peerlimit/node-key.pem", sc.TLSKeyFile)
	assert.Equal(t, "/etc/peerlimit/peers-ca.pem", sc.PeerCAFile)
	assert.Equal(t, "/etc/peerlimit/clients-ca.pem", sc.ClientCAFile)
	assert.Equal(t, "peers.example", sc.PeerServerName)
	assert.True(t, sc.RequireClientCert)
	assert.True(t, sc.AuthMetrics)
	assert.Equal(t, "1m0s", sc.PeerGrace.String())

	o, err = parseFlags(onLoopback, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "peerlimit-peer", o.node.Security.PeerServerName, "default")
	assert.False(t, o.node.Security.RequireClientCert)
}

// The defaults listen beyond loopback (:9090), so with nothing set the
// node does not start, and says each way out by the flag or variable that
// sets it; docs/security.md quotes the message.
func TestPeersBeyondLoopbackNeedAuthenticationOrTheOptOut(t *testing.T) {
	var stderr bytes.Buffer
	require.Equal(t, 2, run(nil, func(string) string { return "" }, &stderr))
	msg := strings.TrimSpace(strings.TrimPrefix(stderr.String(), "peerlimit-node: "))
	for _, want := range []string{`GRPCAddr (--grpc-addr) is ":9090", beyond loopback`,
		"Security.ClusterSecretFile (--cluster-secret-file)", "Security.ClusterSecrets (PEERLIMIT_CLUSTER_SECRET)",
		"Security.PeerCAFile (--peer-tls-ca-file)", "Security.OpenPeers (--insecure-open-peers)"} {
		assert.Contains(t, msg, want)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/security.md"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(strings.Join(strings.Fields(string(doc)), " "), msg), "docs/security.md quotes the error as it is:\n%s", msg)

	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		open bool
	}{
		{name: "loopback", args: []string{"--grpc-addr", "127.0.0.2:9090"}},
		{name: "localhost", args: []string{"--grpc-addr", "localhost:9090"}},
		{name: "IPv6 loopback", args: []string{"--grpc-addr", "[::1]:9090"}},
		{name: "a cluster secret", env: map[string]string{"PEERLIMIT_CLUSTER_SECRET": "cluster-secret-0123456789"}},
		{name: "a cluster secret file", env: map[string]string{"PEERLIMIT_CLUSTER_SECRET_FILE": "/etc/peerlimit/cluster-secrets"}},
		{name: "mutual TLS", args: []string{"--tls-cert-file", "c.pem", "--tls-key-file", "k.pem", "--peer-tls-ca-file", "ca.pem"}},
		{name: "the opt-out", args: []string{"--insecure-open-peers"}, open: true},
		{name: "the opt-out's variable", env: map[string]string{"PEERLIMIT_INSECURE_OPEN_PEERS": "true"}, open: true},
	} {
		o, err := parseFlags(c.args, func(k string) string { return c.env[k] }, io.Discard)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.open, o.node.Security.OpenPeers, c.name)
	}

	_, err = parseFlags([]string{"--insecure-open-peers"}, func(k string) string {
		return map[string]string{"PEERLIMIT_CLUSTER_SECRET": "cluster-secret-0123456789"}[k]
	}, io.Discard)
	assert.ErrorContains(t, err, "Security.OpenPeers (--insecure-open-peers) and peer authentication")
}

func TestSecurityFlagErrorsAreClear(t *testing.T) {
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", tokenOld+"\n")
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--tls-client-auth", "maybe"}, want: "--tls-client-auth: want optional or require"},
		{args: []string{"--tls-cert-file", "c.pem"}, want: "(--tls-key-file) go together"},
		{args: []string{"--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"}, want: "(--peer-tls-ca-file) is required with TLS"},
		{args: []string{"--peer-tls-ca-file", "ca.pem"}, want: "(--peer-tls-ca-file) needs TLS"},
		{args: []string{"--tls-client-auth", "require"}, want: "needs Security.ClientCAFile (--tls-client-ca-file)"},
		{args: []string{"--api-token-file", tokens}, want: "the Peer service is not"},
		{env: map[string]string{"PEERLIMIT_API_TOKEN": tokenOld}, want: "the Peer service is not"},
		{env: map[string]string{"PEERLIMIT_CLUSTER_SECRET": "short"}, want: "(PEERLIMIT_CLUSTER_SECRET) is 5 bytes; want at least 16"},
		{args: []string{"--cluster-secret-file", tokens}, env: map[string]string{"PEERLIMIT_API_TOKEN": "short"}, want: "(PEERLIMIT_API_TOKEN) is 5 bytes"},
		{args: []string{"--cluster-secret-file", tokens, "--api-token-file", tokens}, env: map[string]string{"PEERLIMIT_API_TOKEN": tokenOld}, want: "not both"},
		{args: []string{"--gossip-key", "MDEyMzQ1Njc4OWFiY2RlZg==", "--gossip-keyring-file", tokens}, want: "(--gossip-keyring-file), not both"},
		{args: []string{"--auth-metrics"}, want: "(--auth-metrics) needs public API credentials"},
		{args: []string{"--peer-grace", "-1s", "--cluster-secret-file", tokens}, want: "(--peer-grace) must not be negative"},
	} {
		var stderr bytes.Buffer
		code := run(c.args, func(k string) string { return c.env[k] }, &stderr)
		assert.Equal(t, 2, code, "%v %v", c.args, c.env)
		assert.Contains(t, stderr.String(), c.want, "%v %v", c.args, c.env)
		assert.NotContains(t, stderr.String(), tokenOld, "errors never show a secret")
	}

	// A file that cannot be read is a start failure naming the flag.
	var stderr bytes.Buffer
	code := run([]string{"--id", "x", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0",
		"--cluster-secret-file", filepath.Join(dir, "missing")}, func(string) string { return "" }, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "--cluster-secret-file")
}

// TestSIGHUPReloadsTheAPITokens rotates a running node's API token by
// rewriting its token file and sending SIGHUP, as an operator would.
func TestSIGHUPReloadsTheAPITokens(t *testing.T) {
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", tokenOld+"\n")
	secrets := writeFile(t, dir, "secrets", "cluster-secret-0123456789\n")
	p := startProcess(t, "hup-node", "--api-token-file", tokens, "--cluster-secret-file", secrets)

	status := func(token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+p.http+"/v1/check", strings.NewReader(`{"key":"k","limit":100,"window_ms":60000}`))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, status(tokenOld))
	assert.Equal(t, http.StatusUnauthorized, status(tokenNew))
	assert.Equal(t, http.StatusUnauthorized, status(""))

	// Rotation: both, then only the new one.
	for _, step := range []struct {
		file     string
		old, new int
	}{
		{tokenOld + "\n" + tokenNew + "\n", http.StatusOK, http.StatusOK},
		{tokenNew + "\n", http.StatusUnauthorized, http.StatusOK},
	} {
		writeFile(t, dir, "tokens", step.file)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
		waitForLog(t, p.lines, "security reloaded")
		assert.Equal(t, step.old, status(tokenOld), fmt.Sprintf("old token after %q", step.file))
		assert.Equal(t, step.new, status(tokenNew))
	}

	// An unusable file keeps the tokens in use; the node keeps serving.
	writeFile(t, dir, "tokens", "# emptied by mistake\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	rec := waitForLog(t, p.lines, "security reload: some credentials kept their old values")
	assert.Contains(t, rec["err"], "no values")
	assert.Equal(t, http.StatusOK, status(tokenNew))
	assert.Equal(t, http.StatusUnauthorized, status(""), "an empty file never opens the API")
}
