package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/faultclock"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/security"
)

// options are the settings main needs beyond node.Config.
type options struct {
	node            node.Config
	shutdownTimeout time.Duration
	logLevel        slog.Level
	logFormat       string
	// faultClock makes the node's wall clock wrong on purpose
	// (jepsen-lite's clock scenarios); off by default.
	faultClock faultclock.Config
	// deprecated says, for each flag given that no longer does anything,
	// why: main logs it, so that an old configuration still starts.
	deprecated []string
	// fieldName says a field of node the way this command's user set it:
	// its path and its flag (fieldNames).
	fieldName func(path string) string
	// metricsAddr, if set, serves GET /metrics alone on an address of its
	// own (upstream's PROMETHEUS_ADDR).
	metricsAddr string
	// debugAddr, if set, serves envoyproxy/ratelimit's debug page (GET
	// /rlconfig) alone on an address of its own (its DEBUG_PORT).
	debugAddr string
}

// rawFlags holds the flags read as strings: they are converted into options
// only once the environment has had its turn, so that a value from either
// source is checked, and reported, the same way.
type rawFlags struct {
	join, gossipKey, gossipProfile string
	fallback, overflow             string
	clientAuth                     string
	logLevel                       string
	batchWait                      time.Duration // deprecated
}

// parseFlags reads args, then fills every flag not given on the command line
// from its PEERLIMIT_* environment twin (--grpc-addr ↔ PEERLIMIT_GRPC_ADDR).
// A flag beats the environment, which beats the default.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	o := options{node: node.DefaultConfig(), shutdownTimeout: 30 * time.Second, logFormat: "text"}
	var raw rawFlags
	fs := newFlagSet(stderr)
	defineClusterFlags(fs, &o.node, &raw)
	defineLimiterFlags(fs, &o.node, &raw)
	defineAPIFlags(fs, &o.node)
	defineProcessFlags(fs, &o, &raw)
	defineFaultFlags(fs, &o.faultClock)
	defineSecurityFlags(fs, &o.node.Security, &raw)
	defineTracingFlags(fs, &o.node.Tracing)

	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := fillFromEnv(fs, getenv); err != nil {
		return o, err
	}
	if err := raw.apply(&o, getenv); err != nil {
		return o, err
	}
	// Settings that contradict each other are usage errors, reported
	// before anything starts, each naming the flag.
	o.fieldName = fieldNames(fs, &o.node)
	if err := o.node.Validate(); err != nil {
		return o, field.Render(err, o.fieldName)
	}
	if err := o.faultClock.Validate(); err != nil {
		return o, field.Render(err, faultFlagNames)
	}
	// Shown in /metrics and /v1/members for as long as the node runs.
	o.node.Faults = o.faultClock.Kinds()
	return o, nil
}

// newFlagSet returns the empty flag set of peerlimit-node, with its usage.
func newFlagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("peerlimit-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: peerlimit-node [serve] [flags]\n\nRuns a node. Every flag can also be set by its environment variable\nPEERLIMIT_<NAME>, e.g. --grpc-addr as PEERLIMIT_GRPC_ADDR. A flag beats the\nenvironment. SIGTERM or SIGINT leaves gracefully; SIGHUP reloads --policies,\n--envoy-rls-config and the credential files. With --watch-config (default)\n--policies and --envoy-rls-config also reload by themselves when they change\non disk (a Kubernetes ConfigMap update included).\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nOther commands (peerlimit-node help): check, reserve, settle, release, refund, charge, acquire,\nmembers, ring, reset, top, inspect, healthcheck, ratelimit.\n")
	}
	return fs
}

// defineClusterFlags defines the node's identity, listen addresses, gossip,
// ring and forwarding flags.
func defineClusterFlags(fs *flag.FlagSet, c *node.Config, raw *rawFlags) {
	fs.StringVar(&c.ID, "id", c.ID, "node id, unique in the cluster (default: host name)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address")
	fs.StringVar(&c.GossipAddr, "gossip-addr", c.GossipAddr, "gossip listen address (TCP and UDP)")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", "", "gossip address other nodes should use, if not --gossip-addr (NAT, containers)")
	fs.StringVar(&raw.join, "join", "", "comma-separated gossip addresses (host:port) of any live members; a name resolving to several nodes is joined through all of them; empty starts a new cluster")
	fs.StringVar(&raw.gossipKey, "gossip-key", "", "base64 AES key (16, 24 or 32 bytes) encrypting gossip; the same on every node")
	fs.StringVar(&raw.gossipProfile, "gossip-profile", string(c.GossipProfile), "gossip timing: lan, or local (one host, tests)")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "partitions keys hash into: the ring's unit of ownership and the store's of locking and handoff; the same on every node")
	fs.IntVar(&c.Ring.ReplicationFactor, "ring-replication-factor", c.Ring.ReplicationFactor, "virtual points per member on the hash ring (more: evener shares); the same on every node")
	fs.Float64Var(&c.Ring.Load, "ring-load", c.Ring.Load, "a member owns at most this × the average partitions; the same on every node")
	fs.IntVar(&c.Peers.BatchLimit, "batch-limit", c.Peers.BatchLimit, "most forwarded checks per peer call; 1 turns batching off")
	fs.DurationVar(&raw.batchWait, "batch-wait", 0, "deprecated, ignored: a forwarded check goes at once on an idle link, else with the next batch (see --max-inflight-batches)")
	fs.IntVar(&c.Peers.MaxInflight, "max-inflight-batches", c.Peers.MaxInflight, "batches of forwarded checks out to one peer at once; while they are out, checks gather for the next")
	fs.DurationVar(&c.Peers.Timeout, "forward-timeout", c.Peers.Timeout, "deadline of a call to a peer; past it the owner counts as unreachable")
	fs.DurationVar(&c.Peers.KeepaliveTimeout, "peer-keepalive-timeout", c.Peers.KeepaliveTimeout, "a peer connection whose sent data or keepalive ping goes unacknowledged this long is closed and redialled: how long a dead link goes unnoticed")
	fs.DurationVar(&c.Peers.KeepaliveTime, "peer-keepalive-time", c.Peers.KeepaliveTime, "an idle peer connection is pinged after this long (≥ 10s, grpc-go's minimum)")
	fs.StringVar(&raw.fallback, "fallback", c.Route.Fallback.String(), "when a key's owner is unreachable and neither a relay nor its heir answers: local (decide here), allow, deny, or share (decide here against this node's share of the limit, and hold every key to live ÷ known members while members have failed); answers are marked degraded")
	fs.DurationVar(&c.ShareFor, "share-for", c.ShareFor, "with --fallback share: how long a failed member still counts among the members sharing each limit")
	fs.DurationVar(&c.HandoffInterval, "handoff-interval", c.HandoffInterval, "how often state this node holds but does not own is sent to its owner")
	fs.DurationVar(&c.Route.SettleWait, "settle-wait", c.Route.SettleWait, "how long a check of a key whose partition has just come to this node (a join, a restart, a healed partition) waits for its state from the other members before it is decided from what is here, degraded; 0: never waits")
	fs.IntVar(&c.Replication.Factor, "replication-factor", c.Replication.Factor, "backups of each partition's counts, kept on the member that inherits it if its owner crashes: 0 (off) or 1")
	fs.DurationVar(&c.Replication.Interval, "replication-interval", c.Replication.Interval, "how often an owner sends its partitions' changes to their backups: what a crash can lose")
	fs.IntVar(&c.Replication.MaxKeys, "replica-max-keys", c.Replication.MaxKeys, "cap on the key states this node keeps as other members' backup")
	fs.StringVar(&c.Persist.Dir, "data-dir", c.Persist.Dir, "directory (one node's, existing) where this node keeps its counts and the replicas it holds, restored at start: a restart of the whole cluster forgets nothing; empty: memory only")
	fs.DurationVar(&c.Persist.SyncInterval, "persist-interval", c.Persist.SyncInterval, "with --data-dir: how often what was written is synced to disk, the most a power loss loses (a killed process loses at most two --replication-interval rounds: a hit counted just after a round's take waits a full interval for the next round's write)")
	fs.DurationVar(&c.Persist.SnapshotInterval, "snapshot-interval", c.Persist.SnapshotInterval, "with --data-dir: how often every count is written to a new snapshot and the log before it deleted")
	fs.StringVar(&c.ClusterName, "cluster-name", c.ClusterName, "the cluster's name, kept in the data directory: a node refuses a --data-dir of another cluster")
}

// defineLimiterFlags defines the caps of this node's store and how it frees
// expired keys.
func defineLimiterFlags(fs *flag.FlagSet, c *node.Config, raw *rawFlags) {
	lc := &c.Limiter
	fs.IntVar(&lc.MaxKeys, "max-keys", lc.MaxKeys, "cap on keys held by this node")
	fs.StringVar(&raw.overflow, "overflow", lc.Overflow.String(), "when --max-keys or --max-log-entries is reached: evict (the soonest-expiring sampled key) or reject (the request, RESOURCE_EXHAUSTED)")
	fs.IntVar(&lc.MaxKeyBytes, "max-key-bytes", lc.MaxKeyBytes, "longest key accepted, in bytes")
	fs.DurationVar(&lc.MaxWindow, "max-window", lc.MaxWindow, "longest window accepted")
	fs.Int64Var(&lc.MaxLogLimit, "max-log-limit", lc.MaxLogLimit, "highest limit accepted for SLIDING_WINDOW_LOG")
	fs.DurationVar(&lc.ReservationTTL, "reservation-ttl", lc.ReservationTTL, "how long a reservation (RESERVE) lasts unsettled when its request names no ttl_ms; unsettled, it counts as used")
	fs.DurationVar(&lc.MaxReservationTTL, "max-reservation-ttl", lc.MaxReservationTTL, "the longest ttl_ms a reservation may ask for")
	fs.IntVar(&lc.MaxReservations, "max-reservations", lc.MaxReservations, "cap on the reservations this node remembers as their owner, open or settled until their expiry (about 150 bytes each); past it RESERVE is refused with RESOURCE_EXHAUSTED; 0 turns reservations off")
	fs.DurationVar(&c.Route.HoldTTL, "hold-ttl", c.Route.HoldTTL, "how long an all-or-nothing batch holds each limit while it asks the others; a hold whose coordinator died gives its hits back after it")
	fs.Int64Var(&lc.MaxLogEntries, "max-log-entries", lc.MaxLogEntries, "cap on the entries (4 bytes each, room to grow included) all SLIDING_WINDOW_LOG keys of this node allocate; when reached, --overflow applies; at least --partitions × --max-log-limit")
	fs.IntVar(&lc.HotKeys, "hot-keys", lc.HotKeys, "keys each partition's hot-key summaries monitor (the console's and `top`'s lists; Space-Saving); 0 turns them off; at most 64")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", c.SweepInterval, "how often expired keys are freed")
}

// defineAPIFlags defines the bounds and the optional features of the gRPC
// and HTTP APIs.
func defineAPIFlags(fs *flag.FlagSet, c *node.Config) {
	fs.DurationVar(&c.Lease.Duration, "lease-duration", c.Lease.Duration, "the shortest budget lease, a hot key's: a node forwarding a key often admits part of its limit, lent by the owner, without a hop, for about --lease-min-hits checks at the key's rate, within [--lease-duration, --lease-max-duration]; 0 turns leases off")
	fs.DurationVar(&c.Lease.MaxDuration, "lease-max-duration", c.Lease.MaxDuration, "the longest budget lease, a warm key's, asked for and granted; a key forwarded at fewer than --lease-min-hits per --lease-max-duration is never leased; in [--lease-duration, 30s]")
	fs.IntVar(&c.Lease.MinHits, "lease-min-hits", c.Lease.MinHits, "checks a budget lease should cover to be worth its call: a key's lease lasts as long as that many take at its rate from this node")
	fs.IntVar(&c.Lease.MinRate, "lease-min-rate", c.Lease.MinRate, "checks per second of one key, forwarded by this node, under which it never asks the owner for a lease, on top of --lease-min-hits ÷ --lease-max-duration (1 leaves that to decide; 200 with --lease-max-duration = --lease-duration leases hot keys only, as before warm keys were)")
	fs.IntVar(&c.Route.MaxBatch, "max-batch", c.Route.MaxBatch, "most checks in one batch call")
	fs.IntVar(&c.MaxRecvMsgBytes, "max-grpc-msg-bytes", c.MaxRecvMsgBytes, "largest gRPC request, in bytes")
	fs.Int64Var(&c.HTTP.MaxBodyBytes, "max-body-bytes", c.HTTP.MaxBodyBytes, "largest HTTP request body, in bytes")
	fs.IntVar(&c.Route.MaxInflightForwards, "max-inflight-forwards", c.Route.MaxInflightForwards, "cap on the checks this node has forwarded and still waits on; over it a check is refused with RESOURCE_EXHAUSTED (HTTP 429)")
	fs.StringVar(&c.PoliciesFile, "policies", c.PoliciesFile, "YAML or JSON file of named policies that requests may name instead of limit, window and algorithm; reloaded on SIGHUP, and when it changes with --watch-config; the same on every node")
	fs.StringVar(&c.EnvoyRLSConfig, "envoy-rls-config", c.EnvoyRLSConfig, "YAML file, or a directory of them read as upstream reads it (every file not starting with a dot, at any depth; empty: no limits), in envoyproxy/ratelimit's format: serves Envoy's rate limit service (envoy.service.ratelimit.v3) on the gRPC address; reloaded on SIGHUP, and when it changes with --watch-config; the same on every node")
	fs.BoolVar(&c.WatchConfig, "watch-config", c.WatchConfig, "reload --policies and --envoy-rls-config when they change on disk: edited, replaced by rename, or updated as a Kubernetes ConfigMap (a directory is watched for any change of its entries, hidden ones included); a bad file keeps the configuration in force and is reported in /healthz and peerlimit_config_reload_failing")
	fs.StringVar(&c.EnvoyRLSWatchRoot, "envoy-rls-watch-root", c.EnvoyRLSWatchRoot, "with --watch-config: a symlink, --envoy-rls-config or one of its ancestors, swapped atomically to publish a new version; only its swaps reload --envoy-rls-config (envoyproxy/ratelimit's RUNTIME_WATCH_ROOT=true with RUNTIME_ROOT); empty: watch --envoy-rls-config itself")
	defineEnvoyRLSFlags(fs, &c.EnvoyRLS)
	defineXDSFlags(fs, &c.EnvoyRLSXDS, &c.EnvoyRLSAwaitConfig, &c.EnvoyRLSHealthyNeedsDomains)
	fs.Var((*listFlag)(&c.HTTP.AllowedOrigins), "allowed-origins", "comma-separated web origins (scheme://host[:port]) whose pages may call the HTTP API from a browser, with CORS headers for them; empty (the default): a browser's cross-site POST is refused 403 and no answer carries CORS headers (curl and servers, which send no Origin, are unaffected)")
	fs.BoolVar(&c.HTTP.Pprof, "pprof", c.HTTP.Pprof, "serve Go's profiles on the HTTP address under /debug/pprof/ (keep that address private)")
}

// defineEnvoyRLSFlags defines the settings of Envoy's rate limit service,
// each upstream setting it mirrors named.
func defineEnvoyRLSFlags(fs *flag.FlagSet, s *envoyrls.Config) {
	fs.BoolVar(&s.Headers, "envoy-rls-headers", s.Headers, "the rate limit service's answers carry the IETF RateLimit-Policy and RateLimit headers (and Retry-After when over the limit) for Envoy to add")
	fs.BoolVar(&s.MergeDomains, "envoy-rls-merge-domains", s.MergeDomains, "several files may define one domain, each adding its top-level descriptors (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	fs.BoolVar(&s.ResponseMetadata, "envoy-rls-response-metadata", s.ResponseMetadata, "answers carry dynamic metadata: the domain, the descriptors and the merged metadata of those that passed (RESPONSE_DYNAMIC_METADATA)")
	fs.BoolVar(&s.ShadowMode, "envoy-rls-shadow-mode", s.ShadowMode, "every answer is OK; descriptors over their limit still say OVER_LIMIT and are counted (SHADOW_MODE)")
	fs.BoolVar(&s.QuotaMode, "envoy-rls-quota-mode", s.QuotaMode, "every descriptor is in quota mode: an answer is OVER_LIMIT only when all are over (QUOTA_MODE)")
	fs.Float64Var(&s.NearLimitRatio, "envoy-rls-near-limit-ratio", s.NearLimitRatio, "hits above floor(limit × ratio) count in ratelimit_service_rate_limit_near_limit (NEAR_LIMIT_RATIO), in (0, 1]")
	fs.IntVar(&s.MaxStatsKeys, "envoy-rls-max-stats-keys", s.MaxStatsKeys, "most ratelimit_service_rate_limit_* keys made from request values (detailed_metric, value_to_metric, a request's own limit) over the node's life; past it they count under the rule's configured key")
	fs.BoolVar(&s.ResponseTimeMilliseconds, "envoy-rls-response-time-milliseconds", s.ResponseTimeMilliseconds, "ratelimit_service_response_time_seconds in milliseconds, bucket bounds included, under the same name (envoyproxy/ratelimit's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS)")
}

// defineProcessFlags defines the settings of the process rather than of the
// node: shutdown and logging.
func defineProcessFlags(fs *flag.FlagSet, o *options, raw *rawFlags) {
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", o.shutdownTimeout, "how long a graceful shutdown may take before calls are cut")
	fs.StringVar(&raw.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "text, json, or json-ratelimit: JSON with envoyproxy/ratelimit's keys (@timestamp, @message, logrus's level names), its LOG_FORMAT=json")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "also serve GET /metrics alone, without authentication, on this address (envoyproxy/ratelimit's PROMETHEUS_ADDR); empty: only on --http-addr")
	fs.StringVar(&o.debugAddr, "debug-addr", "", "serve envoyproxy/ratelimit's debug page, GET /rlconfig (the Envoy rules in force, as text), alone, without authentication, on this address (its DEBUG_HOST:DEBUG_PORT); empty: only at GET /v1/envoy-rls/config?format=text on --http-addr")
}

// defineFaultFlags defines the fault-injection flags: a node started with
// any of them is wrong on purpose, and says so in its log.
func defineFaultFlags(fs *flag.FlagSet, c *faultclock.Config) {
	fs.DurationVar(&c.Offset, "fault-clock-offset", 0, "FAULT INJECTION ONLY: add this to the node's wall clock (e.g. -2s)")
	fs.Float64Var(&c.Drift, "fault-clock-drift", 0, "FAULT INJECTION ONLY: make the node's wall clock run this much fast (0.01) or slow (-0.01)")
	fs.DurationVar(&c.Step, "fault-clock-step", 0, "FAULT INJECTION ONLY: step the node's wall clock by this once --fault-clock-step-after has passed")
	fs.DurationVar(&c.StepAfter, "fault-clock-step-after", 0, "FAULT INJECTION ONLY: when, after start, --fault-clock-step happens")
}

// faultFlagNames says a faultclock.Config field as its flag.
func faultFlagNames(path string) string {
	flags := map[string]string{"Offset": "offset", "Drift": "drift", "Step": "step", "StepAfter": "step-after"}
	return "--fault-clock-" + flags[path]
}

// defineSecurityFlags defines the TLS, mutual TLS and authentication flags
// (docs/security.md).
func defineSecurityFlags(fs *flag.FlagSet, sc *security.Config, raw *rawFlags) {
	// Secrets come from files, or from PEERLIMIT_API_TOKEN and
	// PEERLIMIT_CLUSTER_SECRET, never from a flag value that ps shows.
	fs.StringVar(&sc.TLSCertFile, "tls-cert-file", "", "PEM server certificate of the gRPC and HTTP APIs; with it both speak only TLS (needs --peer-tls-ca-file)")
	fs.StringVar(&sc.TLSKeyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	fs.StringVar(&sc.ClientCAFile, "tls-client-ca-file", "", "PEM CA verifying client certificates of the public APIs")
	fs.StringVar(&raw.clientAuth, "tls-client-auth", "optional", "optional (verify a client certificate if one is presented) or require (RateLimiter calls and /v1/* need one)")
	fs.BoolVar(&sc.HTTPPlaintext, "http-plaintext", false, "with --tls-cert-file, keep the HTTP API plaintext: TLS then secures the gRPC port alone, as envoyproxy/ratelimit's GRPC_SERVER_USE_TLS does")
	fs.StringVar(&sc.PeerCAFile, "peer-tls-ca-file", "", "PEM CA of peer certificates: verifies the peers this node dials and the callers of the Peer service")
	fs.StringVar(&sc.PeerCertFile, "peer-tls-cert-file", "", "PEM certificate presented to peers (default: --tls-cert-file); needs the DNS name --peer-tls-server-name and both TLS usages")
	fs.StringVar(&sc.PeerKeyFile, "peer-tls-key-file", "", "PEM key of --peer-tls-cert-file")
	fs.StringVar(&sc.PeerServerName, "peer-tls-server-name", sc.PeerServerName, "DNS name every peer certificate carries")
	fs.StringVar(&sc.ClusterSecretFile, "cluster-secret-file", "", "cluster secrets authenticating node-to-node calls, one per line (16+ bytes; the first signs, all are accepted); or PEERLIMIT_CLUSTER_SECRET")
	fs.DurationVar(&sc.PeerGrace, "peer-grace", sc.PeerGrace, "how long a member that left or failed may still forward and hand off")
	fs.BoolVar(&sc.OpenPeers, "insecure-open-peers", false, "INSECURE: serve node-to-node (Peer) calls to anyone who reaches --grpc-addr, without a cluster secret or peer TLS "+
		"(beyond loopback a node needs one of the three); logged as a warning")
	fs.StringVar(&sc.APITokenFile, "api-token-file", "", "bearer tokens of the public APIs, one per line (16+ bytes; any is accepted), each optionally followed by its scopes "+
		"(check,reserve,refund,charge,reset,inspect, or application = check,reserve, operator = refund,charge,reset,inspect; none: every scope); "+
		"or PEERLIMIT_API_TOKEN (every scope)")
	fs.BoolVar(&sc.AuthMetrics, "auth-metrics", false, "GET /metrics needs the public API's credentials too")
	fs.StringVar(&sc.GossipKeyringFile, "gossip-keyring-file", "", "base64 gossip keys, one per line, the first encrypting; SIGHUP re-reads it (key rotation). Instead of --gossip-key")
}

// fillFromEnv sets every flag not given on the command line from its
// PEERLIMIT_* twin, if that is set. The first value a flag rejects is the
// error.
func fillFromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	return envErr
}

// apply converts the string flags into o, and adds the secrets that come
// only from the environment. The first unusable value is the error.
func (r rawFlags) apply(o *options, getenv func(string) string) error {
	if err := r.applyPolicies(&o.node); err != nil {
		return err
	}
	if err := r.applyLog(o); err != nil {
		return err
	}
	o.node.Join = splitJoin(r.join)
	if err := r.applySecurity(&o.node.Security); err != nil {
		return err
	}
	applyEnvSecrets(&o.node.Security, getenv)
	if r.batchWait != 0 {
		o.deprecated = append(o.deprecated, "--batch-wait is ignored: a forwarded check goes at once on an idle link, "+
			"else with the next batch as soon as one is answered (--max-inflight-batches)")
	}
	return nil
}

// applyPolicies converts --overflow, --fallback, --gossip-profile and
// --gossip-key.
func (r rawFlags) applyPolicies(c *node.Config) error {
	var err error
	if c.Limiter.Overflow, err = limiter.ParseOverflowPolicy(r.overflow); err != nil {
		return fmt.Errorf("--overflow: %w", err)
	}
	if c.Route.Fallback, err = route.ParseFallbackPolicy(r.fallback); err != nil {
		return fmt.Errorf("--fallback: %w", err)
	}
	switch p := cluster.Profile(r.gossipProfile); p {
	case cluster.ProfileLAN, cluster.ProfileLocal:
		c.GossipProfile = p
	default:
		return fmt.Errorf("--gossip-profile: want lan or local, got %q", r.gossipProfile)
	}
	if r.gossipKey != "" {
		if c.GossipKey, err = security.ParseGossipKey(r.gossipKey); err != nil {
			return fmt.Errorf("--gossip-key: %w", err)
		}
	}
	return nil
}

// applyLog converts --log-level and checks --log-format.
func (r rawFlags) applyLog(o *options) error {
	if err := o.logLevel.UnmarshalText([]byte(r.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	if o.logFormat != "text" && o.logFormat != "json" && o.logFormat != "json-ratelimit" {
		return fmt.Errorf("--log-format: want text, json or json-ratelimit, got %q", o.logFormat)
	}
	return nil
}

// splitJoin turns --join into seeds, dropping blanks so that "" and a
// trailing comma mean no seed rather than an empty address.
func splitJoin(join string) []string {
	var seeds []string
	for _, s := range strings.Split(join, ",") {
		if s = strings.TrimSpace(s); s != "" {
			seeds = append(seeds, s)
		}
	}
	return seeds
}

// listFlag is a list set from comma-separated values, blanks dropped.
type listFlag []string

func (f *listFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(*f, ",")
}

func (f *listFlag) Set(s string) error {
	*f = splitJoin(s)
	return nil
}

// applySecurity converts --tls-client-auth.
func (r rawFlags) applySecurity(sc *security.Config) error {
	switch r.clientAuth {
	case "optional":
	case "require":
		sc.RequireClientCert = true
	default:
		return fmt.Errorf("--tls-client-auth: want optional or require, got %q", r.clientAuth)
	}
	return nil
}

// applyEnvSecrets takes the secrets that have no flag, so that ps never
// shows them.
func applyEnvSecrets(sc *security.Config, getenv func(string) string) {
	if tok := getenv("PEERLIMIT_API_TOKEN"); tok != "" {
		sc.APITokens = []string{tok}
	}
	if secret := getenv("PEERLIMIT_CLUSTER_SECRET"); secret != "" {
		sc.ClusterSecrets = [][]byte{[]byte(secret)}
	}
}

func envName(flagName string) string {
	return "PEERLIMIT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
