package security

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	tokA = "token-aaaaaaaaaaaaaaaa"
	tokB = "token-bbbbbbbbbbbbbbbb"
)

func TestTokensMatchOnlyConfiguredTokens(t *testing.T) {
	toks, err := NewTokens([]string{tokA, tokB})
	require.NoError(t, err)
	assert.Equal(t, 2, toks.Len())
	assert.True(t, toks.Match(tokA))
	assert.True(t, toks.Match(tokB), "every token of the set is accepted: rotation")
	for _, bad := range []string{"", "token-aaaaaaaaaaaaaaa", tokA + "a", strings.ToUpper(tokA), " " + tokA} {
		assert.False(t, toks.Match(bad), "%q", bad)
	}

	_, err = NewTokens([]string{tokA, "short"})
	require.ErrorContains(t, err, "token 2 is 5 bytes; want at least 16")
	_, err = NewTokens(nil)
	require.Error(t, err)
}

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer abc":   "abc",
		"BEARER  abc ": "abc",
		"Bearer ":      "",
		"Bearer":       "",
		"Basic abc":    "",
		"abc":          "",
		"":             "",
	} {
		got, ok := BearerToken(in)
		assert.Equal(t, want, got, "%q", in)
		assert.Equal(t, want != "", ok, "%q", in)
	}
}

func TestClientAuthRules(t *testing.T) {
	toks, err := NewTokens([]string{tokA})
	require.NoError(t, err)
	for _, c := range []struct {
		name        string
		tokens      *Tokens
		requireCert bool
		auth        string
		cert        bool
		want        Reason
	}{
		{"open", nil, false, "", false, OK},
		{"token ok", toks, false, "Bearer " + tokA, false, OK},
		{"token missing", toks, false, "", false, MissingToken},
		{"wrong scheme", toks, false, "Basic " + tokA, false, MissingToken},
		{"token wrong", toks, false, "Bearer " + tokB, false, BadToken},
		{"cert required, none", nil, true, "", false, MissingClientCert},
		{"cert required, present", nil, true, "", true, OK},
		{"both: cert but no token", toks, true, "", true, MissingToken},
		{"both: token but no cert", toks, true, "Bearer " + tokA, false, MissingClientCert},
		{"both present", toks, true, "Bearer " + tokA, true, OK},
	} {
		assert.Equal(t, c.want, NewClientAuth(c.tokens, c.requireCert).Check(c.auth, c.cert), c.name)
	}
}

func TestClientAuthSetTokensRotatesButNeverTurnsOff(t *testing.T) {
	a, _ := NewTokens([]string{tokA})
	b, _ := NewTokens([]string{tokB})
	auth := NewClientAuth(a, false)
	auth.SetTokens(b)
	assert.Equal(t, BadToken, auth.Check("Bearer "+tokA, false))
	assert.Equal(t, OK, auth.Check("Bearer "+tokB, false))
	auth.SetTokens(nil)
	assert.Equal(t, MissingToken, auth.Check("", false), "a nil set must not open the API")

	open := NewClientAuth(nil, false)
	open.SetTokens(a)
	assert.False(t, open.NeedsToken(), "tokens cannot be turned on while serving")
}

func TestClientAuthCheckDoesNotAllocate(t *testing.T) {
	toks, _ := NewTokens([]string{tokA, tokB})
	auth := NewClientAuth(toks, true)
	header := "Bearer " + tokB
	allocs := testing.AllocsPerRun(1000, func() {
		if auth.Check(header, true) != OK {
			t.Fatal("refused")
		}
	})
	assert.Zero(t, allocs)
}

func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	lines, err := ReadSecrets(write("tokens", "# rotation: new first\n\n  "+tokB+"  \n"+tokA+"\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{tokB, tokA}, lines)

	_, err = ReadSecrets(write("short", tokA+"\nshort\n"))
	require.ErrorContains(t, err, "value 2 is 5 bytes")
	assert.NotContains(t, err.Error(), tokA, "errors never show a secret")
	_, err = ReadSecrets(write("empty", "# nothing\n\n"))
	require.ErrorContains(t, err, "no values")
	_, err = ReadSecrets(filepath.Join(dir, "missing"))
	require.Error(t, err)

	keys, err := ReadKeyring(write("keyring", "MDEyMzQ1Njc4OWFiY2RlZg==\n# old\nMDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"))
	require.NoError(t, err)
	require.Len(t, keys, 2)
	assert.Equal(t, []byte("0123456789abcdef"), keys[0])
	assert.Len(t, keys[1], 32)
	_, err = ReadKeyring(write("badkey", "c2hvcnQ=\n"))
	require.ErrorContains(t, err, "key 1: decodes to 5 bytes")
	_, err = ReadKeyring(write("notb64", "!!!\n"))
	require.ErrorContains(t, err, "not base64")
}
