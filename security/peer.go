package security

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// PeerTokenKey is the gRPC metadata key of the cluster-secret token a
// member sends with every Peer call.
const PeerTokenKey = "peerlimit-peer-token"

// PeerAuthConfig configures a PeerAuth.
type PeerAuthConfig struct {
	// SelfID is this node's id: the origin its own Peer calls claim.
	SelfID string
	// RequireCert: a Peer call must come over a connection whose client
	// certificate is a verified peer certificate (AuthInfo.PeerCert).
	RequireCert bool
	// Secrets are the cluster secrets. A call must carry the token of the
	// origin it claims under one of them; this node signs its own calls
	// with the first. Empty: no token is needed (RequireCert must then be
	// set, or nothing proves the caller belongs).
	Secrets [][]byte
	// Grace is how long a member that left or failed may still call:
	// long enough for a leaving node to hand its keys off after the others
	// have seen it go. 0 refuses it at once.
	Grace time.Duration
	// Now is the clock the grace is measured with. Default time.Now.
	Now func() time.Time
}

// PeerAuth decides whether a call to the Peer service (Forward, Handoff)
// may change this node's state: it must carry the cluster's credentials
// (a peer certificate, a cluster-secret token bound to the origin it
// claims, or both, as configured), and its origin must be a member of the
// cluster as this node sees it, or have been one within Grace.
//
// The membership and the secrets are kept as a snapshot of each member's
// expected tokens, rebuilt on every change and read with one atomic load,
// so Check neither allocates nor computes an HMAC for a member. Safe for
// concurrent use.
type PeerAuth struct {
	cfg PeerAuthConfig

	mu      sync.Mutex // serialises SetSecrets and SetMembers
	secrets [][]byte
	members map[string]time.Time // id → when it was last seen going (zero: alive)

	view atomic.Pointer[peerView]
}

type peerView struct {
	secrets  [][]byte // accepted, the first signs
	members  map[string]peerEntry
	outgoing map[string]string // this node's metadata: PeerTokenKey → token
}

type peerEntry struct {
	tokens   []string  // the member's token under each secret
	departed time.Time // zero: alive
}

// NewPeerAuth returns the rule with an empty membership: every call is
// refused until SetMembers says who the members are.
func NewPeerAuth(cfg PeerAuthConfig) (*PeerAuth, error) {
	if cfg.SelfID == "" {
		return nil, errors.New("peer auth: SelfID must not be empty")
	}
	if !cfg.RequireCert && len(cfg.Secrets) == 0 {
		return nil, errors.New("peer auth: needs a peer certificate, cluster secrets, or both")
	}
	if cfg.Grace < 0 {
		return nil, fmt.Errorf("peer auth: Grace must not be negative, got %s", cfg.Grace)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &PeerAuth{cfg: cfg, members: map[string]time.Time{}}
	if err := p.SetSecrets(cfg.Secrets); err != nil {
		return nil, err
	}
	return p, nil
}

// SetSecrets replaces the cluster secrets (the first signs this node's
// calls). Rotation without a refused call: add the new secret everywhere,
// then make it first everywhere, then remove the old one everywhere.
// A rule made without secrets keeps needing none.
func (p *PeerAuth) SetSecrets(secrets [][]byte) error {
	if len(p.cfg.Secrets) > 0 && len(secrets) == 0 {
		return errors.New("peer auth: cluster secrets cannot be removed while running; an empty set would let any caller in")
	}
	for i, s := range secrets {
		if len(s) < MinSecretBytes {
			return fmt.Errorf("peer auth: secret %d is %d bytes; want at least %d", i+1, len(s), MinSecretBytes)
		}
	}
	if len(p.cfg.Secrets) == 0 && len(secrets) > 0 {
		return errors.New("peer auth: cluster secrets cannot be turned on while running")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.secrets = secrets
	p.publish()
	return nil
}

// Secrets returns the cluster secrets in force, the first signing; nil
// without any. The caller must not change them.
func (p *PeerAuth) Secrets() [][]byte { return p.view.Load().secrets }

// SetMembers records the live members (this node included). A member no
// longer listed is trusted for Grace more, then forgotten.
func (p *PeerAuth) SetMembers(ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	next := make(map[string]time.Time, len(ids))
	for _, id := range ids {
		next[id] = time.Time{}
	}
	for id, gone := range p.members {
		if _, alive := next[id]; alive {
			continue
		}
		if gone.IsZero() {
			gone = now
		}
		if now.Sub(gone) <= p.cfg.Grace {
			next[id] = gone
		}
	}
	p.members = next
	p.publish()
}

// publish rebuilds the view. Requires p.mu held.
func (p *PeerAuth) publish() {
	v := &peerView{secrets: p.secrets, members: make(map[string]peerEntry, len(p.members))}
	for id, gone := range p.members {
		e := peerEntry{departed: gone}
		for _, s := range p.secrets {
			e.tokens = append(e.tokens, PeerToken(s, id))
		}
		v.members[id] = e
	}
	if len(p.secrets) > 0 {
		v.outgoing = map[string]string{PeerTokenKey: PeerToken(p.secrets[0], p.cfg.SelfID)}
	}
	p.view.Store(v)
}

// Check decides one Peer call from the origin it claims, its token ("" if
// absent) and whether its connection presented a verified peer
// certificate.
func (p *PeerAuth) Check(origin, token string, peerCert bool) Reason {
	if p.cfg.RequireCert && !peerCert {
		return MissingPeerCert
	}
	v := p.view.Load()
	e, known := v.members[origin]
	if len(v.secrets) > 0 {
		if token == "" {
			return MissingPeerToken
		}
		match := 0
		if known {
			for _, want := range e.tokens {
				match |= subtle.ConstantTimeCompare(bytesOf(token), bytesOf(want))
			}
		} else {
			// Unknown origin: compute, to tell a stranger with the secret
			// (NotMember) from one without (BadPeerToken). Rare, and
			// bounded by the number of secrets.
			for _, s := range v.secrets {
				match |= subtle.ConstantTimeCompare(bytesOf(token), bytesOf(PeerToken(s, origin)))
			}
		}
		if match != 1 {
			return BadPeerToken
		}
	}
	if !known || (!e.departed.IsZero() && p.cfg.Now().Sub(e.departed) > p.cfg.Grace) {
		return NotMember
	}
	return OK
}

// PeerToken is the token of member id under secret: an HMAC-SHA256 of the
// id, so a token proves knowledge of the secret and is good for one
// origin only.
func PeerToken(secret []byte, id string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("peerlimit peer v1\x00"))
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Credentials returns the per-call credentials this node's Peer calls
// carry: its token under the current first secret, or nothing without
// secrets. They do not demand TLS: cluster secrets are what protects a
// cluster without it (see docs/security.md for what that does not stop).
func (p *PeerAuth) Credentials() credentials.PerRPCCredentials { return peerCreds{p} }

type peerCreds struct{ p *PeerAuth }

// GetRequestMetadata returns a map shared by every call: grpc-go copies
// it into the call's headers and never writes to it.
func (c peerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return c.p.view.Load().outgoing, nil
}

func (peerCreds) RequireTransportSecurity() bool { return false }
