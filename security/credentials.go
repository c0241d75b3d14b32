package security

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/peerlimit/peerlimit/internal/field"

	"github.com/peerlimit/peerlimit/security/scope"
)

// Credentials are a running node's credentials and the rules checking
// them, loaded from a Config: its TLS material, the public API's rule
// (ClientAuth), the Peer service's (PeerAuth), the refusals' count, and
// the gossip keyring. A nil rule leaves its API open. Reload re-reads
// every file; the rules' checks never wait for it. Safe for concurrent
// use.
type Credentials struct {
	cfg        Config
	path       string // CredentialsDeps.ConfigPath
	log        *slog.Logger
	tls        *TLS        // nil: plaintext
	client     *ClientAuth // nil: the public API is open
	peer       *PeerAuth   // nil: the Peer service is open
	rejections *Rejections
	gossipKeys [][]byte // from GossipKeyringFile, for the cluster's start
	reloadMu   sync.Mutex
}

// CredentialsDeps are what Credentials need of the node that holds them.
type CredentialsDeps struct {
	// SelfID is the node's member id, which its calls to peers carry.
	SelfID string
	// GRPCAddr is the node's gRPC listen address, logged when Peer calls
	// are open to anyone there (Config.OpenPeers).
	GRPCAddr string
	// GossipKey: the node encrypts gossip with a key of its own
	// (node.Config.GossipKey). Without it or a keyring, peer
	// authentication is warned about at start.
	GossipKey bool
	// ConfigPath is where Config sits in the caller's configuration
	// ("Security" in node.Config): errors and logs name its fields from
	// there, as Validate's do once the caller puts them In it.
	ConfigPath string
	// Now is the node's clock, which times the peer grace. Required.
	Now func() time.Time
	// Registerer takes the refusals' metrics; Logger receives the
	// refusals and reloads. Required.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// NewCredentials loads the credentials cfg names. Errors name the field
// whose file is unusable.
func NewCredentials(cfg Config, deps CredentialsDeps) (*Credentials, error) {
	c := &Credentials{cfg: cfg, path: deps.ConfigPath, log: deps.Logger}
	var err error
	if c.rejections, err = NewRejections(deps.Registerer, deps.Logger); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if cfg.TLSOn() {
		if c.tls, err = LoadTLS(cfg.tlsFiles()); err != nil {
			return nil, c.in(err)
		}
	}
	tokens, err := c.tokens()
	if err != nil {
		return nil, err
	}
	if tokens != nil || cfg.RequireClientCert {
		c.client = NewClientAuth(tokens, cfg.RequireClientCert)
	}
	secrets, err := c.secrets()
	if err != nil {
		return nil, err
	}
	if cfg.PeerAuthOn() {
		if c.peer, err = NewPeerAuth(PeerAuthConfig{SelfID: deps.SelfID, RequireCert: cfg.PeerCAFile != "",
			Secrets: secrets, Grace: cfg.PeerGrace, Now: deps.Now}); err != nil {
			return nil, err
		}
	}
	if cfg.GossipKeyringFile != "" {
		if c.gossipKeys, err = ReadKeyring(cfg.GossipKeyringFile); err != nil {
			return nil, field.Wrap(c.field("GossipKeyringFile"), err)
		}
	}
	c.warnInsecure(deps)
	c.log.Info("security", "tls", c.tls != nil, "client_cert_required", cfg.RequireClientCert, "api_tokens", tokens.Len(),
		"peer_cert_required", cfg.PeerCAFile != "", "cluster_secrets", len(secrets), "open_peers", cfg.OpenPeers, "gossip_keys", len(c.gossipKeys))
	return c, nil
}

// warnInsecure warns at start of what the configuration leaves open on
// purpose: gossip without encryption beside authenticated peers, and Peer
// calls open to anyone (OpenPeers).
func (c *Credentials) warnInsecure(deps CredentialsDeps) {
	if c.peer != nil && !deps.GossipKey && len(c.gossipKeys) == 0 {
		c.log.Warn("peer authentication is on but gossip is not encrypted: whoever reaches the gossip port can join and be routed keys "+
			"(with TLS its forwards fail, degraded; with a cluster secret alone it answers them and learns the callers' tokens); set a gossip key or keyring",
			"fields", "GossipKey, "+c.field("GossipKeyringFile"))
	}
	if c.cfg.OpenPeers {
		c.log.Warn("INSECURE: Peer calls are open to anyone who reaches the gRPC port, without a cluster secret or peer certificate: "+
			"any process there can feed this node checks, overwrite counts with a handoff and reset keys; set a cluster secret or mutual TLS between peers instead",
			"grpc_addr", deps.GRPCAddr, "field", c.field("OpenPeers"))
	}
}

// field is the path of Config's field name in the caller's configuration.
func (c *Credentials) field(name string) string {
	if c.path == "" {
		return name
	}
	return c.path + "." + name
}

// in puts err's fields (TLS's "TLSCertFile") where Config sits in the
// caller's configuration.
func (c *Credentials) in(err error) error {
	if c.path == "" {
		return err
	}
	return field.In(c.path, err)
}

// tokens returns the API tokens, or nil without any. The file's lines
// may give scopes (ParseTokenLines); Config.APITokens have every scope.
func (c *Credentials) tokens() (*Tokens, error) {
	if c.cfg.APITokenFile != "" {
		lines, err := ReadLines(c.cfg.APITokenFile)
		if err != nil {
			return nil, field.Wrap(c.field("APITokenFile"), err)
		}
		toks, err := ParseTokenLines(lines)
		if err != nil {
			return nil, field.Wrap(c.field("APITokenFile"), fmt.Errorf("%s: %w", c.cfg.APITokenFile, err))
		}
		return NewScopedTokens(toks)
	}
	if len(c.cfg.APITokens) == 0 {
		return nil, nil
	}
	return NewTokens(c.cfg.APITokens)
}

func (c *Credentials) secrets() ([][]byte, error) {
	if c.cfg.ClusterSecretFile == "" {
		return c.cfg.ClusterSecrets, nil
	}
	lines, err := ReadSecrets(c.cfg.ClusterSecretFile)
	if err != nil {
		return nil, field.Wrap(c.field("ClusterSecretFile"), err)
	}
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = []byte(l)
	}
	return out, nil
}

// Client is the public API's rule, nil when the public API is open.
func (c *Credentials) Client() *ClientAuth { return c.client }

// Peer is the Peer service's rule, nil when the Peer service is open.
func (c *Credentials) Peer() *PeerAuth { return c.peer }

// ClusterSecrets returns the cluster secrets in force (the first signs),
// as the last start or Reload read them: nil without any. Besides the
// Peer calls, they key what other members must verify of this node's
// work, reservation tokens (limiter.TokenKeys).
func (c *Credentials) ClusterSecrets() [][]byte {
	if c.peer == nil {
		return nil
	}
	return c.peer.Secrets()
}

// Rejections counts and logs the calls the rules refuse.
func (c *Credentials) Rejections() *Rejections { return c.rejections }

// ServerOptions are the gRPC server's transport credentials: TLS, whose
// handshake tells a plaintext client why it is refused; none without.
func (c *Credentials) ServerOptions() []grpc.ServerOption {
	if c.tls == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(ServerCredentials(c.tls, func(remote net.Addr) {
		c.rejections.Reject(APIGRPC, Plaintext, "remote", remote.String())
	}))}
}

// PeerDialOptions make calls to peers carry this node's credentials.
func (c *Credentials) PeerDialOptions() []grpc.DialOption {
	var opts []grpc.DialOption
	if c.tls != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(c.tls.PeerDialConfig())))
	}
	if c.peer != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(c.peer.Credentials()))
	}
	return opts
}

// HTTPServerTLS is the HTTP API's TLS configuration, nil when it is
// plaintext (no TLS, or Config.HTTPPlaintext).
func (c *Credentials) HTTPServerTLS() *tls.Config {
	if c.tls == nil || c.cfg.HTTPPlaintext {
		return nil
	}
	return c.tls.HTTPServerConfig()
}

// HTTPAuth is the HTTP API's check, nil when the public API is open: the
// caller's scopes, or why it is refused.
func (c *Credentials) HTTPAuth() func(*http.Request) (scope.Set, error) {
	if c.client == nil {
		return nil
	}
	return func(r *http.Request) (scope.Set, error) {
		cert := r.TLS != nil && len(r.TLS.VerifiedChains) > 0
		s, reason := c.client.CheckScopes(r.Header.Get("Authorization"), cert)
		if reason != OK {
			c.rejections.Reject(APIHTTP, reason, "path", r.URL.Path, "remote", r.RemoteAddr)
			return 0, errors.New(reason.Message())
		}
		return s, nil
	}
}

// GossipKeys are the keys of Config.GossipKeyringFile as read at start,
// the first encrypting; nil without a keyring.
func (c *Credentials) GossipKeys() [][]byte { return c.gossipKeys }

// SetMembers tells the Peer rule who the members are, by id.
func (c *Credentials) SetMembers(ids []string) {
	if c.peer != nil {
		c.peer.SetMembers(ids)
	}
}

// Keyring is where reloaded gossip keys go (*cluster.Cluster).
type Keyring interface {
	SetKeys(keys [][]byte) error
}

// Reload re-reads every credential file the node was started with: the
// TLS certificates, keys and CAs, the API token file, the cluster secret
// file and the gossip keyring file, whose keys go to gossip. Each part
// applies on its own; a part whose file is unusable keeps what it had,
// and the error names it. New TLS material applies to new connections;
// established ones keep theirs. Credentials cannot be turned on or off
// this way: a rule started without tokens stays without, and an empty
// file is an error, not an open door. The outcome is logged.
func (c *Credentials) Reload(gossip Keyring) error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	var errs []error
	var reloaded []string
	for _, part := range []func() (string, error){c.reloadTLS, c.reloadTokens, c.reloadSecrets, func() (string, error) { return c.reloadKeyring(gossip) }} {
		what, err := part()
		switch {
		case err != nil:
			errs = append(errs, err)
		case what != "":
			reloaded = append(reloaded, what)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		c.log.Error("security reload: some credentials kept their old values", "reloaded", reloaded, "err", err)
	} else {
		c.log.Info("security reloaded", "reloaded", reloaded)
	}
	return err
}

// The parts of Reload: each says what it reloaded, or nothing when the
// node has no such file. Each requires reloadMu held.

func (c *Credentials) reloadTLS() (string, error) {
	if c.tls == nil {
		return "", nil
	}
	return "tls", c.in(c.tls.Reload())
}

func (c *Credentials) reloadTokens() (string, error) {
	if c.cfg.APITokenFile == "" {
		return "", nil
	}
	toks, err := c.tokens()
	if err != nil {
		return "", err
	}
	c.client.SetTokens(toks)
	return fmt.Sprintf("api tokens (%d)", toks.Len()), nil
}

func (c *Credentials) reloadSecrets() (string, error) {
	if c.cfg.ClusterSecretFile == "" {
		return "", nil
	}
	// secrets() names the field in its errors already.
	secrets, err := c.secrets()
	if err == nil {
		if err = c.peer.SetSecrets(secrets); err != nil {
			err = field.Wrap(c.field("ClusterSecretFile"), err)
		}
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("cluster secrets (%d)", len(secrets)), nil
}

func (c *Credentials) reloadKeyring(gossip Keyring) (string, error) {
	if c.cfg.GossipKeyringFile == "" {
		return "", nil
	}
	keys, err := ReadKeyring(c.cfg.GossipKeyringFile)
	if err == nil {
		err = gossip.SetKeys(keys)
	}
	if err != nil {
		return "", field.Wrap(c.field("GossipKeyringFile"), err)
	}
	return fmt.Sprintf("gossip keys (%d, primary %s)", len(keys), KeyFingerprint(keys[0])), nil
}

// KeyFingerprint identifies a key in logs without revealing it: the first
// 8 hex digits of its SHA-256. Operators compare it across nodes during a
// rotation.
func KeyFingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}
