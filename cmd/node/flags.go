package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/rpc"
	"github.com/peerlimit/peerlimit/security"
)

// options are the settings main needs beyond node.Config.
type options struct {
	node            node.Config
	shutdownTimeout time.Duration
	logLevel        slog.Level
	logFormat       string
}

// parseFlags reads args, then fills every flag not given on the command line
// from its PEERLIMIT_* environment twin (--grpc-addr ↔ PEERLIMIT_GRPC_ADDR).
// A flag beats the environment, which beats the default.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	o := options{node: node.DefaultConfig(), shutdownTimeout: 30 * time.Second, logFormat: "text"}
	c := &o.node
	fs := flag.NewFlagSet("peerlimit-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: peerlimit-node [serve] [flags]\n\nRuns a node. Every flag can also be set by its environment variable\nPEERLIMIT_<NAME>, e.g. --grpc-addr as PEERLIMIT_GRPC_ADDR. A flag beats the\nenvironment. SIGTERM or SIGINT leaves gracefully; SIGHUP reloads --policies,\n--envoy-rls-config and the credential files.\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nOther commands (peerlimit-node help): check, members, ring, reset, healthcheck.\n")
	}

	fs.StringVar(&c.ID, "id", c.ID, "node id, unique in the cluster (default: host name)")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address")
	fs.StringVar(&c.GossipAddr, "gossip-addr", c.GossipAddr, "gossip listen address (TCP and UDP)")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", "", "gossip address other nodes should use, if not --gossip-addr (NAT, containers)")
	join := fs.String("join", "", "comma-separated gossip addresses (host:port) of any live members; a name resolving to several nodes is joined through all of them; empty starts a new cluster")
	gossipKey := fs.String("gossip-key", "", "base64 AES key (16, 24 or 32 bytes) encrypting gossip; the same on every node")
	profile := fs.String("gossip-profile", string(c.GossipProfile), "gossip timing: lan, or local (one host, tests)")
	partitions := fs.Int("partitions", c.Ring.PartitionCount, "ring partitions = store shards; the same on every node")
	fs.IntVar(&c.Ring.ReplicationFactor, "ring-replication-factor", c.Ring.ReplicationFactor, "virtual points per member on the hash ring (more: evener shares); the same on every node")
	fs.Float64Var(&c.Ring.Load, "ring-load", c.Ring.Load, "a member owns at most this × the average partitions; the same on every node")
	fs.IntVar(&c.Peers.BatchLimit, "batch-limit", c.Peers.BatchLimit, "most forwarded checks per peer call; 1 turns batching off")
	fs.DurationVar(&c.Peers.BatchWait, "batch-wait", c.Peers.BatchWait, "how long a forwarded check waits to share a call while others to the same peer are in flight")
	fs.IntVar(&c.Peers.MaxInflight, "max-inflight-batches", c.Peers.MaxInflight, "concurrent batched calls per peer")
	fs.DurationVar(&c.Peers.Timeout, "forward-timeout", c.Peers.Timeout, "deadline of a call to a peer; past it the owner counts as unreachable")
	fallback := fs.String("fallback", c.Fallback.String(), "when a key's owner is unreachable: local (decide here), allow or deny; answers are marked degraded")
	fs.DurationVar(&c.HandoffInterval, "handoff-interval", c.HandoffInterval, "how often state this node holds but does not own is sent to its owner")

	lc := &c.Limiter
	fs.IntVar(&lc.MaxKeys, "max-keys", lc.MaxKeys, "cap on keys held by this node")
	overflow := fs.String("overflow", lc.Overflow.String(), "when --max-keys or --max-log-entries is reached: evict (the soonest-expiring sampled key) or reject (the request, RESOURCE_EXHAUSTED)")
	fs.IntVar(&lc.MaxKeyBytes, "max-key-bytes", lc.MaxKeyBytes, "longest key accepted, in bytes")
	fs.DurationVar(&lc.MaxWindow, "max-window", lc.MaxWindow, "longest window accepted")
	fs.Int64Var(&lc.MaxLogLimit, "max-log-limit", lc.MaxLogLimit, "highest limit accepted for SLIDING_WINDOW_LOG")
	fs.Int64Var(&lc.MaxLogEntries, "max-log-entries", lc.MaxLogEntries, "cap on the entries (4 bytes each, room to grow included) all SLIDING_WINDOW_LOG keys of this node allocate; when reached, --overflow applies; at least --partitions × --max-log-limit")

	fs.IntVar(&c.MaxBatch, "max-batch", c.MaxBatch, "most checks in one batch call")
	fs.IntVar(&c.MaxRecvMsgBytes, "max-grpc-msg-bytes", c.MaxRecvMsgBytes, "largest gRPC request, in bytes")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest HTTP request body, in bytes")
	fs.IntVar(&c.MaxInflightForwards, "max-inflight-forwards", c.MaxInflightForwards, "cap on the checks this node has forwarded and still waits on; over it a check is refused with RESOURCE_EXHAUSTED (HTTP 429)")
	fs.DurationVar(&c.SweepInterval, "sweep-interval", c.SweepInterval, "how often expired keys are freed")
	fs.StringVar(&c.PoliciesFile, "policies", c.PoliciesFile, "YAML or JSON file of named policies that requests may name instead of limit, window and algorithm; reloaded on SIGHUP; the same on every node")
	fs.StringVar(&c.EnvoyRLSConfig, "envoy-rls-config", c.EnvoyRLSConfig, "YAML file, or directory of them, in envoyproxy/ratelimit's format: serves Envoy's rate limit service (envoy.service.ratelimit.v3) on the gRPC address; reloaded on SIGHUP; the same on every node")
	fs.BoolVar(&c.EnvoyRLSHeaders, "envoy-rls-headers", c.EnvoyRLSHeaders, "the rate limit service's answers carry the IETF RateLimit-Policy and RateLimit headers (and Retry-After when over the limit) for Envoy to add")
	fs.BoolVar(&c.Pprof, "pprof", c.Pprof, "serve Go's profiles on the HTTP address under /debug/pprof/ (keep that address private)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", o.shutdownTimeout, "how long a graceful shutdown may take before calls are cut")
	// Security (docs/security.md). Secrets come from files, or from
	// PEERLIMIT_API_TOKEN and PEERLIMIT_CLUSTER_SECRET, never from a flag
	// value that ps shows.
	sc := &c.Security
	fs.StringVar(&sc.TLSCertFile, "tls-cert-file", "", "PEM server certificate of the gRPC and HTTP APIs; with it both speak only TLS (needs --peer-tls-ca-file)")
	fs.StringVar(&sc.TLSKeyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	fs.StringVar(&sc.ClientCAFile, "tls-client-ca-file", "", "PEM CA verifying client certificates of the public APIs")
	clientAuth := fs.String("tls-client-auth", "optional", "optional (verify a client certificate if one is presented) or require (RateLimiter calls and /v1/* need one)")
	fs.StringVar(&sc.PeerCAFile, "peer-tls-ca-file", "", "PEM CA of peer certificates: verifies the peers this node dials and the callers of the Peer service")
	fs.StringVar(&sc.PeerCertFile, "peer-tls-cert-file", "", "PEM certificate presented to peers (default: --tls-cert-file); needs the DNS name --peer-tls-server-name and both TLS usages")
	fs.StringVar(&sc.PeerKeyFile, "peer-tls-key-file", "", "PEM key of --peer-tls-cert-file")
	fs.StringVar(&sc.PeerServerName, "peer-tls-server-name", sc.PeerServerName, "DNS name every peer certificate carries")
	fs.StringVar(&sc.ClusterSecretFile, "cluster-secret-file", "", "cluster secrets authenticating node-to-node calls, one per line (16+ bytes; the first signs, all are accepted); or PEERLIMIT_CLUSTER_SECRET")
	fs.DurationVar(&sc.PeerGrace, "peer-grace", sc.PeerGrace, "how long a member that left or failed may still forward and hand off")
	fs.StringVar(&sc.APITokenFile, "api-token-file", "", "bearer tokens of the public APIs, one per line (16+ bytes; any is accepted); or PEERLIMIT_API_TOKEN")
	fs.BoolVar(&sc.AuthMetrics, "auth-metrics", false, "GET /metrics needs the public API's credentials too")
	fs.StringVar(&sc.GossipKeyringFile, "gossip-keyring-file", "", "base64 gossip keys, one per line, the first encrypting; SIGHUP re-reads it (key rotation). Instead of --gossip-key")

	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "text or json")

	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
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
	if envErr != nil {
		return o, envErr
	}

	var err error
	if lc.Overflow, err = limiter.ParseOverflowPolicy(*overflow); err != nil {
		return o, fmt.Errorf("--overflow: %w", err)
	}
	if c.Fallback, err = rpc.ParseFallbackPolicy(*fallback); err != nil {
		return o, fmt.Errorf("--fallback: %w", err)
	}
	switch p := cluster.Profile(*profile); p {
	case cluster.ProfileLAN, cluster.ProfileLocal:
		c.GossipProfile = p
	default:
		return o, fmt.Errorf("--gossip-profile: want lan or local, got %q", *profile)
	}
	if *gossipKey != "" {
		if c.GossipKey, err = security.ParseGossipKey(*gossipKey); err != nil {
			return o, fmt.Errorf("--gossip-key: %w", err)
		}
	}
	c.SetPartitions(*partitions)
	if err := o.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return o, fmt.Errorf("--log-level: %w", err)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, fmt.Errorf("--log-format: want text or json, got %q", o.logFormat)
	}
	c.Join = nil
	for _, s := range strings.Split(*join, ",") {
		if s = strings.TrimSpace(s); s != "" {
			c.Join = append(c.Join, s)
		}
	}
	switch *clientAuth {
	case "optional":
	case "require":
		sc.RequireClientCert = true
	default:
		return o, fmt.Errorf("--tls-client-auth: want optional or require, got %q", *clientAuth)
	}
	if tok := getenv("PEERLIMIT_API_TOKEN"); tok != "" {
		sc.APITokens = []string{tok}
	}
	if secret := getenv("PEERLIMIT_CLUSTER_SECRET"); secret != "" {
		sc.ClusterSecrets = [][]byte{[]byte(secret)}
	}
	// Settings that contradict each other are usage errors, reported
	// before anything starts.
	if err := c.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

func envName(flagName string) string {
	return "PEERLIMIT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
