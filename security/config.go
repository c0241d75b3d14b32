package security

import (
	"errors"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config is a node's transport security and authentication; the zero
// value (plus DefaultConfig's names and durations) turns all of it off,
// which a node accepts only while its gRPC port is on loopback: beyond
// it the Peer service needs a cluster secret or mutual TLS, or OpenPeers
// (node.Config.Validate, protected mode). Every *File field is re-read by
// Credentials.Reload (SIGHUP in cmd/node). docs/security.md explains what
// each part stops and what it does not.
type Config struct {
	// TLSCertFile and TLSKeyFile are the PEM server certificate and key of
	// the gRPC and HTTP APIs. With them both speak only TLS. One port
	// serves clients and peers, so peers then call each other over TLS
	// too, and PeerCAFile is required.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile verifies client certificates presented to the public
	// APIs: a certificate that does not verify fails the handshake.
	// Optional; needs TLS.
	ClientCAFile string
	// RequireClientCert makes RateLimiter calls (and Envoy rate limit
	// service calls) and /v1/* requests need a
	// verified client certificate. Health, reflection and /healthz stay
	// open for probes. Needs ClientCAFile.
	RequireClientCert bool

	// PeerCAFile is the CA of peer certificates: a node verifies the peers
	// it dials against it, and a call to the Peer service must present a
	// certificate from it naming PeerServerName. Required with TLS.
	PeerCAFile string
	// PeerCertFile and PeerKeyFile are what this node presents to peers,
	// as a client and, to callers asking for PeerServerName, as a server:
	// it needs both TLS usages and PeerServerName as a DNS name. Default
	// TLSCertFile and TLSKeyFile.
	PeerCertFile, PeerKeyFile string
	// PeerServerName is the DNS name all peer certificates carry: a role,
	// not a host name, since peers dial each other by IP. It is what tells
	// a peer's certificate from an application's when one CA signs both.
	// Default "peerlimit-peer".
	PeerServerName string
	// ClusterSecrets authenticate Peer calls with or without TLS: each call
	// carries an HMAC of its origin's id under the first secret, and is
	// accepted under any of them (rotation). At least 16 bytes each.
	// ClusterSecretFile is the same, one per line, and reloadable; set at
	// most one of the two.
	ClusterSecrets    [][]byte
	ClusterSecretFile string
	// PeerGrace is how long a member that left or failed may still call
	// the Peer service: a leaving node hands its keys off after the others
	// have seen it go. Default 30s.
	PeerGrace time.Duration
	// OpenPeers serves Peer calls without peer authentication although
	// the node's gRPC port is beyond loopback: whoever reaches the port can
	// then feed the node checks, overwrite counts with a handoff and reset
	// keys. Without it such a node refuses to start until it has a cluster
	// secret or mutual TLS between peers, as Redis's protected mode does;
	// on loopback nothing is needed. For a network that only the members
	// can reach, and logged as a warning at start. It turns nothing off,
	// so it and peer authentication are not set together.
	OpenPeers bool

	// APITokens are bearer tokens of the public APIs ("authorization:
	// Bearer <token>" on gRPC, "Authorization: Bearer <token>" on HTTP);
	// any of them is accepted. At least 16 bytes each. APITokenFile is the
	// same, one per line, and reloadable; set at most one of the two.
	APITokens    []string
	APITokenFile string
	// AuthMetrics puts GET /metrics behind the public API's credentials.
	AuthMetrics bool
	// HTTPPlaintext keeps the HTTP API plaintext although TLSCertFile is
	// set, which then secures the gRPC port alone, as envoyproxy/ratelimit's
	// GRPC_SERVER_USE_TLS does: Envoy Gateway probes its /healthcheck
	// over plain HTTP. With RequireClientCert, /v1/* then answers 401 to
	// everyone, since no client certificate comes over plaintext.
	HTTPPlaintext bool

	// GossipKeyringFile holds the gossip keys, base64, one per line, the
	// first encrypting and all decrypting; reloading it rotates keys
	// without a restart. Use instead of the node's single gossip key
	// (node.Config.GossipKey).
	GossipKeyringFile string
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{PeerServerName: "peerlimit-peer", PeerGrace: 30 * time.Second}
}

// TLSOn reports whether the APIs speak TLS.
func (c Config) TLSOn() bool { return c.TLSCertFile != "" || c.TLSKeyFile != "" }

// PeerAuthOn reports whether Peer calls are authenticated: by a peer
// certificate or a cluster secret.
func (c Config) PeerAuthOn() bool {
	return c.PeerCAFile != "" || len(c.ClusterSecrets) > 0 || c.ClusterSecretFile != ""
}

// ClientAuthOn reports whether the public APIs need credentials: a token
// or a client certificate.
func (c Config) ClientAuthOn() bool {
	return len(c.APITokens) > 0 || c.APITokenFile != "" || c.RequireClientCert
}

// Validate reports every unusable field, each a *field.Error naming it
// from Config ("TLSKeyFile"). What depends on the node's other settings
// (its gRPC address, its gossip key) the node checks.
func (c Config) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, field.Errorf(path, format, args...)) }
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		add("TLSCertFile", "and %s go together", field.Ref("TLSKeyFile"))
	}
	if (c.PeerCertFile == "") != (c.PeerKeyFile == "") {
		add("PeerCertFile", "and %s go together", field.Ref("PeerKeyFile"))
	}
	if c.HTTPPlaintext && !c.TLSOn() {
		add("HTTPPlaintext", "needs %s: without TLS the HTTP API is plaintext already", field.Ref("TLSCertFile"))
	}
	if c.TLSOn() && c.PeerCAFile == "" {
		add("PeerCAFile", "is required with TLS: peers call each other on the TLS port and verify each other with it")
	}
	if !c.TLSOn() {
		for _, f := range []struct{ path, v string }{
			{"PeerCAFile", c.PeerCAFile}, {"ClientCAFile", c.ClientCAFile}, {"PeerCertFile", c.PeerCertFile},
		} {
			if f.v != "" {
				add(f.path, "needs TLS: set %s and %s", field.Ref("TLSCertFile"), field.Ref("TLSKeyFile"))
			}
		}
	}
	if c.RequireClientCert && c.ClientCAFile == "" {
		add("RequireClientCert", "needs %s", field.Ref("ClientCAFile"))
	}
	if c.PeerCAFile != "" && c.PeerServerName == "" {
		add("PeerServerName", "must not be empty with a peer CA")
	}
	errs = append(errs, c.secretErrs()...)
	if c.OpenPeers && c.PeerAuthOn() {
		add("OpenPeers", "and peer authentication (%s, %s, %s), not both: with either, Peer calls are authenticated, so the opt-out would open nothing",
			field.Ref("ClusterSecretFile"), field.Ref("ClusterSecrets"), field.Ref("PeerCAFile"))
	}
	if c.ClientAuthOn() && !c.PeerAuthOn() {
		add("PeerCAFile", "or a cluster secret (%s, %s) is required: the public API is authenticated but the Peer service is not, "+
			"and Peer.Forward decides checks too, so anyone could go around the token or certificate",
			field.Ref("ClusterSecretFile"), field.Ref("ClusterSecrets"))
	}
	if c.AuthMetrics && !c.ClientAuthOn() {
		add("AuthMetrics", "needs public API credentials: an API token (%s, %s) or %s",
			field.Ref("APITokenFile"), field.Ref("APITokens"), field.Ref("RequireClientCert"))
	}
	if c.PeerGrace < 0 {
		add("PeerGrace", "must not be negative, got %s", c.PeerGrace)
	}
	return errors.Join(errs...)
}

// secretErrs reports the cluster secrets and API tokens given twice or
// too short.
func (c Config) secretErrs() []error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, field.Errorf(path, format, args...)) }
	if len(c.ClusterSecrets) > 0 && c.ClusterSecretFile != "" {
		add("ClusterSecrets", "or %s, not both", field.Ref("ClusterSecretFile"))
	}
	for i, sec := range c.ClusterSecrets {
		if len(sec) < MinSecretBytes {
			add(fmt.Sprintf("ClusterSecrets[%d]", i), "is %d bytes; want at least %d", len(sec), MinSecretBytes)
		}
	}
	if len(c.APITokens) > 0 && c.APITokenFile != "" {
		add("APITokens", "or %s, not both", field.Ref("APITokenFile"))
	}
	for i, tok := range c.APITokens {
		if len(tok) < MinSecretBytes {
			add(fmt.Sprintf("APITokens[%d]", i), "is %d bytes; want at least %d", len(tok), MinSecretBytes)
		}
	}
	return errs
}

func (c Config) tlsFiles() TLSFiles {
	return TLSFiles{CertFile: c.TLSCertFile, KeyFile: c.TLSKeyFile, ClientCAFile: c.ClientCAFile,
		PeerCAFile: c.PeerCAFile, PeerCertFile: c.PeerCertFile, PeerKeyFile: c.PeerKeyFile, PeerServerName: c.PeerServerName}
}
