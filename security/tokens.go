package security

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/peerlimit/peerlimit/security/scope"
)

// Tokens is an immutable set of accepted bearer tokens, each with its
// scopes (package scope); several at once make rotation possible (add the
// new one, move clients, remove the old).
//
// Only SHA-256 digests are kept. Match hashes the presented token and
// compares the digest with every digest in the set in constant time, so
// neither the time taken nor an early exit reveals which token, or how much
// of one, matched, or how long the tokens are. It does not allocate.
type Tokens struct {
	digests [][sha256.Size]byte
	scopes  []scope.Set
}

// Token is one accepted token and what it may do.
type Token struct {
	Value  string
	Scopes scope.Set
}

// NewTokens returns the set of tokens, each with every scope; each must be
// at least MinSecretBytes long.
func NewTokens(tokens []string) (*Tokens, error) {
	scoped := make([]Token, len(tokens))
	for i, tok := range tokens {
		scoped[i] = Token{Value: tok, Scopes: scope.All}
	}
	return NewScopedTokens(scoped)
}

// NewScopedTokens returns the set of tokens; each must be at least
// MinSecretBytes long and have a scope. A token listed twice has the
// scopes of both lines.
func NewScopedTokens(tokens []Token) (*Tokens, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	t := &Tokens{digests: make([][sha256.Size]byte, len(tokens)), scopes: make([]scope.Set, len(tokens))}
	for i, tok := range tokens {
		if len(tok.Value) < MinSecretBytes {
			return nil, fmt.Errorf("token %d is %d bytes; want at least %d", i+1, len(tok.Value), MinSecretBytes)
		}
		if tok.Scopes == 0 {
			return nil, fmt.Errorf("token %d has no scope", i+1)
		}
		t.digests[i] = sha256.Sum256([]byte(tok.Value))
		t.scopes[i] = tok.Scopes
	}
	return t, nil
}

// ParseTokenLines reads the lines of a token file (ReadLines): each a
// token, then optionally, after white space, its scopes (scope.Parse:
// "check,reserve", "operator"). A token without scopes has every scope,
// as every token had before scopes existed. Errors name the line, never
// a token.
func ParseTokenLines(lines []string) ([]Token, error) {
	out := make([]Token, len(lines))
	for i, line := range lines {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			return nil, fmt.Errorf("token %d is empty", i+1)
		}
		value, rest := fields[0], strings.Join(fields[1:], " ")
		out[i] = Token{Value: value, Scopes: scope.All}
		if rest != "" {
			s, err := scope.Parse(rest)
			if err != nil {
				return nil, fmt.Errorf("token %d: %w", i+1, err)
			}
			out[i].Scopes = s
		}
		if len(value) < MinSecretBytes {
			return nil, fmt.Errorf("token %d is %d bytes; want at least %d", i+1, len(value), MinSecretBytes)
		}
	}
	return out, nil
}

// Len is how many tokens the set holds; 0 for a nil set.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.digests)
}

// Match reports whether presented is one of the tokens.
func (t *Tokens) Match(presented string) bool {
	_, ok := t.MatchScopes(presented)
	return ok
}

// MatchScopes reports whether presented is one of the tokens, and its
// scopes, in the constant time Tokens promises.
func (t *Tokens) MatchScopes(presented string) (scope.Set, bool) {
	d := sha256.Sum256(bytesOf(presented))
	ok, scopes := 0, 0
	for i := range t.digests {
		eq := subtle.ConstantTimeCompare(d[:], t.digests[i][:])
		ok |= eq
		scopes |= subtle.ConstantTimeSelect(eq, int(t.scopes[i]), 0)
	}
	return scope.Set(scopes), ok == 1
}

// BearerToken returns the token of an Authorization value of the form
// "Bearer <token>" (the scheme is case-insensitive, RFC 7235).
func BearerToken(authorization string) (string, bool) {
	const scheme = "Bearer "
	if len(authorization) <= len(scheme) || !strings.EqualFold(authorization[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(authorization[len(scheme):])
	return tok, tok != ""
}

// ClientAuth is the public API's access rule: a bearer token from a set,
// a verified client certificate, both, or neither. The token set can be
// swapped (SetTokens) while calls are checked; safe for concurrent use.
type ClientAuth struct {
	requireCert bool
	tokens      atomic.Pointer[Tokens] // nil: no token needed
}

// NewClientAuth returns the rule. tokens nil means no token is needed;
// requireCert means a verified client certificate is.
func NewClientAuth(tokens *Tokens, requireCert bool) *ClientAuth {
	a := &ClientAuth{requireCert: requireCert}
	a.tokens.Store(tokens)
	return a
}

// SetTokens replaces the accepted tokens. A rule made without tokens
// keeps needing none: tokens cannot be turned on or off while serving.
func (a *ClientAuth) SetTokens(t *Tokens) {
	if a.tokens.Load() != nil && t != nil {
		a.tokens.Store(t)
	}
}

// NeedsToken reports whether calls must carry a bearer token.
func (a *ClientAuth) NeedsToken() bool { return a.tokens.Load() != nil }

// Check decides one call from its Authorization value ("" when absent) and
// whether its connection presented a client certificate that verified.
func (a *ClientAuth) Check(authorization string, certVerified bool) Reason {
	_, r := a.CheckScopes(authorization, certVerified)
	return r
}

// CheckScopes is Check, and the caller's scopes when it passes: its
// token's, or every scope when the rule needs no token (a client
// certificate carries none).
func (a *ClientAuth) CheckScopes(authorization string, certVerified bool) (scope.Set, Reason) {
	if a.requireCert && !certVerified {
		return 0, MissingClientCert
	}
	t := a.tokens.Load()
	if t == nil {
		return scope.All, OK
	}
	tok, ok := BearerToken(authorization)
	if !ok {
		return 0, MissingToken
	}
	s, ok := t.MatchScopes(tok)
	if !ok {
		return 0, BadToken
	}
	return s, OK
}

// bytesOf views s as bytes without copying; callers only read them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
