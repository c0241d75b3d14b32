package node

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/wallclock"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peerrpc"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/tracing"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// Config is everything a node needs. Start from DefaultConfig (or
// DefaultLocalConfig for tests); only cmd/node reads flags and environment.
type Config struct {
	// ID names the node in answers (owner) and, with clustering, in the
	// membership. Default: the host name.
	ID string
	// GRPCAddr, HTTPAddr and GossipAddr are listen addresses. Port 0 binds
	// a free port; the node reports the bound address.
	// Defaults :9090, :8080, :7946.
	GRPCAddr   string
	HTTPAddr   string
	GossipAddr string
	// AdvertiseAddr is the gossip address others should use when it
	// differs from GossipAddr (NAT, containers). Optional.
	AdvertiseAddr string
	// Join lists seeds: gossip addresses of any live members. Unreachable
	// seeds are retried in the background; empty starts a new cluster.
	Join []string
	// GossipKey encrypts gossip (16, 24 or 32 bytes); every member needs
	// the same. Optional.
	GossipKey []byte
	// GossipProfile is memberlist's timing: cluster.ProfileLAN (default)
	// or cluster.ProfileLocal (tests, one host).
	GossipProfile cluster.Profile

	// Partitions is the number of partitions keys hash into
	// (partition.Of): the ring assigns them to members, the store locks
	// and hands off its state by them. The same on every node. Default
	// 271.
	Partitions int
	// Ring spreads partitions over members.
	Ring ring.Config
	// Route is the request path: batch size, fallback when an owner is
	// unreachable, the bound on forwarded checks in flight.
	Route route.Config
	// Lease is budget leases for hot keys: how long one lasts (0: off), and
	// the rate from which a node asks for one.
	Lease lease.Config
	// Peers tunes the calls to other members: batching, timeouts.
	Peers peerrpc.Config
	// PeerDialOptions are added to every connection to another member,
	// after the node's own (TLS, source address). Optional; tests use it
	// to watch the calls.
	PeerDialOptions []grpc.DialOption
	// HandoffInterval is how often the node looks for state it holds but
	// does not own (from fallback decisions, or gossip not yet converged)
	// and sends it to the owner. Membership changes trigger it at once.
	// Default 5s.
	HandoffInterval time.Duration

	// Limiter bounds the store: keys, key length, windows, log sizes.
	Limiter limiter.Config
	// ShareFor is how long a failed member still counts among the members
	// whose share of each limit this node keeps to under --fallback
	// share: a partition's sides keep to their shares this long; after
	// it, a member that crashed for good stops lowering the limits.
	// Default 5m.
	ShareFor time.Duration
	// Replication keeps each partition's counts on its heir too, so that
	// they survive the owner's crash (package replica).
	Replication replica.Config
	// MaxRecvMsgBytes caps a gRPC request. Default 4 MiB.
	MaxRecvMsgBytes int
	// SweepInterval is how often expired keys are freed. Decisions never
	// depend on it; it only bounds how long dead keys hold memory.
	// Default 10s.
	SweepInterval time.Duration

	// PoliciesFile is a YAML or JSON file of named policies (package
	// policy) that requests may name instead of giving limit, window and
	// algorithm. Read at Start, where an invalid file is an error naming
	// the line, and again by ReloadPolicies. Every node should read the
	// same file. Optional.
	PoliciesFile string
	// EnvoyRLSConfig is a YAML file, or a directory read as upstream's
	// runtime loader reads it (every file not starting with a dot, at any
	// depth; an empty one is rules with no domains, which limit nothing),
	// in envoyproxy/ratelimit's format (package envoyrls). With it the node
	// serves Envoy's rate limit service,
	// envoy.service.ratelimit.v3.RateLimitService, on its gRPC port. Read
	// at Start, where an invalid file is an error naming the line, and
	// again by ReloadEnvoyRLS. Every node should read the same files.
	// Optional: without it the service is not registered, so an Envoy
	// pointed at the node sees UNIMPLEMENTED rather than answers that
	// limit nothing.
	EnvoyRLSConfig string
	// WatchConfig reloads PoliciesFile and EnvoyRLSConfig when they
	// change on disk, as envoyproxy/ratelimit does, besides
	// ReloadPolicies and ReloadEnvoyRLS (SIGHUP): edited in place,
	// replaced by rename, or updated by Kubernetes as a ConfigMap
	// (configwatch.go). A directory is watched for any change of its
	// entries, a file through its directory. A reload that finds the
	// configuration in force unchanged does nothing. Default on.
	WatchConfig bool
	// EnvoyRLSWatchRoot, with WatchConfig, is a symlink, EnvoyRLSConfig or
	// one of its ancestors, that is swapped atomically to publish a new
	// version (/srv/runtime_data/current -> v2): only its swaps reload
	// EnvoyRLSConfig, edits inside the version it points at do not
	// (upstream's RUNTIME_WATCH_ROOT=true with RUNTIME_ROOT). Empty
	// (default) watches EnvoyRLSConfig itself (RUNTIME_WATCH_ROOT=false).
	EnvoyRLSWatchRoot string
	// EnvoyRLSXDS subscribes to the rate limit service's configuration
	// from an xDS control plane instead (package xdsconfig), as
	// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW does for Envoy
	// Gateway. With a ServerAddr, the service is served, and
	// EnvoyRLSConfig must be empty.
	EnvoyRLSXDS xdsconfig.Config
	// EnvoyRLSAwaitConfig: with EnvoyRLSXDS, until the first
	// configuration arrives the node reports itself not ready: the
	// service's gRPC health NOT_SERVING, /healthz 503 (upstream does not
	// even listen before it, unless FORCE_START_WITHOUT_INITIAL_CONFIG).
	// Either way the service answers UNAVAILABLE meanwhile, never OK.
	// Default on.
	EnvoyRLSAwaitConfig bool
	// EnvoyRLSHealthyNeedsDomains is upstream's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: the node reports itself
	// not ready whenever the rules in force, from files or a control
	// plane, have no domains (none loaded yet, an empty directory, Envoy
	// Gateway's snapshot after its last Gateway went), not only before
	// the first. Once a configuration is in force the service answers
	// meanwhile, an empty one limiting nothing, as upstream's (before the
	// first from a control plane it answers UNAVAILABLE). Default off.
	EnvoyRLSHealthyNeedsDomains bool
	// EnvoyRLS are the rate limit service's settings (headers, domain
	// merging, response metadata, global shadow and quota modes, the
	// near-limit ratio, the bound on statistics keys). Any but the
	// defaults needs EnvoyRLSConfig.
	EnvoyRLS envoyrls.Config
	// HTTP is the HTTP API's settings: the largest body, Go's profiles
	// (off by default: they reveal internals, and a CPU profile costs
	// CPU). Its AuthMetrics is Security.AuthMetrics.
	HTTP httpapi.Config
	// Security is TLS, mutual TLS and authentication; off by default,
	// except that a GRPCAddr beyond loopback needs peer authentication
	// or Security.OpenPeers (protected mode, SecurityConfig).
	Security SecurityConfig
	// Tracing exports OpenTelemetry spans over OTLP (package tracing): a
	// server span for each Envoy ShouldRateLimit call and HTTP check,
	// under the caller's trace, and a client span for each hop of its
	// checks to their owners, naming the owner. Off by default. An empty
	// Tracing.InstanceID is the node's ID.
	Tracing tracing.Config

	// Logger receives the node's structured logs. Default: text to stderr.
	Logger *slog.Logger
	// Now is the node's wall clock. Default: the machine's, read through
	// its monotonic clock so that it never steps (wallclock.Steady).
	Now func() time.Time
}

// DefaultConfig returns production defaults. They listen on every
// interface, so they validate only once peers authenticate (a cluster
// secret or mutual TLS) or Security.OpenPeers says they need not.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		ID:                  host,
		GRPCAddr:            ":9090",
		HTTPAddr:            ":8080",
		GossipAddr:          ":7946",
		GossipProfile:       cluster.ProfileLAN,
		Partitions:          partition.DefaultCount,
		Ring:                ring.DefaultConfig(),
		Route:               route.DefaultConfig(),
		Lease:               lease.DefaultConfig(),
		Peers:               peerrpc.DefaultConfig(),
		HandoffInterval:     5 * time.Second,
		Limiter:             limiter.DefaultConfig(),
		Replication:         replica.DefaultConfig(),
		ShareFor:            5 * time.Minute,
		MaxRecvMsgBytes:     4 << 20,
		HTTP:                httpapi.DefaultConfig(),
		SweepInterval:       10 * time.Second,
		Security:            DefaultSecurityConfig(),
		Tracing:             tracing.DefaultConfig(),
		EnvoyRLS:            envoyrls.DefaultConfig(),
		EnvoyRLSXDS:         xdsconfig.DefaultConfig(),
		EnvoyRLSAwaitConfig: true,
		WatchConfig:         true,
		Logger:              slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Now:                 wallclock.Steady(wallclock.System(), wallclock.DefaultMaxSlew),
	}
}

// DefaultLocalConfig is DefaultConfig on loopback free ports, for tests and
// single-host clusters.
func DefaultLocalConfig(id string) Config {
	c := DefaultConfig()
	c.ID = id
	c.GRPCAddr, c.HTTPAddr, c.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.GossipProfile = cluster.ProfileLocal
	c.SweepInterval = time.Second
	c.HandoffInterval = time.Second
	return c
}

// Validate reports every unusable field, each a *field.Error naming it
// from Config ("Limiter.MaxKeys"): cmd/node says which flag sets it.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, path, format string, args ...any) {
		if bad {
			errs = append(errs, field.Errorf(path, format, args...))
		}
	}
	check(c.ID == "", "ID", "must not be empty")
	check(c.GRPCAddr == "", "GRPCAddr", "must be set")
	check(c.HTTPAddr == "", "HTTPAddr", "must be set")
	check(c.GossipAddr == "", "GossipAddr", "must be set")
	check(c.MaxRecvMsgBytes < 1024, "MaxRecvMsgBytes", "must be ≥ 1024, got %d", c.MaxRecvMsgBytes)
	check(c.SweepInterval <= 0, "SweepInterval", "must be positive, got %s", c.SweepInterval)
	check(c.ShareFor <= 0, "ShareFor", "must be positive, got %s", c.ShareFor)
	check(c.HandoffInterval <= 0, "HandoffInterval", "must be positive, got %s", c.HandoffInterval)
	check(c.Partitions < 1, "Partitions", "must be ≥ 1, got %d", c.Partitions)
	check(c.EnvoyRLS != envoyrls.DefaultConfig() && c.EnvoyRLSConfig == "" && !c.EnvoyRLSXDS.Enabled(), "EnvoyRLS", "needs %s or %s",
		field.Ref("EnvoyRLSConfig"), field.Ref("EnvoyRLSXDS.ServerAddr"))
	check(c.EnvoyRLSConfig != "" && c.EnvoyRLSXDS.Enabled(), "EnvoyRLSXDS.ServerAddr", "and %s are two sources of the same rules; set one",
		field.Ref("EnvoyRLSConfig"))
	check(c.EnvoyRLSWatchRoot != "" && !within(c.EnvoyRLSConfig, c.EnvoyRLSWatchRoot), "EnvoyRLSWatchRoot",
		"must be %s or one of its ancestors, got %q", field.Ref("EnvoyRLSConfig"), c.EnvoyRLSWatchRoot)
	check(c.Route.HoldTTL > c.Limiter.MaxReservationTTL, "Route.HoldTTL", "must be ≤ %s (%s), got %s: every hold would be refused",
		field.Ref("Limiter.MaxReservationTTL"), c.Limiter.MaxReservationTTL, c.Route.HoldTTL)
	check(c.Logger == nil, "Logger", "must not be nil")
	check(c.Now == nil, "Now", "must not be nil")
	for _, nested := range []struct {
		name string
		err  error
	}{
		{"Ring", c.Ring.Validate()}, {"Route", c.Route.Validate()}, {"HTTP", c.HTTP.Validate()}, {"Lease", c.Lease.Validate()},
		{"Peers", c.Peers.Validate()}, {"Limiter", c.limiterErr()}, {"Replication", c.Replication.Validate()},
		{"EnvoyRLS", c.EnvoyRLS.Validate()}, {"EnvoyRLSXDS", c.EnvoyRLSXDS.Validate()}, {"Tracing", c.Tracing.Validate()},
	} {
		if nested.err != nil {
			errs = append(errs, field.In(nested.name, nested.err))
		}
	}
	errs = append(errs, c.Security.validate(c)...)
	return errors.Join(errs...)
}

// within reports whether path is root or under it, both made absolute
// (an empty path is under nothing).
func within(path, root string) bool {
	if path == "" {
		return false
	}
	p, err1 := filepath.Abs(path)
	r, err2 := filepath.Abs(root)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(r, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// limiterErr validates Limiter for Partitions, once Partitions itself is
// valid (its error is reported on its own).
func (c Config) limiterErr() error {
	if c.Partitions < 1 {
		return nil
	}
	return c.Limiter.Validate(c.Partitions)
}
