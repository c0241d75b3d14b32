package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Profile picks memberlist's timing.
type Profile string

const (
	// ProfileLAN detects a failed node in ~1–3 s on a LAN: memberlist's LAN
	// defaults with a faster probe and gossip, and short TCP timeouts so a
	// silent peer (a DROP rule, a paused process) does not stall joins.
	ProfileLAN Profile = "lan"
	// ProfileLocal is faster still, for tests and single-host clusters:
	// failures in well under a second, dead members forgotten after 5 s.
	ProfileLocal Profile = "local"
)

// Config holds a member's settings. Start from DefaultConfig; as with
// client.Config, a zero timing means the profile's default (withDefaults),
// because the node fills this one by hand from its own.
type Config struct {
	// ID is the member's unique name. A node that restarts with the same ID
	// takes its old place.
	ID string
	// BindAddr is the gossip listen address, host:port (TCP and UDP). Port
	// 0 picks a free port.
	BindAddr string
	// AdvertiseAddr is the gossip address others should use, if it differs
	// from BindAddr (NAT, containers). Optional.
	AdvertiseAddr string
	// GRPCAddr is this node's gRPC address, advertised to the others in the
	// member's metadata. An unspecified host (":9090", "0.0.0.0:9090") is
	// replaced by the gossip address's host.
	GRPCAddr string
	// Join lists seeds: gossip addresses of any live members, host:port
	// (a missing port means this member's own gossip port). A host name
	// may resolve to several addresses (a compose service scaled to N, a
	// Kubernetes headless Service): every address is tried, except this
	// member's own, and the name is resolved again on every retry, since a
	// restarted pod comes back with a new IP. Unreachable or unresolvable
	// seeds are not an error: the reconnector keeps trying them while this
	// member is alone.
	Join []string
	// Resolver turns seed host names into addresses. Default
	// net.DefaultResolver; tests map names to loopback addresses.
	Resolver Resolver
	// SecretKey, when set, encrypts gossip with AES (16, 24 or 32 bytes).
	// Every member must have the same key.
	SecretKey []byte
	// Keys, instead of SecretKey, is a keyring: the first key encrypts,
	// every key decrypts, and Cluster.SetKeys changes them while running
	// (rotation). Each is 16, 24 or 32 bytes.
	Keys [][]byte
	// Profile selects memberlist's timing. Default ProfileLAN.
	Profile Profile
	// ReconnectInterval is how often the reconnector tries to rejoin
	// members that failed and, while alone, the seeds. This is what heals
	// a partition that outlasted memberlist's GossipToTheDeadTime, as
	// Serf's reconnector does. Default 2 s (LAN), 500 ms (local).
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is retried. Default 24 h.
	ReconnectTimeout time.Duration
	// SeedRefreshInterval is how often a member that is not alone resolves
	// its seed host names again and joins the addresses it does not know
	// (neither a member, nor failed, nor left). This merges groups that
	// formed apart while the names' answers were incomplete (members
	// starting together, cached DNS answers); seeds given as IPs are
	// retried only while alone. Default 30 s (LAN), 5 s (local).
	SeedRefreshInterval time.Duration
	// ConfirmTimeout is how long a member that memberlist declared dead
	// waits for the others to say whether they reach it before it decides
	// (agreement.go): what agreement adds to failure detection. Default
	// 2 s (LAN), 1 s (local).
	ConfirmTimeout time.Duration
	// ConfirmInterval is how often a member kept in the ring because
	// another reaches it, or one gone unconfirmed, is asked about again.
	// Default 2 s (LAN), 1 s (local).
	ConfirmInterval time.Duration
	// ConfigDigests are the digests of the configurations this member
	// serves, by source, advertised from its first message on; later
	// changes go through Cluster.SetConfigDigests. At most
	// MaxConfigSources, names and digests short (validateConfigDigests):
	// they share memberlist's 512-byte metadata with the gRPC address.
	ConfigDigests map[string]string
	// FaultInjection says, in this member's metadata, that it runs with a
	// fault injected on purpose (a wrong clock, an open peer port), for
	// every member to show (Member.FaultInjection): a member serving real
	// traffic so is seen from any node. A bool, not the faults' names:
	// the metadata has no room for them (the node's own /metrics names
	// them).
	FaultInjection bool
	// Restored says, in this member's metadata, that it restored its
	// counts from its disk at this start (Member.Restored): its heirs
	// then know it holds what they promoted from its replicas.
	Restored bool
	// Boot names this process in the metadata (Member.Boot). Empty: one
	// drawn at Start (NewBoot). The node draws it earlier, for its
	// replicas to say too (replica.Deps.Boot).
	Boot string
	// Network, if set, carries the gossip in memory instead of over UDP
	// and TCP (BindAddr and AdvertiseAddr unused): the simulation's.
	Network *MemNetwork
	// Logger receives membership events and memberlist's own logs.
	Logger *slog.Logger
	// OnChange receives the membership after every change: every member
	// this node knows (View: live ones, the ring's, and those failed or
	// left, with their states). It is called from one goroutine, never
	// concurrently, with the full set (changes that arrive together are
	// coalesced into one call), so it may take its time; it must not call
	// Leave or Shutdown.
	OnChange func([]Member)
}

// Resolver looks up a host's addresses; *net.Resolver is one. It must be
// safe for concurrent use.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{BindAddr: ":7946", Profile: ProfileLAN, ReconnectTimeout: 24 * time.Hour, Logger: slog.Default(),
		Resolver: net.DefaultResolver}
}

// withDefaults returns c with every zero field set to its default: the
// timings' depend on the profile, so a zero one means "the profile's".
// A negative one stays, for Validate to refuse.
func (c Config) withDefaults() Config {
	if c.Profile == "" {
		c.Profile = ProfileLAN
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = 2 * time.Second
		if c.Profile == ProfileLocal {
			c.ReconnectInterval = 500 * time.Millisecond
		}
	}
	if c.ReconnectTimeout == 0 {
		c.ReconnectTimeout = 24 * time.Hour
	}
	confirm := 2 * time.Second
	if c.Profile == ProfileLocal {
		confirm = time.Second
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = confirm
	}
	if c.ConfirmInterval == 0 {
		c.ConfirmInterval = confirm
	}
	if c.SeedRefreshInterval == 0 {
		c.SeedRefreshInterval = 30 * time.Second
		if c.Profile == ProfileLocal {
			c.SeedRefreshInterval = 5 * time.Second
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return c
}

// Validate reports every unusable field.
func (c Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("ID must not be empty"))
	}
	if c.BindAddr == "" && c.Network == nil {
		errs = append(errs, errors.New("BindAddr must be set"))
	}
	if c.GRPCAddr == "" {
		errs = append(errs, errors.New("GRPCAddr must be set"))
	}
	if len(c.GRPCAddr) > maxGRPCAddrLen {
		errs = append(errs, fmt.Errorf("GRPCAddr must be at most %d bytes (a host name and a port), got %d", maxGRPCAddrLen, len(c.GRPCAddr)))
	}
	if err := validateConfigDigests(c.ConfigDigests); err != nil {
		errs = append(errs, fmt.Errorf("ConfigDigests: %w", err))
	}
	if n := len(c.SecretKey); n != 0 && !validKeyLen(n) {
		errs = append(errs, fmt.Errorf("SecretKey must be 16, 24 or 32 bytes, got %d", n))
	}
	if len(c.SecretKey) > 0 && len(c.Keys) > 0 {
		errs = append(errs, errors.New("set SecretKey or Keys, not both"))
	}
	for i, k := range c.Keys {
		if n := len(k); !validKeyLen(n) {
			errs = append(errs, fmt.Errorf("Keys[%d] must be 16, 24 or 32 bytes, got %d", i, n))
		}
	}
	if c.Profile != ProfileLAN && c.Profile != ProfileLocal {
		errs = append(errs, fmt.Errorf("unknown Profile %q; want lan or local", c.Profile))
	}
	for _, seed := range c.Join {
		if _, _, err := splitSeed(seed); err != nil {
			errs = append(errs, fmt.Errorf("Join: %w", err))
		}
	}
	if c.ReconnectInterval <= 0 || c.ReconnectTimeout <= 0 || c.SeedRefreshInterval <= 0 {
		errs = append(errs, errors.New("ReconnectInterval, ReconnectTimeout and SeedRefreshInterval must be positive"))
	}
	if c.ConfirmTimeout <= 0 || c.ConfirmInterval <= 0 {
		errs = append(errs, errors.New("ConfirmTimeout and ConfirmInterval must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster config: %w", err)
	}
	return nil
}
