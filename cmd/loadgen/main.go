// Command loadgen is the project's load generator: it sends rate-limit
// checks to a peerlimit cluster, or to a Redis server running the classic
// Lua scripts of the seed documents, from many concurrent callers, and
// reports throughput, decisions, per-call latency and its own CPU time.
//
// Usage:
//
//	loadgen -target peerlimit|redis
//	  -api grpc|http|envoy          how peerlimit is asked (below); default grpc
//	  -endpoints a:9090,b:9091      peerlimit gRPC endpoints (-api grpc, envoy)
//	  -http-endpoints a:8080,b:8081 peerlimit HTTP endpoints (-api http)
//	  -route node|random|owner      node: every call to the first endpoint;
//	                                random: a random endpoint per call (one
//	                                connection per endpoint for gRPC); owner: the
//	                                Go client library with owner routing (-api
//	                                grpc only). Default owner with -api grpc,
//	                                random with http and envoy
//	  -coalesce=true                the client's coalescing (only with -route owner)
//	  -rls-domain bench-counter     -api envoy: the domain of every request
//	  -rls-descriptor-key key       -api envoy: the key of the descriptor's one
//	                                entry (its value is the check's key)
//	  -redis 127.0.0.1:6379         Redis address (-target redis)
//	  -workers 64                   concurrent callers
//	  -duration 10s                 hard bound on the run's time (always applies)
//	  -count 0                      stop after this many checks (0: duration only)
//	  -keys 10000 -dist uniform|zipf -zipf-s 1.1 -seed 1
//	  -algorithm counter|log|gcra -limit 1000000000 -window 60s
//	  -batch 1                      >1: peerlimit CheckBatch of N checks per call;
//	                                Redis: a pipeline of N EVALSHA per round trip
//	  -json PATH                    write the result as JSON ("-": stdout)
//	  -progress=true                a line on stderr every second
//	  -timeout 2s                   per-call deadline (see below)
//	  -key-prefix loadgen:          prefix of every key
//	  -tls-ca-file, -tls-cert-file, -tls-key-file, -tls-server-name
//	                                TLS to peerlimit (CA of the nodes; client
//	                                certificate for mutual TLS)
//	  -api-token-file PATH          bearer token of peerlimit's API (first line)
//
// The APIs, each the way a client without peerlimit's Go library sends
// checks:
//
//   - grpc: the RateLimiter service, Check or CheckBatch (-route node or
//     random: raw gRPC with grpc-go's default protobuf codec; -route owner:
//     the Go client).
//   - http: POST /v1/check (or /v1/check:batch with -batch > 1) with a JSON
//     body, through net/http with keep-alive and an idle pool that holds a
//     connection per worker for every endpoint, opened before the clock
//     starts; https with -tls-* flags, the token as "Authorization: Bearer".
//   - envoy: Envoy's rate limit service, ShouldRateLimit, through Envoy's
//     generated Go client (go-control-plane) with grpc-go's default codec:
//     domain -rls-domain, one descriptor with one entry
//     (-rls-descriptor-key = the key), hits_addend 1. The nodes must serve
//     it (--envoy-rls-config) with a rule for that descriptor in that
//     domain, which decides limit, window and algorithm: -limit, -window
//     and -algorithm do not apply, and -batch is 1. OK counts as allowed,
//     OVER_LIMIT as denied, an RPC error as an error. A descriptor that no
//     limited rule matches would be answered OK without any check, so the
//     run refuses to start when the warm-up call says so, and such an
//     answer during the run is an error.
//
// Checks counts the checks that were decided (allowed + denied); errors
// counts the checks that were not (a failed call of a batch of N counts N).
// Latency is per call (a batch call carries -batch checks), over the calls
// that got an answer, in microseconds. A call cut short because the run
// ended (duration, -count, SIGINT) is neither a check nor an error.
// cpu_seconds is the load generator's own CPU time (user + system, every
// thread) over the same load phase, so cpu_seconds / checks is its CPU per
// check; 0 where the system does not report it.
//
// -timeout bounds each call of the node and random routes and of Redis.
// With -route owner the Go client bounds each attempt on one node by it
// and fails over to another node within the call, as applications see it.
//
// SIGINT or SIGTERM stops the run early; the result so far is still
// reported. The exit status is 2 for bad flags and 1 when the run could not
// start or no check was decided.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// realMain is main with its inputs and outputs injected, so that tests can
// drive the command end to end. It returns the exit status.
func realMain(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 2
	}
	cfg.Stderr = stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, a second one kills the process as usual.
	context.AfterFunc(ctx, stop)

	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "loadgen: -cpuprofile:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "loadgen: interrupted; reporting what was measured")
	}
	if err := report(res, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
	if res.Checks == 0 {
		fmt.Fprintf(stderr, "loadgen: no check was decided (%d errors)\n", res.Errors)
		return 1
	}
	return 0
}

// Config is one run's configuration; the flags fill it.
type Config struct {
	Target        string   // "peerlimit" or "redis"
	API           string   // "grpc", "http" or "envoy", with Target "peerlimit"
	Endpoints     []string // peerlimit gRPC addresses (API grpc and envoy)
	HTTPEndpoints []string // peerlimit HTTP addresses (API http)
	Route         string   // "node", "random" or "owner" (API grpc only)
	Coalesce      bool     // the client's coalescing, with Route "owner"
	Redis         string   // Redis address

	// RLSDomain and RLSDescriptorKey make API envoy's requests: the
	// domain, and the key of the one descriptor entry whose value is the
	// check's key.
	RLSDomain, RLSDescriptorKey string

	Workers  int
	Duration time.Duration // hard bound on the load phase
	Count    int64         // stop after this many checks; 0: Duration only
	Timeout  time.Duration // per call; see the package doc

	Keys      int
	Dist      string // "uniform" or "zipf"
	ZipfS     float64
	Seed      uint64
	KeyPrefix string

	Algorithm string // "counter" or "log"
	Limit     int64
	Window    time.Duration
	Batch     int

	// TLS and the API token of a secured peerlimit cluster: PEM files,
	// and a file whose first line is the token. Empty: plaintext, no
	// token.
	TLSCAFile, TLSCertFile, TLSKeyFile, TLSServerName string
	TokenFile                                         string

	JSON     string // path of the JSON result; "-" is stdout; "" none
	Progress bool
	// CPUProfile is where the load generator writes its own CPU profile;
	// "" none.
	CPUProfile string
	// Stderr receives warnings, the progress lines and the first errors.
	// Nil discards them.
	Stderr io.Writer
}

// Names of the flag values.
const (
	targetPeerlimit = "peerlimit"
	targetRedis     = "redis"

	apiGRPC  = "grpc"
	apiHTTP  = "http"
	apiEnvoy = "envoy"

	routeNode   = "node"
	routeRandom = "random"
	routeOwner  = "owner"

	distUniform = "uniform"
	distZipf    = "zipf"

	algoCounter = "counter"
	algoLog     = "log"
	algoGCRA    = "gcra" // burst = -limit; peerlimit's APIs only
)

// defaultConfig is the configuration with every flag at its default.
func defaultConfig() Config {
	return Config{
		Target:           targetPeerlimit,
		API:              apiGRPC,
		Endpoints:        []string{"127.0.0.1:9090", "127.0.0.1:9091", "127.0.0.1:9092"},
		HTTPEndpoints:    []string{"127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"},
		Route:            routeOwner,
		Coalesce:         true,
		Redis:            "127.0.0.1:6379",
		RLSDescriptorKey: "key",
		Workers:          64,
		Duration:         10 * time.Second,
		Timeout:          2 * time.Second,
		Keys:             10_000,
		Dist:             distUniform,
		ZipfS:            1.1,
		Seed:             1,
		KeyPrefix:        "loadgen:",
		Algorithm:        algoCounter,
		Limit:            1_000_000_000,
		Window:           time.Minute,
		Batch:            1,
		Progress:         true,
	}
}

// parseFlags reads the command line into a validated Config. -h returns
// flag.ErrHelp after the usage is printed.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoints := strings.Join(cfg.Endpoints, ",")
	httpEndpoints := strings.Join(cfg.HTTPEndpoints, ",")
	fs.StringVar(&cfg.Target, "target", cfg.Target, "what to load: peerlimit or redis")
	fs.StringVar(&cfg.API, "api", cfg.API, "how peerlimit is asked: grpc (RateLimiter service), http (POST /v1/check, JSON, keep-alive), envoy (Envoy's RateLimitService/ShouldRateLimit; the nodes need --envoy-rls-config)")
	fs.StringVar(&endpoints, "endpoints", endpoints, "peerlimit gRPC endpoints, comma-separated (-api grpc and envoy)")
	fs.StringVar(&httpEndpoints, "http-endpoints", httpEndpoints, "peerlimit HTTP endpoints, comma-separated (-api http)")
	fs.StringVar(&cfg.Route, "route", cfg.Route, "peerlimit routing: node (every call to the first endpoint), random (a random endpoint per call), owner (the Go client, owner routing; -api grpc only). Default: owner with -api grpc, random with http and envoy")
	fs.StringVar(&cfg.RLSDomain, "rls-domain", "", "-api envoy: the domain of every ShouldRateLimit request (required; a domain of the nodes' --envoy-rls-config)")
	fs.StringVar(&cfg.RLSDescriptorKey, "rls-descriptor-key", cfg.RLSDescriptorKey, "-api envoy: the key of the request's one descriptor entry; its value is the check's key")
	fs.BoolVar(&cfg.Coalesce, "coalesce", cfg.Coalesce, "the Go client's coalescing of concurrent checks (only with -route owner)")
	fs.StringVar(&cfg.Redis, "redis", cfg.Redis, "Redis address (-target redis)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent callers")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "hard bound on the run's time (always applies)")
	fs.Int64Var(&cfg.Count, "count", cfg.Count, "stop after this many checks (0: duration only)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "deadline of one call (with -route owner: of one attempt on one node)")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "size of the key space")
	fs.StringVar(&cfg.Dist, "dist", cfg.Dist, "key distribution: uniform or zipf")
	fs.Float64Var(&cfg.ZipfS, "zipf-s", cfg.ZipfS, "Zipf exponent s (> 1), with -dist zipf")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the key streams; same seed, same keys per worker")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", cfg.KeyPrefix, "prefix of every key (key i is <prefix><i>)")
	fs.StringVar(&cfg.Algorithm, "algorithm", cfg.Algorithm, "counter (sliding window counter), log (sliding window log) or gcra (a token bucket, burst = -limit)")
	fs.Int64Var(&cfg.Limit, "limit", cfg.Limit, "hits allowed per window")
	fs.DurationVar(&cfg.Window, "window", cfg.Window, "the rolling window (whole ms for peerlimit, whole seconds for redis)")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "checks per call: peerlimit CheckBatch, Redis pipeline of EVALSHA")
	fs.StringVar(&cfg.JSON, "json", cfg.JSON, `write the result as JSON to this path ("-": stdout, and no human summary)`)
	fs.BoolVar(&cfg.Progress, "progress", cfg.Progress, "a line on stderr every second: elapsed, checks/s, p99 so far, errors")
	fs.StringVar(&cfg.TLSCAFile, "tls-ca-file", "", "peerlimit over TLS: PEM CA of the nodes' certificates")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "PEM client certificate, for nodes that require one")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM key of -tls-cert-file")
	fs.StringVar(&cfg.TLSServerName, "tls-server-name", "", "name verified in the nodes' certificates instead of the address dialed")
	fs.StringVar(&cfg.TokenFile, "api-token-file", "", "file whose first line is peerlimit's API bearer token")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write the load generator's own CPU profile here (go tool pprof), to see what the client side costs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("parsing flags: %w", err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Endpoints = splitList(endpoints)
	cfg.HTTPEndpoints = splitList(httpEndpoints)

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// The Go client's owner routing exists only over gRPC: the other APIs
	// stand for clients without it, which pick a node.
	if !set["route"] && cfg.API != apiGRPC {
		cfg.Route = routeRandom
	}
	// A flag that would be silently ignored is a mistake worth stopping for.
	switch {
	case set["coalesce"] && (cfg.Target != targetPeerlimit || cfg.Route != routeOwner):
		return cfg, errors.New("-coalesce applies only to -target peerlimit -route owner")
	case cfg.Target == targetRedis && (set["endpoints"] || set["route"] || set["api"] || set["http-endpoints"]):
		return cfg, errors.New("-api, -endpoints, -http-endpoints and -route apply only to -target peerlimit; use -redis for the Redis address")
	case cfg.Target == targetPeerlimit && set["redis"]:
		return cfg, errors.New("-redis applies only to -target redis; use -endpoints for peerlimit")
	case cfg.API == apiHTTP && set["endpoints"]:
		return cfg, errors.New("-endpoints are gRPC addresses; with -api http use -http-endpoints")
	case cfg.API != apiHTTP && set["http-endpoints"]:
		return cfg, errors.New("-http-endpoints applies only to -api http")
	case cfg.API != apiEnvoy && (set["rls-domain"] || set["rls-descriptor-key"]):
		return cfg, errors.New("-rls-domain and -rls-descriptor-key apply only to -api envoy")
	case cfg.API == apiEnvoy && (set["limit"] || set["window"] || set["algorithm"]):
		return cfg, errors.New("-limit, -window and -algorithm do not apply to -api envoy: the rule of -rls-domain in the nodes' --envoy-rls-config decides them")
	case cfg.Target != targetPeerlimit && (cfg.tlsOn() || cfg.TokenFile != ""):
		return cfg, errors.New("-tls-* and -api-token-file apply only to -target peerlimit")
	case (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == ""):
		return cfg, errors.New("-tls-cert-file and -tls-key-file go together")
	}
	return cfg, cfg.validate()
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// validate reports the first unusable setting, naming its flag.
func (c Config) validate() error {
	switch c.Target {
	case targetPeerlimit:
		switch c.Route {
		case routeNode, routeRandom, routeOwner:
		default:
			return fmt.Errorf("-route must be node, random or owner, got %q", c.Route)
		}
		switch c.API {
		case apiGRPC:
		case apiHTTP, apiEnvoy:
			if c.Route == routeOwner {
				return fmt.Errorf("-route owner is the Go client, which speaks gRPC: use -api grpc, or -route node or random with -api %s", c.API)
			}
		default:
			return fmt.Errorf("-api must be grpc, http or envoy, got %q", c.API)
		}
		if err := checkAddrs(c.peerlimitEndpoints(), c.endpointsFlag()); err != nil {
			return err
		}
		if c.Window%time.Millisecond != 0 {
			return fmt.Errorf("-window must be a whole number of milliseconds for peerlimit, got %s", c.Window)
		}
		if c.API == apiEnvoy {
			switch {
			case c.RLSDomain == "":
				return errors.New("-rls-domain is required with -api envoy: a domain of the nodes' --envoy-rls-config")
			case c.RLSDescriptorKey == "":
				return errors.New("-rls-descriptor-key must not be empty")
			case c.Batch != 1:
				return fmt.Errorf("-batch must be 1 with -api envoy (one descriptor per request), got %d", c.Batch)
			}
		}
	case targetRedis:
		if _, _, err := net.SplitHostPort(c.Redis); err != nil {
			return fmt.Errorf("-redis: %q is not host:port: %w", c.Redis, err)
		}
		// The seed's scripts take the window in seconds.
		if c.Window%time.Second != 0 {
			return fmt.Errorf("-window must be a whole number of seconds for redis (the seed scripts take seconds), got %s", c.Window)
		}
	default:
		return fmt.Errorf("-target must be peerlimit or redis, got %q", c.Target)
	}
	switch {
	case c.Workers < 1:
		return fmt.Errorf("-workers must be ≥ 1, got %d", c.Workers)
	case c.Duration <= 0:
		return fmt.Errorf("-duration must be positive, got %s", c.Duration)
	case c.Count < 0:
		return fmt.Errorf("-count must be ≥ 0 (0: duration only), got %d", c.Count)
	case c.Timeout <= 0:
		return fmt.Errorf("-timeout must be positive, got %s", c.Timeout)
	case c.Keys < 1:
		return fmt.Errorf("-keys must be ≥ 1, got %d", c.Keys)
	case c.Dist != distUniform && c.Dist != distZipf:
		return fmt.Errorf("-dist must be uniform or zipf, got %q", c.Dist)
	case c.Dist == distZipf && !(c.ZipfS > 1):
		return fmt.Errorf("-zipf-s must be > 1 (math/rand/v2's Zipf), got %g", c.ZipfS)
	case c.Algorithm != algoCounter && c.Algorithm != algoLog && c.Algorithm != algoGCRA:
		return fmt.Errorf("-algorithm must be counter, log or gcra, got %q", c.Algorithm)
	case c.Algorithm == algoGCRA && c.Target == targetRedis:
		return errors.New("-algorithm gcra is peerlimit's: the Redis scripts are the seeds' two windows")
	case c.Limit < 1:
		return fmt.Errorf("-limit must be ≥ 1, got %d", c.Limit)
	case c.Window <= 0:
		return fmt.Errorf("-window must be positive, got %s", c.Window)
	case c.Batch < 1:
		return fmt.Errorf("-batch must be ≥ 1, got %d", c.Batch)
	}
	return nil
}

// peerlimitEndpoints are the addresses c's API calls: HTTP or gRPC.
func (c Config) peerlimitEndpoints() []string {
	if c.API == apiHTTP {
		return c.HTTPEndpoints
	}
	return c.Endpoints
}

// endpointsFlag names the flag of peerlimitEndpoints.
func (c Config) endpointsFlag() string {
	if c.API == apiHTTP {
		return "-http-endpoints"
	}
	return "-endpoints"
}

// checkAddrs checks a non-empty list of host:port addresses given by flag.
func checkAddrs(addrs []string, flag string) error {
	if len(addrs) == 0 {
		return fmt.Errorf("%s is empty: give at least one peerlimit address", flag)
	}
	for _, ep := range addrs {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return fmt.Errorf("%s: %q is not host:port: %w", flag, ep, err)
		}
	}
	return nil
}

// Result is what a run measured. Its JSON form is the command's output
// format; other tools read it, so the field names are fixed.
type Result struct {
	Target string `json:"target"`
	// API is how peerlimit was asked: grpc, http or envoy; "" for redis.
	API   string `json:"api,omitempty"`
	Route string `json:"route"` // "" for redis
	// RLSDomain is the domain of API envoy's requests.
	RLSDomain string `json:"rls_domain,omitempty"`
	// Coalesce is the Go client's coalescing, for route owner.
	Coalesce  bool    `json:"coalesce,omitempty"`
	Workers   int     `json:"workers"`
	Batch     int     `json:"batch"`
	Algorithm string  `json:"algorithm"` // "" for API envoy: the domain's rule decides
	Keys      int     `json:"keys"`
	Dist      string  `json:"dist"`
	DurationS float64 `json:"duration_s"` // of the load phase, setup excluded
	// Checks were decided: Checks == Allowed + Denied. Errors were not.
	Checks     int64   `json:"checks"`
	Allowed    int64   `json:"allowed"`
	Denied     int64   `json:"denied"`
	Errors     int64   `json:"errors"`
	ChecksPerS float64 `json:"checks_per_s"`
	// LatencyUnit is "call": a batch call of Batch checks is one sample.
	LatencyUnit string      `json:"latency_unit"`
	LatencyUS   Percentiles `json:"latency_us"`
	StartedAt   time.Time   `json:"started_at"`
	// CPUSeconds is this process's CPU time, user + system over every
	// thread, during the load phase (the same span as DurationS); 0 where
	// the system does not report it. Divided by Checks, it is the load
	// generator's CPU per check.
	CPUSeconds float64 `json:"cpu_seconds"`

	// Calls is the number of calls that got an answer (the latency
	// samples' population).
	Calls int64 `json:"-"`
	// Degraded counts peerlimit answers given by a fallback because the
	// key's owner was unreachable (they are also in Checks).
	Degraded int64 `json:"degraded"`
	// FirstErrors are the first few errors, with the time they happened.
	FirstErrors []string `json:"-"`
}

// Percentiles of per-call latency in microseconds.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
}

// report writes the JSON result where -json says and the human summary to
// stdout (unless the JSON went there), and the first errors to stderr.
func report(res Result, cfg Config, stdout, stderr io.Writer) error {
	if len(res.FirstErrors) > 0 {
		fmt.Fprintf(stderr, "loadgen: %d errors; the first:\n", res.Errors)
		for _, e := range res.FirstErrors {
			fmt.Fprintln(stderr, "  "+e)
		}
	}
	if cfg.JSON != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding the result: %w", err)
		}
		b = append(b, '\n')
		if cfg.JSON == "-" {
			if _, err := stdout.Write(b); err != nil {
				return fmt.Errorf("writing the result to stdout: %w", err)
			}
			return nil
		}
		if err := os.WriteFile(cfg.JSON, b, 0o644); err != nil {
			return fmt.Errorf("writing the result: %w", err)
		}
	}
	if _, err := io.WriteString(stdout, summary(res, cfg)); err != nil {
		return fmt.Errorf("writing the summary: %w", err)
	}
	return nil
}

// summary is the human-readable form of res.
func summary(res Result, cfg Config) string {
	var b strings.Builder
	switch res.Target {
	case targetPeerlimit:
		fmt.Fprintf(&b, "peerlimit %s %s, route %s", res.API, strings.Join(cfg.peerlimitEndpoints(), ","), res.Route)
		if res.Route == routeOwner {
			fmt.Fprintf(&b, " (coalescing %s)", onOff(cfg.Coalesce))
		}
		if res.API == apiEnvoy {
			fmt.Fprintf(&b, ", domain %s, descriptor %s=<key>", res.RLSDomain, cfg.RLSDescriptorKey)
		}
	default:
		fmt.Fprintf(&b, "redis %s", cfg.Redis)
	}
	dist := res.Dist
	if dist == distZipf {
		dist = fmt.Sprintf("zipf s=%g", cfg.ZipfS)
	}
	if res.API == apiEnvoy {
		fmt.Fprintf(&b, "\n  the domain's limit, %d keys %s, %d workers, batch %d\n", res.Keys, dist, res.Workers, res.Batch)
	} else {
		fmt.Fprintf(&b, "\n  %s limit %d per %s, %d keys %s, %d workers, batch %d\n",
			res.Algorithm, cfg.Limit, cfg.Window, res.Keys, dist, res.Workers, res.Batch)
	}
	fmt.Fprintf(&b, "  %.2fs: %d checks, %.0f checks/s; allowed %d, denied %d, errors %d",
		res.DurationS, res.Checks, res.ChecksPerS, res.Allowed, res.Denied, res.Errors)
	if res.Target == targetPeerlimit {
		fmt.Fprintf(&b, ", degraded %d", res.Degraded)
	}
	l := res.LatencyUS
	fmt.Fprintf(&b, "\n  latency per call (%d calls): p50 %s, p90 %s, p99 %s, p99.9 %s\n",
		res.Calls, fmtUS(l.P50), fmtUS(l.P90), fmtUS(l.P99), fmtUS(l.P999))
	if res.CPUSeconds > 0 {
		fmt.Fprintf(&b, "  loadgen CPU %.2fs", res.CPUSeconds)
		if res.Checks > 0 {
			fmt.Fprintf(&b, ", %.1fµs per check", res.CPUSeconds*1e6/float64(res.Checks))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// fmtUS formats microseconds as a rounded duration, e.g. 1.234ms.
func fmtUS(us float64) string {
	d := time.Duration(us * 1e3)
	switch {
	case d >= 10*time.Millisecond:
		d = d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}
