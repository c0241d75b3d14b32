package limiter

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"
	"sync/atomic"

	"github.com/peerlimit/peerlimit/partition"
)

// Reservation tokens. A token says everything needed to settle without
// the store's record (see reserve.go), so it is the caller's to keep and
// could be the caller's to rewrite: a token claiming more hits than were
// reserved, or naming a reservation that never was, would refund hits
// the caller never took. Two things stop that:
//   - the owner that holds the reservation's record settles by the
//     record, and refuses a token that disagrees with it;
//   - a token carries a MAC over every field and the limit it belongs to
//     (key, window or calendar, algorithm), keyed by a key every member
//     shares (TokenKeys): the heir of a failed owner, which has no
//     record, still verifies an authentic token, and nobody without the
//     key can make one. With the cluster's secret as the key that is
//     nobody outside the cluster; without one, the key is public
//     (NewTokenKeys) and the MAC only catches a token damaged in transit.
//     A token with no record is then taken at its word for nothing: its
//     settle refunds nothing and frees no slot (Settle), since anyone
//     with the reserve scope could make one and be refunded, which the
//     refund scope is there to refuse.

// Token layout, before base64url: version, id, at, hits, expires, flags,
// binding, then (version 2) the MAC of all that and the limit's identity.
const (
	tokenVersion   = 2
	tokenV1        = 1 // before MACs: read only to settle on the owner that holds its record
	tokenFieldsLen = 1 + 8 + 8 + 8 + 8 + 1 + 4
	tokenMACLen    = 16 // HMAC-SHA256, truncated: 128 bits, as TLS and SRTP take it
	tokenLen       = tokenFieldsLen + tokenMACLen
	tokenHold      = 1 << 0
)

// token is a reservation as its holder carries it.
type token struct {
	version byte // tokenVersion, or tokenV1 for a token read from an older node
	id      uint64
	at      int64 // ms when its hits were counted, on the counting owner's clock
	hits    int64
	expires int64 // ms, on the same clock
	hold    bool
	binding uint32 // bindingOf its key, window and algorithm
	mac     [tokenMACLen]byte
}

// bindingOf ties a token to one limit of one key, so that a token passed
// with another key is refused, with a reason that says so, before its
// MAC is checked (the MAC covers the limit in full; 32 bits may collide).
// A calendar limit binds its unit and zone's name, not its handle (a
// token is settled on whichever member owns the key then).
func bindingOf(r *Request) uint32 {
	window := uint64(r.Window.Milliseconds()) * 0x9E3779B97F4A7C15
	if r.Calendar != 0 {
		window = r.Calendar.binding()
	}
	h := partition.Hash(r.Key) ^ window ^ uint64(r.Algorithm)<<59
	return uint32(h ^ h>>32)
}

// fields writes t's fields, all but the MAC, in the token's layout.
func (t *token) fields(b *[tokenLen]byte) {
	b[0] = tokenVersion
	binary.BigEndian.PutUint64(b[1:], t.id)
	binary.BigEndian.PutUint64(b[9:], uint64(t.at))
	binary.BigEndian.PutUint64(b[17:], uint64(t.hits))
	binary.BigEndian.PutUint64(b[25:], uint64(t.expires))
	b[33] = 0
	if t.hold {
		b[33] = tokenHold
	}
	binary.BigEndian.PutUint32(b[34:], t.binding)
}

// encode returns t as its holder carries it, its MAC as t holds it.
func (t token) encode() string {
	var b [tokenLen]byte
	t.fields(&b)
	if t.version == tokenV1 {
		b[0] = tokenV1
		return base64.RawURLEncoding.EncodeToString(b[:tokenFieldsLen])
	}
	copy(b[tokenFieldsLen:], t.mac[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sameAs reports whether t says what rec, the store's record of it, says.
func (t *token) sameAs(rec *reservation) bool {
	return t.at == rec.at && t.hits == rec.hits && t.expires == rec.tokenExpires && t.hold == rec.hold
}

var (
	// strictBase64 refuses the spellings that differ in the unused bits
	// of the last character: one token, one spelling.
	strictBase64 = base64.RawURLEncoding.Strict()
	tokenChars   = base64.RawURLEncoding.EncodedLen(tokenLen)
	tokenV1Chars = base64.RawURLEncoding.EncodedLen(tokenFieldsLen)
)

// decodeToken reads a token, refusing anything a reservation could not
// have produced, as an *ArgumentError naming the reservation field. It
// does not check the MAC (TokenKeys.verify does, knowing the request).
func decodeToken(s string) (token, error) {
	bad := func(why string) (token, error) { return token{}, &ArgumentError{"reservation", why} }
	if len(s) != tokenChars && len(s) != tokenV1Chars {
		return bad(fmt.Sprintf("is %d characters, not a reservation token (%d)", len(s), tokenChars))
	}
	var b [tokenLen]byte
	n, err := strictBase64.Decode(b[:], []byte(s))
	if err != nil {
		return bad("is not a reservation token: " + err.Error())
	}
	t := token{
		version: b[0],
		id:      binary.BigEndian.Uint64(b[1:]), at: int64(binary.BigEndian.Uint64(b[9:])),
		hits: int64(binary.BigEndian.Uint64(b[17:])), expires: int64(binary.BigEndian.Uint64(b[25:])),
		hold: b[33]&tokenHold != 0, binding: binary.BigEndian.Uint32(b[34:]),
	}
	copy(t.mac[:], b[tokenFieldsLen:])
	switch {
	case n == tokenFieldsLen && b[0] != tokenV1, n == tokenLen && b[0] != tokenVersion:
		return bad(fmt.Sprintf("has version %d; this node reads version %d (and 1 on the node that issued it)", b[0], tokenVersion))
	case b[33]&^tokenHold != 0:
		return bad("has unknown flags")
	case t.at < 0 || t.hits < 1 || t.expires < t.at:
		return bad("is not a reservation token: its numbers are inconsistent")
	}
	return t, nil
}

// TokenKeys are the keys reservation tokens are authenticated with: the
// first signs the tokens this store issues, every one is accepted, so
// that a key rotates as the cluster secrets do (add the new one last
// everywhere, then first, then drop the old). Every member must hold the
// same keys, or a member's tokens fail on its heir. Safe for concurrent
// use; the zero value is not usable (NewTokenKeys).
type TokenKeys struct {
	keys atomic.Pointer[[]*tokenKey]
	// secret: the keys come from cluster secrets. Without one the key is
	// public and a token authenticates nothing (authenticates).
	secret atomic.Bool
}

// tokenKey is one key, with a pool of its HMACs: keying one costs two
// SHA-256 blocks, a Reset after use none.
type tokenKey struct{ pool sync.Pool }

// Domain separation: a cluster secret also signs the peers' tokens
// (package security); the reservation key is a key derived from it.
const (
	tokenKeyLabel    = "peerlimit reservation token key v2"
	publicTokenLabel = "peerlimit public reservation token key v2"
)

// NewTokenKeys returns the keys of secrets (the cluster secrets, the
// first signing), or, with none, a key derived from cluster, the
// cluster's name: the same on every member, and public, so that it
// authenticates nothing against someone who knows the name (see
// docs/security.md, "Reservation tokens").
func NewTokenKeys(secrets [][]byte, cluster string) *TokenKeys {
	k := &TokenKeys{}
	k.Set(secrets, cluster)
	return k
}

// Set replaces the keys as NewTokenKeys makes them.
func (k *TokenKeys) Set(secrets [][]byte, cluster string) {
	var keys []*tokenKey
	for _, s := range secrets {
		keys = append(keys, newTokenKey(s, tokenKeyLabel))
	}
	if len(keys) == 0 {
		keys = append(keys, newTokenKey([]byte(cluster), publicTokenLabel))
	}
	k.keys.Store(&keys)
	k.secret.Store(len(secrets) > 0)
}

// authenticates reports whether a token that verifies was made by a
// member: true with cluster secrets; false with the public key, which
// anyone who knows the cluster's name can sign with.
func (k *TokenKeys) authenticates() bool { return k.secret.Load() }

func newTokenKey(secret []byte, label string) *tokenKey {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	derived := m.Sum(nil)
	tk := &tokenKey{}
	tk.pool.New = func() any { return hmac.New(sha256.New, derived) }
	return tk
}

// publicKeys are the keys of a store whose Config names none.
var publicKeys = NewTokenKeys(nil, "")

// sign sets t's MAC, for r's limit, with the first key.
func (k *TokenKeys) sign(t *token, r *Request) {
	(*k.keys.Load())[0].mac(t, r, &t.mac)
}

// verify reports whether t's MAC is r's limit's under one of the keys.
func (k *TokenKeys) verify(t *token, r *Request) bool {
	var want [tokenMACLen]byte
	for _, key := range *k.keys.Load() {
		key.mac(t, r, &want)
		if hmac.Equal(want[:], t.mac[:]) {
			return true
		}
	}
	return false
}

// mac computes the MAC of t's fields and r's limit: the key, the window
// or the calendar (unit and zone name, as bindingOf), the algorithm.
func (tk *tokenKey) mac(t *token, r *Request, out *[tokenMACLen]byte) {
	var b [tokenLen]byte
	t.fields(&b)
	var lim [1 + 1 + 8]byte
	lim[0] = byte(r.Algorithm)
	if r.Calendar != 0 {
		lim[1] = 'c'
		binary.BigEndian.PutUint64(lim[2:], uint64(r.Calendar.Unit()))
	} else {
		lim[1] = 'w'
		binary.BigEndian.PutUint64(lim[2:], uint64(r.Window.Milliseconds()))
	}
	h := tk.pool.Get().(hash.Hash)
	h.Write(b[:tokenFieldsLen])
	h.Write(lim[:])
	if r.Calendar != 0 {
		zone := r.Calendar.Zone()
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(zone)))
		h.Write(n[:])
		h.Write([]byte(zone))
	}
	h.Write([]byte(r.Key))
	var sum [sha256.Size]byte
	copy(out[:], h.Sum(sum[:0]))
	h.Reset()
	tk.pool.Put(h)
}
