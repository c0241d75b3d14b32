package security

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Tokens is an immutable set of accepted bearer tokens; several at once
// make rotation possible (add the new one, move clients, remove the old).
//
// Only SHA-256 digests are kept. Match hashes the presented token and
// compares the digest with every digest in the set in constant time, so
// neither the time taken nor an early exit reveals which token, or how much
// of one, matched, or how long the tokens are. It does not allocate.
type Tokens struct {
	digests [][sha256.Size]byte
}

// NewTokens returns the set of tokens; each must be at least
// MinSecretBytes long.
func NewTokens(tokens []string) (*Tokens, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("no tokens")
	}
	t := &Tokens{digests: make([][sha256.Size]byte, len(tokens))}
	for i, tok := range tokens {
		if len(tok) < MinSecretBytes {
			return nil, fmt.Errorf("token %d is %d bytes; want at least %d", i+1, len(tok), MinSecretBytes)
		}
		t.digests[i] = sha256.Sum256([]byte(tok))
	}
	return t, nil
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
	d := sha256.Sum256(bytesOf(presented))
	ok := 0
	for i := range t.digests {
		ok |= subtle.ConstantTimeCompare(d[:], t.digests[i][:])
	}
	return ok == 1
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
	if a.requireCert && !certVerified {
		return MissingClientCert
	}
	t := a.tokens.Load()
	if t == nil {
		return OK
	}
	tok, ok := BearerToken(authorization)
	if !ok {
		return MissingToken
	}
	if !t.Match(tok) {
		return BadToken
	}
	return OK
}

// bytesOf views s as bytes without copying; callers only read them.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
