package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/wallclock"
	"github.com/peerlimit/peerlimit/lease"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peerrpc"
	"github.com/peerlimit/peerlimit/persist"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/security"
	"github.com/peerlimit/peerlimit/tracing"
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
	// Lease is budget leases for hot and warm keys: how long one lasts
	// (0: off), at most, how many checks it should cover, and the rate
	// from which a node asks for one.
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
	// Persist keeps this node's counts, and the replicas it holds, on its
	// disk (package persist), restored at start: a restart of the whole
	// cluster forgets nothing. Off while Persist.Dir is empty.
	Persist persist.Config
	// ClusterName names the cluster, in the data directory's manifest: a
	// node refuses a directory of another cluster. Optional.
	ClusterName string
	// MaxRecvMsgBytes caps a gRPC request. Default 4 MiB.
	MaxRecvMsgBytes int
	// SweepInterval is how often expired keys are freed. Decisions never
	// depend on it; it only bounds how long dead keys hold memory.
	// Default 10s.
	SweepInterval time.Duration

	// Config is where the policies and the Envoy rate limit service's
	// rules come from, and how they reload (package configs): its fields
	// are the node's own (PoliciesFile, EnvoyRLSConfig, WatchConfig,
	// EnvoyRLSWatchRoot, EnvoyRLSXDS, EnvoyRLSAwaitConfig,
	// EnvoyRLSHealthyNeedsDomains, EnvoyRLS), each documented there.
	configs.Config
	// HTTP is the HTTP API's settings: the largest body, Go's profiles
	// (off by default: they reveal internals, and a CPU profile costs
	// CPU). Its AuthMetrics is Security.AuthMetrics.
	HTTP httpapi.Config
	// Security is TLS, mutual TLS and authentication (package security);
	// off by default, except that a GRPCAddr beyond loopback needs peer
	// authentication or Security.OpenPeers (protected mode, security.go).
	Security security.Config
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
	// Faults names the faults injected into this node on purpose, e.g.
	// faultclock.Config.Kinds of a wrong clock given as Now: fault
	// injection only. While the node runs it shows them, with
	// insecure_open_peers when Security.OpenPeers is set, as
	// peerlimit_fault_injection_active{kind} and in /v1/members
	// (fault_injection; every member's own flag, by gossip), so that a
	// node serving real traffic so is seen, not only read once in its
	// start log. Short names of [a-z_]. Empty by default.
	Faults []string
}

// DefaultConfig returns production defaults. They listen on every
// interface, so they validate only once peers authenticate (a cluster
// secret or mutual TLS) or Security.OpenPeers says they need not.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		ID:              host,
		GRPCAddr:        ":9090",
		HTTPAddr:        ":8080",
		GossipAddr:      ":7946",
		GossipProfile:   cluster.ProfileLAN,
		Partitions:      partition.DefaultCount,
		Ring:            ring.DefaultConfig(),
		Route:           route.DefaultConfig(),
		Lease:           lease.DefaultConfig(),
		Peers:           peerrpc.DefaultConfig(),
		HandoffInterval: 5 * time.Second,
		Limiter:         limiter.DefaultConfig(),
		Persist:         persist.DefaultConfig(),
		Replication:     replica.DefaultConfig(),
		ShareFor:        5 * time.Minute,
		MaxRecvMsgBytes: 4 << 20,
		HTTP:            httpapi.DefaultConfig(),
		SweepInterval:   10 * time.Second,
		Config:          configs.DefaultConfig(),
		Security:        security.DefaultConfig(),
		Tracing:         tracing.DefaultConfig(),
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Now:             wallclock.Steady(wallclock.System(), wallclock.DefaultMaxSlew),
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
	if err := c.Config.Validate(); err != nil { // embedded: its fields are named as the node's
		errs = append(errs, err)
	}
	check(c.Route.HoldTTL > c.Limiter.MaxReservationTTL, "Route.HoldTTL", "must be ≤ %s (%s), got %s: every hold would be refused",
		field.Ref("Limiter.MaxReservationTTL"), c.Limiter.MaxReservationTTL, c.Route.HoldTTL)
	check(c.Logger == nil, "Logger", "must not be nil")
	check(c.Now == nil, "Now", "must not be nil")
	check(len(c.Faults) > maxFaults, "Faults", "holds %d names; at most %d", len(c.Faults), maxFaults)
	for i, f := range c.Faults {
		check(!validFaultName(f), fmt.Sprintf("Faults[%d]", i), "must be 1 to 32 bytes of [a-z_], got %q", f)
	}
	for _, nested := range []struct {
		name string
		err  error
	}{
		{"Ring", c.Ring.Validate()}, {"Route", c.Route.Validate()}, {"HTTP", c.HTTP.Validate()}, {"Lease", c.Lease.Validate()},
		{"Peers", c.Peers.Validate()}, {"Limiter", c.limiterErr()}, {"Replication", c.Replication.Validate()},
		{"Tracing", c.Tracing.Validate()}, {"Security", c.Security.Validate()}, {"Persist", c.persistErr()},
	} {
		if nested.err != nil {
			errs = append(errs, field.In(nested.name, nested.err))
		}
	}
	errs = append(errs, c.securityErrs()...)
	return errors.Join(errs...)
}

// limiterErr validates Limiter for Partitions, once Partitions itself is
// valid (its error is reported on its own).
// persistErr validates Persist when it is on.
func (c Config) persistErr() error {
	if c.Persist.Dir == "" {
		return nil
	}
	return c.Persist.Validate()
}

func (c Config) limiterErr() error {
	if c.Partitions < 1 {
		return nil
	}
	return c.Limiter.Validate(c.Partitions)
}
