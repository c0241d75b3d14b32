// Package security holds a node's credentials and the rules that check
// them: TLS certificates and CAs (reloadable), the public API's bearer
// tokens, and the cluster secret and membership test that guard the
// node-to-node Peer service. It loads, holds, reloads and compares
// (Credentials, from a Config); the gRPC and HTTP layers (packages rpc,
// httpapi) call it, and package node wires it. docs/security.md has the
// threat model.
//
// Every check on the request path compares against values computed when
// the credentials were loaded or the membership changed: no allocation, no
// hashing of secrets, no X.509 verification per call.
package security

// Reason says why a call was refused; OK lets it through. Its String is the
// reason label of peerlimit_auth_failures_total.
type Reason uint8

const (
	OK Reason = iota
	// MissingToken: the public API needs a bearer token and none came.
	MissingToken
	// BadToken: the bearer token is not one of the configured tokens.
	BadToken
	// MissingClientCert: the public API needs a verified client
	// certificate (--tls-client-auth=require) and the connection has none.
	MissingClientCert
	// MissingPeerCert: a Peer call over a connection without a verified
	// peer certificate.
	MissingPeerCert
	// MissingPeerToken: a Peer call without the cluster-secret token.
	MissingPeerToken
	// BadPeerToken: the cluster-secret token does not match the origin the
	// call claims under any configured secret.
	BadPeerToken
	// NotMember: the credentials are good but the origin is not a member of
	// this node's cluster (never seen, or gone for longer than the grace).
	NotMember
	// Plaintext: a client spoke plaintext HTTP/2 to the TLS port.
	Plaintext
)

var reasonLabels = [...]string{"ok", "missing_token", "bad_token", "missing_client_cert", "missing_peer_cert",
	"missing_peer_token", "bad_peer_token", "not_member", "plaintext"}

var reasonMessages = [...]string{
	"ok",
	"missing bearer token: send the header \"authorization: Bearer <token>\"",
	"invalid bearer token",
	"a client certificate signed by the configured client CA is required",
	"the Peer service needs a peer certificate signed by the peer CA and naming the peer server name",
	"the Peer service needs the cluster-secret token (metadata " + PeerTokenKey + ")",
	"the cluster-secret token does not match the origin under any configured secret",
	"the origin is not a member of this node's cluster",
	"plaintext HTTP/2 on a TLS port",
}

// String returns the metric label.
func (r Reason) String() string {
	if int(r) < len(reasonLabels) {
		return reasonLabels[r]
	}
	return "unknown"
}

// Message is the explanation given to the refused caller. It names what
// is missing, never what the right value would be.
func (r Reason) Message() string {
	if int(r) < len(reasonMessages) {
		return reasonMessages[r]
	}
	return "refused"
}

// Authenticated reports whether the caller proved who it is and was
// refused for what it is (PermissionDenied), rather than for missing or
// wrong credentials (Unauthenticated).
func (r Reason) Authenticated() bool { return r == NotMember }
