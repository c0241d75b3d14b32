package node

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/rpc"
	"github.com/peerlimit/peerlimit/security"
)

// SecurityConfig is a node's transport security and authentication; the
// zero value (plus DefaultSecurityConfig's names and durations) turns all
// of it off, which is valid only while Config.GRPCAddr is on loopback:
// beyond it the Peer service needs a cluster secret or mutual TLS, or
// OpenPeers. Every *File field is re-read by Node.ReloadSecurity (SIGHUP
// in cmd/node). docs/security.md explains what each part stops and what
// it does not.
type SecurityConfig struct {
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
	// Config.GRPCAddr is beyond loopback: whoever reaches the port can
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
	// without a restart. Use instead of Config.GossipKey.
	GossipKeyringFile string
}

// DefaultSecurityConfig returns the defaults documented on SecurityConfig.
func DefaultSecurityConfig() SecurityConfig {
	return SecurityConfig{PeerServerName: "peerlimit-peer", PeerGrace: 30 * time.Second}
}

func (s SecurityConfig) tlsOn() bool { return s.TLSCertFile != "" || s.TLSKeyFile != "" }

func (s SecurityConfig) peerAuthOn() bool {
	return s.PeerCAFile != "" || len(s.ClusterSecrets) > 0 || s.ClusterSecretFile != ""
}

func (s SecurityConfig) clientAuthOn() bool {
	return len(s.APITokens) > 0 || s.APITokenFile != "" || s.RequireClientCert
}

// validate reports every unusable field, each a *field.Error naming it
// from Config ("Security.TLSKeyFile").
func (s SecurityConfig) validate(c Config) []error {
	var errs []error
	add := func(path, format string, args ...any) { errs = append(errs, field.Errorf(path, format, args...)) }
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		add("Security.TLSCertFile", "and %s go together", field.Ref("Security.TLSKeyFile"))
	}
	if (s.PeerCertFile == "") != (s.PeerKeyFile == "") {
		add("Security.PeerCertFile", "and %s go together", field.Ref("Security.PeerKeyFile"))
	}
	if s.HTTPPlaintext && !s.tlsOn() {
		add("Security.HTTPPlaintext", "needs %s: without TLS the HTTP API is plaintext already", field.Ref("Security.TLSCertFile"))
	}
	if s.tlsOn() && s.PeerCAFile == "" {
		add("Security.PeerCAFile", "is required with TLS: peers call each other on the TLS port and verify each other with it")
	}
	if !s.tlsOn() {
		for _, f := range []struct{ path, v string }{
			{"Security.PeerCAFile", s.PeerCAFile}, {"Security.ClientCAFile", s.ClientCAFile}, {"Security.PeerCertFile", s.PeerCertFile},
		} {
			if f.v != "" {
				add(f.path, "needs TLS: set %s and %s", field.Ref("Security.TLSCertFile"), field.Ref("Security.TLSKeyFile"))
			}
		}
	}
	if s.RequireClientCert && s.ClientCAFile == "" {
		add("Security.RequireClientCert", "needs %s", field.Ref("Security.ClientCAFile"))
	}
	if s.PeerCAFile != "" && s.PeerServerName == "" {
		add("Security.PeerServerName", "must not be empty with a peer CA")
	}
	if len(s.ClusterSecrets) > 0 && s.ClusterSecretFile != "" {
		add("Security.ClusterSecrets", "or %s, not both", field.Ref("Security.ClusterSecretFile"))
	}
	for i, sec := range s.ClusterSecrets {
		if len(sec) < security.MinSecretBytes {
			add(fmt.Sprintf("Security.ClusterSecrets[%d]", i), "is %d bytes; want at least %d", len(sec), security.MinSecretBytes)
		}
	}
	if len(s.APITokens) > 0 && s.APITokenFile != "" {
		add("Security.APITokens", "or %s, not both", field.Ref("Security.APITokenFile"))
	}
	for i, tok := range s.APITokens {
		if len(tok) < security.MinSecretBytes {
			add(fmt.Sprintf("Security.APITokens[%d]", i), "is %d bytes; want at least %d", len(tok), security.MinSecretBytes)
		}
	}
	if s.OpenPeers && s.peerAuthOn() {
		add("Security.OpenPeers", "and peer authentication (%s, %s, %s), not both: with either, Peer calls are authenticated, so the opt-out would open nothing",
			field.Ref("Security.ClusterSecretFile"), field.Ref("Security.ClusterSecrets"), field.Ref("Security.PeerCAFile"))
	}
	// Protected mode: a port beyond loopback is reachable by processes that
	// are no members, and Peer calls change counts. The public API's rule
	// below says the same when it applies, so it is said once.
	if !s.peerAuthOn() && !s.OpenPeers && !s.clientAuthOn() && !onLoopback(c.GRPCAddr) {
		add("GRPCAddr", "is %q, beyond loopback, and Peer calls are not authenticated: whoever reaches the port could feed this node checks, "+
			"overwrite counts with a handoff or reset keys. Set a cluster secret of %d+ bytes, the same on every node (%s or %s); "+
			"or mutual TLS between peers (%s, with %s and %s); or, to serve Peer calls to anyone on purpose, %s",
			c.GRPCAddr, security.MinSecretBytes, field.Ref("Security.ClusterSecretFile"), field.Ref("Security.ClusterSecrets"),
			field.Ref("Security.PeerCAFile"), field.Ref("Security.TLSCertFile"), field.Ref("Security.TLSKeyFile"), field.Ref("Security.OpenPeers"))
	}
	if s.clientAuthOn() && !s.peerAuthOn() {
		add("Security.PeerCAFile", "or a cluster secret (%s, %s) is required: the public API is authenticated but the Peer service is not, "+
			"and Peer.Forward decides checks too, so anyone could go around the token or certificate",
			field.Ref("Security.ClusterSecretFile"), field.Ref("Security.ClusterSecrets"))
	}
	if s.AuthMetrics && !s.clientAuthOn() {
		add("Security.AuthMetrics", "needs public API credentials: an API token (%s, %s) or %s",
			field.Ref("Security.APITokenFile"), field.Ref("Security.APITokens"), field.Ref("Security.RequireClientCert"))
	}
	if s.PeerGrace < 0 {
		add("Security.PeerGrace", "must not be negative, got %s", s.PeerGrace)
	}
	if s.GossipKeyringFile != "" && len(c.GossipKey) > 0 {
		add("GossipKey", "or %s, not both", field.Ref("Security.GossipKeyringFile"))
	}
	return errs
}

// onLoopback reports whether the listen address addr binds loopback only:
// 127.0.0.0/8, ::1 or the name localhost. An empty or unspecified host
// binds every interface, and any other name may resolve to anything. An
// address that is no host:port counts as loopback here: nothing will
// listen on it, and the listener's error says why.
func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// nodeSecurity is a running node's credentials and the rules checking
// them. A nil rule leaves its API open.
type nodeSecurity struct {
	cfg        SecurityConfig
	log        *slog.Logger
	tls        *security.TLS        // nil: plaintext
	client     *security.ClientAuth // nil: the public API is open
	peer       *security.PeerAuth   // nil: the Peer service is open
	rejections *security.Rejections
	gossipKeys [][]byte // from GossipKeyringFile, for the cluster's start
	reloadMu   sync.Mutex
}

func newNodeSecurity(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*nodeSecurity, error) {
	sc := cfg.Security
	s := &nodeSecurity{cfg: sc, log: log}
	var err error
	if s.rejections, err = security.NewRejections(reg, log); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if sc.tlsOn() {
		if s.tls, err = security.LoadTLS(sc.tlsFiles()); err != nil {
			return nil, err
		}
	}
	tokens, err := sc.tokens()
	if err != nil {
		return nil, err
	}
	if tokens != nil || sc.RequireClientCert {
		s.client = security.NewClientAuth(tokens, sc.RequireClientCert)
	}
	secrets, err := sc.secrets()
	if err != nil {
		return nil, err
	}
	if sc.peerAuthOn() {
		if s.peer, err = security.NewPeerAuth(security.PeerAuthConfig{SelfID: cfg.ID, RequireCert: sc.PeerCAFile != "",
			Secrets: secrets, Grace: sc.PeerGrace, Now: cfg.Now}); err != nil {
			return nil, err
		}
	}
	if sc.GossipKeyringFile != "" {
		if s.gossipKeys, err = security.ReadKeyring(sc.GossipKeyringFile); err != nil {
			return nil, field.Wrap("Security.GossipKeyringFile", err)
		}
	}
	if s.peer != nil && len(cfg.GossipKey) == 0 && len(s.gossipKeys) == 0 {
		log.Warn("peer authentication is on but gossip is not encrypted: whoever reaches the gossip port can join and be routed keys "+
			"(with TLS its forwards fail, degraded; with a cluster secret alone it answers them and learns the callers' tokens); set a gossip key or keyring",
			"fields", "GossipKey, Security.GossipKeyringFile")
	}
	if sc.OpenPeers {
		log.Warn("INSECURE: Peer calls are open to anyone who reaches the gRPC port, without a cluster secret or peer certificate: "+
			"any process there can feed this node checks, overwrite counts with a handoff and reset keys; set a cluster secret or mutual TLS between peers instead",
			"grpc_addr", cfg.GRPCAddr, "field", "Security.OpenPeers")
	}
	log.Info("security", "tls", s.tls != nil, "client_cert_required", sc.RequireClientCert, "api_tokens", tokens.Len(),
		"peer_cert_required", sc.PeerCAFile != "", "cluster_secrets", len(secrets), "open_peers", sc.OpenPeers, "gossip_keys", len(s.gossipKeys))
	return s, nil
}

func (s SecurityConfig) tlsFiles() security.TLSFiles {
	return security.TLSFiles{CertFile: s.TLSCertFile, KeyFile: s.TLSKeyFile, ClientCAFile: s.ClientCAFile,
		PeerCAFile: s.PeerCAFile, PeerCertFile: s.PeerCertFile, PeerKeyFile: s.PeerKeyFile, PeerServerName: s.PeerServerName}
}

// tokens returns the API tokens, or nil without any.
func (s SecurityConfig) tokens() (*security.Tokens, error) {
	list := s.APITokens
	if s.APITokenFile != "" {
		var err error
		if list, err = security.ReadSecrets(s.APITokenFile); err != nil {
			return nil, field.Wrap("Security.APITokenFile", err)
		}
	}
	if len(list) == 0 {
		return nil, nil
	}
	return security.NewTokens(list)
}

func (s SecurityConfig) secrets() ([][]byte, error) {
	if s.ClusterSecretFile == "" {
		return s.ClusterSecrets, nil
	}
	lines, err := security.ReadSecrets(s.ClusterSecretFile)
	if err != nil {
		return nil, field.Wrap("Security.ClusterSecretFile", err)
	}
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = []byte(l)
	}
	return out, nil
}

// guard is the gRPC access control, nil when nothing is guarded: the
// request path then pays nothing.
func (s *nodeSecurity) guard() *rpc.Guard {
	if s.client == nil && s.peer == nil {
		return nil
	}
	return &rpc.Guard{Client: s.client, Peer: s.peer, Rejections: s.rejections}
}

// serverOptions are the gRPC server's transport credentials and stream
// guard; the unary guard goes with the codec's interceptors.
func (s *nodeSecurity) serverOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(security.ServerCredentials(s.tls, func(remote net.Addr) {
			s.rejections.Reject(security.APIGRPC, security.Plaintext, "remote", remote.String())
		})))
	}
	if g := s.guard(); g != nil {
		opts = append(opts, grpc.ChainStreamInterceptor(g.Stream))
	}
	return opts
}

// peerDialOptions make calls to peers carry this node's credentials.
func (s *nodeSecurity) peerDialOptions() []grpc.DialOption {
	var opts []grpc.DialOption
	if s.tls != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(s.tls.PeerDialConfig())))
	}
	if s.peer != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(s.peer.Credentials()))
	}
	return opts
}

// httpAuth is the HTTP API's check, nil when the public API is open.
func (s *nodeSecurity) httpAuth() func(*http.Request) error {
	if s.client == nil {
		return nil
	}
	return func(r *http.Request) error {
		cert := r.TLS != nil && len(r.TLS.VerifiedChains) > 0
		if reason := s.client.Check(r.Header.Get("Authorization"), cert); reason != security.OK {
			s.rejections.Reject(security.APIHTTP, reason, "path", r.URL.Path, "remote", r.RemoteAddr)
			return errors.New(reason.Message())
		}
		return nil
	}
}

// setMembers tells the Peer rule who the members are.
func (s *nodeSecurity) setMembers(members []cluster.Member) {
	if s.peer == nil {
		return
	}
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.ID
	}
	s.peer.SetMembers(ids)
}

// ReloadSecurity re-reads every credential file the node was started
// with: the TLS certificates, keys and CAs, the API token file, the
// cluster secret file and the gossip keyring file. Each part applies on
// its own; a part whose file is unusable keeps what it had, and the error
// names it. New TLS material applies to new connections; established ones
// keep theirs. Credentials cannot be turned on or off this way: a rule
// started without tokens stays without, and an empty file is an error,
// not an open door.
func (n *Node) ReloadSecurity() error {
	s := n.sec
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	var errs []error
	var reloaded []string
	if s.tls != nil {
		if err := s.tls.Reload(); err != nil {
			errs = append(errs, err)
		} else {
			reloaded = append(reloaded, "tls")
		}
	}
	if s.cfg.APITokenFile != "" {
		if toks, err := s.cfg.tokens(); err != nil {
			errs = append(errs, err)
		} else {
			s.client.SetTokens(toks)
			reloaded = append(reloaded, fmt.Sprintf("api tokens (%d)", toks.Len()))
		}
	}
	if s.cfg.ClusterSecretFile != "" {
		// secrets() names the field in its errors already.
		secrets, err := s.cfg.secrets()
		if err == nil {
			if err = s.peer.SetSecrets(secrets); err != nil {
				err = field.Wrap("Security.ClusterSecretFile", err)
			}
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			reloaded = append(reloaded, fmt.Sprintf("cluster secrets (%d)", len(secrets)))
		}
	}
	if s.cfg.GossipKeyringFile != "" {
		keys, err := security.ReadKeyring(s.cfg.GossipKeyringFile)
		if err == nil {
			err = n.members.SetKeys(keys)
		}
		if err != nil {
			errs = append(errs, field.Wrap("Security.GossipKeyringFile", err))
		} else {
			reloaded = append(reloaded, fmt.Sprintf("gossip keys (%d, primary %s)", len(keys), KeyFingerprint(keys[0])))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		n.log.Error("security reload: some credentials kept their old values", "reloaded", reloaded, "err", err)
	} else {
		n.log.Info("security reloaded", "reloaded", reloaded)
	}
	return err
}

// KeyFingerprint identifies a key in logs without revealing it: the first
// 8 hex digits of its SHA-256. Operators compare it across nodes during a
// rotation.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}
