package security

import (
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/security/scope"
)

// keyring records the keys a reload hands to gossip.
type keyring struct {
	keys [][]byte
	err  error
}

func (k *keyring) SetKeys(keys [][]byte) error {
	if k.err != nil {
		return k.err
	}
	k.keys = keys
	return nil
}

func newCredentials(t *testing.T, cfg Config, logs slog.Handler) (*Credentials, error) {
	t.Helper()
	if logs == nil {
		logs = slog.NewTextHandler(testlog.New(t), nil)
	}
	return NewCredentials(cfg, CredentialsDeps{SelfID: "self", GRPCAddr: "127.0.0.1:0", ConfigPath: "Security", Now: time.Now,
		Registerer: prometheus.NewRegistry(), Logger: slog.New(logs)})
}

func writeLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	var b []byte
	for _, l := range lines {
		b = append(b, l+"\n"...)
	}
	require.NoError(t, os.WriteFile(path, b, 0o600))
}

// Reload applies each file on its own: a token file, a secret file and a
// keyring that read well are in force at once, the keys handed to
// gossip; an unusable one keeps what it had, and the error names its
// field under ConfigPath, as the log does.
func TestCredentialsReloadEachPartOnItsOwn(t *testing.T) {
	dir := t.TempDir()
	tokens, secrets, keys := filepath.Join(dir, "tokens"), filepath.Join(dir, "secrets"), filepath.Join(dir, "keyring")
	writeLines(t, tokens, tokA)
	writeLines(t, secrets, "cluster-secret-0123456789")
	writeLines(t, keys, "MDEyMzQ1Njc4OWFiY2RlZg==")
	logs := testlog.NewCapture()
	c, err := newCredentials(t, Config{APITokenFile: tokens, ClusterSecretFile: secrets, GossipKeyringFile: keys, PeerGrace: time.Second}, logs)
	require.NoError(t, err)
	require.Len(t, c.GossipKeys(), 1)
	assert.Equal(t, OK, c.Client().Check("Bearer "+tokA, false))
	require.NotNil(t, c.Peer())
	assert.Nil(t, c.ServerOptions(), "plaintext")
	assert.Nil(t, c.HTTPServerTLS())
	assert.Len(t, c.PeerDialOptions(), 1, "the cluster secret")

	writeLines(t, tokens, tokB)
	writeLines(t, keys, "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "MDEyMzQ1Njc4OWFiY2RlZg==")
	gossip := &keyring{}
	require.NoError(t, c.Reload(gossip))
	assert.Equal(t, OK, c.Client().Check("Bearer "+tokB, false))
	assert.Equal(t, BadToken, c.Client().Check("Bearer "+tokA, false))
	assert.Len(t, gossip.keys, 2)
	ok := logs.Find("security reloaded")
	require.Len(t, ok, 1)
	assert.Contains(t, ok[0].Attrs["reloaded"], "api tokens (1)")
	assert.Contains(t, ok[0].Attrs["reloaded"], "gossip keys (2, primary "+KeyFingerprint(gossip.keys[0])+")")

	writeLines(t, secrets, "short")
	gossip.err = errors.New("no keyring")
	err = c.Reload(gossip)
	require.Error(t, err)
	var paths []string
	field.Each(err, func(fe *field.Error, _ error) {
		if fe != nil {
			paths = append(paths, fe.Path)
		}
	})
	assert.Equal(t, []string{"Security.ClusterSecretFile", "Security.GossipKeyringFile"}, paths)
	assert.Equal(t, OK, c.Client().Check("Bearer "+tokB, false), "the tokens, which read well, are in force")
	failed := logs.Find("security reload: some credentials kept their old values")
	require.Len(t, failed, 1)
	assert.Contains(t, failed[0].Attrs["err"], "Security.ClusterSecretFile")
}

// Without credentials nothing is guarded and nothing is reloaded.
func TestCredentialsOffGuardNothing(t *testing.T) {
	c, err := newCredentials(t, DefaultConfig(), nil)
	require.NoError(t, err)
	assert.Nil(t, c.Client())
	assert.Nil(t, c.Peer())
	assert.Nil(t, c.HTTPAuth())
	assert.Empty(t, c.PeerDialOptions())
	c.SetMembers([]string{"a"}) // no rule: nothing to tell
	assert.NoError(t, c.Reload(&keyring{err: errors.New("not called")}))
}

// The HTTP check refuses a request without the token, counting it.
func TestCredentialsHTTPAuth(t *testing.T) {
	c, err := newCredentials(t, Config{APITokens: []string{tokA}, ClusterSecrets: [][]byte{[]byte("cluster-secret-0123456789")}}, nil)
	require.NoError(t, err)
	auth := c.HTTPAuth()
	require.NotNil(t, auth)
	r, _ := http.NewRequest(http.MethodGet, "/v1/members", nil)
	_, err = auth(r)
	assert.EqualError(t, err, MissingToken.Message())
	r.Header.Set("Authorization", "Bearer "+tokA)
	s, err := auth(r)
	assert.NoError(t, err)
	assert.Equal(t, scope.All, s, "a token given by the environment has every scope")
}

// A token file names each token's scopes after it; a token without any
// has them all, as every token had before scopes; a reload changes them.
// A bad scope is an error naming the file and the line, never the token.
func TestCredentialsTokenFileScopes(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeLines(t, tokens, "# apps, then the operators' tools", tokA+"   check,reserve", tokB)
	c, err := newCredentials(t, Config{APITokenFile: tokens, ClusterSecrets: [][]byte{[]byte("cluster-secret-0123456789")}}, nil)
	require.NoError(t, err)
	s, r := c.Client().CheckScopes("Bearer "+tokA, false)
	assert.Equal(t, OK, r)
	assert.Equal(t, scope.Application, s)
	s, _ = c.Client().CheckScopes("Bearer "+tokB, false)
	assert.Equal(t, scope.All, s)

	writeLines(t, tokens, tokA+" operator", tokB+"\tcheck")
	require.NoError(t, c.Reload(&keyring{}))
	s, _ = c.Client().CheckScopes("Bearer "+tokA, false)
	assert.Equal(t, scope.Operator, s)
	s, _ = c.Client().CheckScopes("Bearer "+tokB, false)
	assert.Equal(t, scope.Check, s)

	writeLines(t, tokens, tokA, tokB+" check,admin")
	err = c.Reload(&keyring{})
	require.Error(t, err)
	assert.ErrorContains(t, err, tokens+": token 2: unknown scope \"admin\"")
	assert.NotContains(t, err.Error(), tokB)
	s, _ = c.Client().CheckScopes("Bearer "+tokB, false)
	assert.Equal(t, scope.Check, s, "the scopes in force are kept")

	writeLines(t, tokens, "short check")
	assert.ErrorContains(t, c.Reload(&keyring{}), "token 1 is 5 bytes; want at least 16")
}

// Validate names fields from Config; the node puts them under its own.
func TestConfigValidateNamesFields(t *testing.T) {
	assert.NoError(t, DefaultConfig().Validate())
	c := DefaultConfig()
	c.TLSCertFile, c.APITokens = "cert.pem", []string{"short"}
	var paths []string
	field.Each(c.Validate(), func(fe *field.Error, _ error) {
		if fe != nil {
			paths = append(paths, fe.Path)
		}
	})
	assert.Equal(t, []string{"TLSCertFile", "PeerCAFile", "APITokens[0]", "PeerCAFile"}, paths)
	assert.ErrorContains(t, field.In("Security", c.Validate()), "Security.TLSCertFile and Security.TLSKeyFile go together")
}
