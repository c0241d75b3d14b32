package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/security"
)

// Exit codes of every command.
const (
	exitOK     = 0
	exitError  = 1 // the call failed: unreachable, refused, invalid
	exitUsage  = 2 // the command line is wrong
	exitDenied = 3 // check, reserve, acquire: the cluster answered, and said no
	exitClosed = 4 // release: the reservation was settled or released before, nothing was released now
)

const usageText = `Usage: peerlimit-node <command> [flags] [args]

Commands:
  serve          run a node (the default: "peerlimit-node --flags" is "serve --flags")
  check KEY      ask a node for a decision: --policy NAME, or --limit N --window D [--algorithm A]
                 (or --calendar UNIT [--time-zone Z] instead of --window); --hits N (0 peeks);
                 --algorithm gcra takes --burst N, the bucket's size (default the limit)
  reserve KEY    admit --hits N (an estimate) as check does and open a reservation, printing its token; --ttl D
  settle KEY     close a reservation at its real cost: --reservation TOKEN --hits COST; the unused part is
                 refunded, a cost above it charged as debt; a retry counts once
  release KEY    close a reservation refunding all of it: --reservation TOKEN
  refund KEY     give back --hits N, never below what the window holds
  charge KEY     count --hits N even past the limit (debt)
  acquire KEY    take a slot of an --algorithm concurrency limit (--limit slots, each freeing itself
                 --window after it was taken), printing its token; free it with release --reservation
                 (reserve, settle, release, refund, charge and acquire take check's limit flags: the same limit)
  members        the members a node sees and their share of the ring
  ring KEY...    which member owns each key (its partition and owner, as the node sees the ring)
  reset KEY      clear a key's state on its owner: --policy NAME, --window D [--algorithm A],
                 --calendar UNIT [--time-zone Z], or --all-windows
  top            the keys the cluster decided and denied most over the last minute: --n N (10)
  inspect KEY    a key's state on its owner, consuming nothing: its counts, and with --limit N [--hits H]
                 or --policy NAME when the next request would be allowed
  healthcheck    GET /healthz of a node's HTTP API; exit 0 serving, 1 not (for Docker HEALTHCHECK)
  ratelimit      run a node configured by envoyproxy/ratelimit's environment variables, as the
                 binary does when started as /bin/ratelimit (docs/envoy.md): peerlimit-node ratelimit --help
  help           this text

Every command but serve, ratelimit, healthcheck and help talks gRPC to --addr (default 127.0.0.1:9090)
and prints for people, or JSON with --json. Against a node with TLS give --tls-ca-file
(and --tls-cert-file, --tls-key-file for mutual TLS; --tls-server-name when the
certificate does not name the address); against one with API tokens give
--token-file or PEERLIMIT_API_TOKEN. healthcheck takes the HTTP address (--addr,
default http://127.0.0.1:<port of PEERLIMIT_HTTP_ADDR, else 8080>; https:// or
--tls-ca-file for TLS).

Exit codes: 0 ok (check, reserve, acquire: allowed), 1 error, 2 usage, 3 check, reserve or acquire
denied, 4 release of a reservation or slot already settled or released (nothing released now).

Load testing is cmd/loadgen's job: go run ./cmd/loadgen --help.
`

// dispatch runs the command args name; flags without a command serve, so
// "peerlimit-node --id a ..." is what it always was.
func dispatch(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return run(args, getenv, stderr)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return run(rest, getenv, stderr)
	case "ratelimit":
		return runUpstream(rest, getenv, stderr)
	case "check":
		return cmdCheck(rest, getenv, stdout, stderr)
	case "reserve", "settle", "release", "refund", "charge", "acquire":
		return cmdOp(cmd, pb.Op(pb.Op_value[strings.ToUpper(cmd)]), rest, getenv, stdout, stderr)
	case "members":
		return cmdMembers(rest, getenv, stdout, stderr)
	case "ring":
		return cmdRing(rest, getenv, stdout, stderr)
	case "reset":
		return cmdReset(rest, getenv, stdout, stderr)
	case "top":
		return cmdTop(rest, getenv, stdout, stderr)
	case "inspect":
		return cmdInspect(rest, getenv, stdout, stderr)
	case "healthcheck":
		return cmdHealthcheck(rest, getenv, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	fmt.Fprintf(stderr, "peerlimit-node: unknown command %q\n\n%s", cmd, usageText)
	return exitUsage
}

// command is one subcommand's flag set and the settings all the gRPC
// commands share.
type command struct {
	name    string
	fs      *flag.FlagSet
	getenv  func(string) string
	stdout  io.Writer
	stderr  io.Writer
	addr    string
	timeout time.Duration
	json    bool

	tls                           bool
	tlsCA, tlsCert, tlsKey, tlsSN string
	tokenFile                     string
	tokenWithoutTLS               bool
}

func newCommand(name, args string, getenv func(string) string, stdout, stderr io.Writer) *command {
	c := &command{name: name, fs: flag.NewFlagSet(name, flag.ContinueOnError), getenv: getenv, stdout: stdout, stderr: stderr}
	c.fs.SetOutput(stderr)
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: peerlimit-node %s [flags] %s\n\n", name, args)
		c.fs.PrintDefaults()
	}
	return c
}

func (c *command) grpcFlags() {
	c.fs.StringVar(&c.addr, "addr", "127.0.0.1:9090", "gRPC address of any node")
	c.fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "deadline of the call")
	c.fs.BoolVar(&c.json, "json", false, "print JSON instead of text")
	c.tlsFlags()
	c.fs.StringVar(&c.tokenFile, "token-file", "", "file whose first line is the bearer token of the node's public API (--api-token-file on the node); or PEERLIMIT_API_TOKEN")
	c.fs.BoolVar(&c.tokenWithoutTLS, "token-without-tls", false, "send the token over plaintext (anyone watching the network can take it)")
}

// tlsFlags are how a command reaches a node whose APIs speak TLS.
func (c *command) tlsFlags() {
	c.fs.BoolVar(&c.tls, "tls", false, "connect with TLS, verifying the node with the system's roots (implied by the other --tls-* flags)")
	c.fs.StringVar(&c.tlsCA, "tls-ca-file", "", "PEM CA verifying the node's certificate (implies --tls)")
	c.fs.StringVar(&c.tlsCert, "tls-cert-file", "", "PEM client certificate, for a node with --tls-client-ca-file (mutual TLS)")
	c.fs.StringVar(&c.tlsKey, "tls-key-file", "", "PEM key of --tls-cert-file")
	c.fs.StringVar(&c.tlsSN, "tls-server-name", "", "name to verify in the node's certificate instead of the host of --addr")
}

// tlsConfig returns the TLS settings the flags ask for, or nil for
// plaintext. An error is a usage error.
func (c *command) tlsConfig() (*tls.Config, error) {
	if !c.tls && c.tlsCA == "" && c.tlsCert == "" && c.tlsKey == "" && c.tlsSN == "" {
		return nil, nil
	}
	return client.LoadTLS(c.tlsCA, c.tlsCert, c.tlsKey, c.tlsSN)
}

// token returns the bearer token: --token-file's first line, else
// PEERLIMIT_API_TOKEN, else none.
func (c *command) token() (string, error) {
	if c.tokenFile == "" {
		return c.getenv("PEERLIMIT_API_TOKEN"), nil
	}
	lines, err := security.ReadLines(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return lines[0], nil
}

// dialOptions are the transport and credentials the flags ask for.
func (c *command) dialOptions() ([]grpc.DialOption, error) {
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	tok, err := c.token()
	if err != nil {
		return nil, err
	}
	if tok != "" && tc == nil && !c.tokenWithoutTLS {
		return nil, errors.New("refusing to send the API token over plaintext: give --tls-ca-file (or --tls), or --token-without-tls")
	}
	return append(client.Credentials(tc, tok, c.tokenWithoutTLS), wire.Dial()...), nil
}

// parse reads flags and arguments in any order ("check key --hits 2" and
// "check --hits 2 key" alike); after "--" everything is an argument.
// It returns the arguments, or an exit code when there is nothing to run.
func (c *command) parse(args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		rest := c.fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), 0, true
		}
		if len(rest) == 0 {
			return pos, 0, true
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func (c *command) usageError(format string, a ...any) int {
	fmt.Fprintf(c.stderr, "peerlimit-node %s: %s\n", c.name, fmt.Sprintf(format, a...))
	c.fs.Usage()
	return exitUsage
}

// usageErr is a command line that cannot work (credentials that do not
// load, a token that would travel in clear): exit code 2, not 1.
type usageErr struct{ error }

// fail reports a failed call; a gRPC status prints as its code and message.
func (c *command) fail(err error) int {
	var ue usageErr
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "peerlimit-node %s: %v\n", c.name, ue.error)
		return exitUsage
	}
	if st, ok := status.FromError(err); ok {
		fmt.Fprintf(c.stderr, "peerlimit-node %s: %s: %s\n", c.name, st.Code(), st.Message())
	} else {
		fmt.Fprintf(c.stderr, "peerlimit-node %s: %v\n", c.name, err)
	}
	return exitError
}

// call makes one RPC to --addr under --timeout and closes the connection.
// method is a method expression, e.g. pb.RateLimiterClient.Check.
func call[Req, Resp any](c *command, method func(pb.RateLimiterClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var zero Resp
	opts, err := c.dialOptions()
	if err != nil {
		return zero, usageErr{err}
	}
	conn, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		return zero, fmt.Errorf("connect to %s: %w", c.addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	return method(pb.NewRateLimiterClient(conn), ctx, req)
}

func (c *command) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// limitFlags are how check and reset select a limit of a key.
type limitFlags struct {
	policy    string
	window    time.Duration
	algorithm string
	calendar  string
	timeZone  string
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.policy, "policy", "", "a policy of the node's --policies file, instead of --window and --algorithm")
	fs.DurationVar(&l.window, "window", 0, "the rolling window, e.g. 1m or 500ms")
	fs.StringVar(&l.algorithm, "algorithm", "", "sliding_window_counter (the default), sliding_window_log, gcra or concurrency, in any case")
	fs.StringVar(&l.calendar, "calendar", "", "a calendar-aligned quota instead of --window: minute, hour, day, week, month or year; the count starts again at each boundary")
	fs.StringVar(&l.timeZone, "time-zone", "", "the IANA time zone of --calendar, e.g. Europe/Paris (default UTC)")
}

// inlineLimit is a limit given by flags rather than by policy: its
// algorithm and calendar (the window is the flag's).
type inlineLimit struct {
	algo pb.Algorithm
	cal  pb.CalendarUnit
}

// windowed reports whether the flags give a window: --window or
// --calendar.
func (l *limitFlags) windowed() bool { return l.window != 0 || l.calendar != "" }

// request is a check of key under the limit the flags and limit (--limit)
// select; an error is a usage error.
func (l *limitFlags) request(key string, limit int64) (*pb.CheckRequest, error) {
	inline, sel, err := l.inline()
	if err != nil {
		return nil, err
	}
	req := &pb.CheckRequest{Key: key}
	switch {
	case !inline && limit != 0:
		return nil, errors.New("give --policy or --limit/--window, not both")
	case !inline:
		req.Policy = l.policy
	case limit == 0 || !l.windowed():
		return nil, errors.New("give --policy NAME, or --limit N and --window D (or --calendar UNIT)")
	default:
		req.Limit, req.WindowMs, req.Algorithm = limit, l.window.Milliseconds(), sel.algo
		req.Calendar, req.TimeZone = sel.cal, l.timeZone
	}
	return req, nil
}

// inline reports whether a limit is given by flags (else by policy), and
// its algorithm and calendar; an error is a usage error.
func (l *limitFlags) inline() (bool, inlineLimit, error) {
	a, err := limiter.ParseAlgorithm(strings.ToUpper(l.algorithm))
	if err != nil {
		return false, inlineLimit{}, errors.New("--algorithm: want sliding_window_counter, sliding_window_log, gcra or concurrency")
	}
	u, err := limiter.ParseCalendarUnit(l.calendar)
	if err != nil {
		return false, inlineLimit{}, errors.New("--calendar: want minute, hour, day, week, month or year")
	}
	switch {
	case l.policy != "":
		if l.windowed() || l.algorithm != "" || l.timeZone != "" {
			return false, inlineLimit{}, errors.New("give --policy or --window/--calendar/--algorithm, not both")
		}
		return false, inlineLimit{}, nil
	case l.window != 0 && u != limiter.NoCalendar:
		return false, inlineLimit{}, errors.New("give --window or --calendar, not both: a calendar period is the window")
	case l.timeZone != "" && u == limiter.NoCalendar:
		return false, inlineLimit{}, errors.New("--time-zone is only for --calendar")
	case l.window%time.Millisecond != 0:
		return false, inlineLimit{}, fmt.Errorf("--window %s is not a whole number of milliseconds", l.window)
	}
	return true, inlineLimit{pb.Algorithm(a), pb.CalendarUnit(u)}, nil
}

func cmdCheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return cmdOp("check", pb.Op_CHECK, args, getenv, stdout, stderr)
}

// opUsage is each op's arguments in its usage line and what --hits means.
var opUsage = map[pb.Op][2]string{
	pb.Op_CHECK:   {"KEY", "hits this check consumes; 0 peeks"},
	pb.Op_RESERVE: {"KEY", "the estimate reserved"},
	pb.Op_SETTLE:  {"KEY --reservation TOKEN --hits COST", "the real cost (required, 0 or more; may exceed the reservation and the limit)"},
	pb.Op_RELEASE: {"KEY --reservation TOKEN", ""},
	pb.Op_REFUND:  {"KEY", "hits given back (may exceed the limit)"},
	pb.Op_CHARGE:  {"KEY", "hits counted even past the limit"},
	pb.Op_ACQUIRE: {"KEY", ""},
}

// cmdOp runs check and the commands of the other ops: one request of op
// for KEY under --policy or --limit/--window/--algorithm [--burst],
// printed for people or as the HTTP API's JSON.
func cmdOp(name string, op pb.Op, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCommand(name, opUsage[op][0], getenv, stdout, stderr)
	c.grpcFlags()
	var lf limitFlags
	lf.register(c.fs)
	limit := c.fs.Int64("limit", 0, "hits allowed per window (with --window or --calendar); of --algorithm concurrency, the slots")
	burst := c.fs.Int64("burst", 0, "--algorithm gcra only: the bucket's size, the most hits admitted at once (default: --limit)")
	hits := new(int64)
	switch op {
	case pb.Op_RELEASE:
	case pb.Op_ACQUIRE: // always one slot
		*hits = 1
	case pb.Op_SETTLE: // required: no default to print beside "required"
		c.fs.Int64Var(hits, "hits", 0, opUsage[op][1])
	default:
		c.fs.Int64Var(hits, "hits", 1, opUsage[op][1])
	}
	var token string
	var ttl time.Duration
	switch op {
	case pb.Op_RESERVE:
		c.fs.DurationVar(&ttl, "ttl", 0, "how long the reservation lasts unsettled (0: the node's --reservation-ttl)")
	case pb.Op_SETTLE, pb.Op_RELEASE:
		c.fs.StringVar(&token, "reservation", "", "the token reserve printed")
	}
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError("want one KEY, got %d arguments", len(pos))
	}
	req, err := lf.request(pos[0], *limit)
	if err != nil {
		return c.usageError("%v", err)
	}
	if req.Burst, err = burstFlag(c.given("burst"), *burst, req.Algorithm); err != nil {
		return c.usageError("%v", err)
	}
	req.Hits, req.Op, req.TtlMs, req.Reservation = hits, op, ttl.Milliseconds(), token
	switch {
	case (op == pb.Op_SETTLE || op == pb.Op_RELEASE) && token == "":
		return c.usageError("give --reservation TOKEN, as reserve or acquire printed it")
	case op == pb.Op_SETTLE && !c.given("hits"):
		return c.usageError("give --hits COST, the real cost")
	case ttl%time.Millisecond != 0:
		return c.usageError("--ttl %s is not a whole number of milliseconds", ttl)
	}
	resp, err := call(c, pb.RateLimiterClient.Check, req)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(httpapi.CheckResponse{Allowed: resp.Allowed, Limit: resp.Limit, Remaining: resp.Remaining,
			CurrentCount: resp.CurrentCount, RetryAfterMS: resp.RetryAfterMs, ResetAfterMS: resp.ResetAfterMs,
			RefillAfterMS: resp.RefillAfterMs, Owner: resp.Owner, Degraded: resp.Degraded, Reservation: resp.Reservation,
			ExpiresInMS: resp.ExpiresInMs, Refunded: resp.Refunded, Over: resp.Over, Settled: settledName(resp.Settled)})
	} else {
		printOp(stdout, op, *hits, resp)
	}
	if !resp.Allowed && (op == pb.Op_CHECK || op == pb.Op_RESERVE || op == pb.Op_ACQUIRE) {
		return exitDenied
	}
	if op == pb.Op_RELEASE && resp.Settled == pb.Settled_SETTLED_BEFORE {
		return exitClosed
	}
	return exitOK
}

// burstFlag is --burst as the request carries it: absent unless given,
// and given only positive and with --algorithm gcra (an error is a usage
// error). A policy's burst is the policy's: algo is then the default,
// and --burst refused.
func burstFlag(given bool, burst int64, algo pb.Algorithm) (*int64, error) {
	switch {
	case !given:
		return nil, nil
	case algo != pb.Algorithm_GCRA:
		return nil, errors.New("--burst is only for --algorithm gcra (a policy gives its own)")
	case burst <= 0:
		return nil, fmt.Errorf("--burst must be positive, got %d; leave it out for a bucket of --limit hits", burst)
	}
	return &burst, nil
}

// given reports whether the flag name was set on the command line.
func (c *command) given(name string) bool {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// settledName is the JSON spelling of s: absent when unspecified.
func settledName(s pb.Settled) string {
	if s == pb.Settled_SETTLED_UNSPECIFIED {
		return ""
	}
	return s.String()
}

// printOp prints resp to op for people: the decision, then what the op
// reports beside it.
func printOp(w io.Writer, op pb.Op, hits int64, resp *pb.CheckResponse) {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	switch {
	case op == pb.Op_RELEASE && resp.Settled == pb.Settled_SETTLED_BEFORE:
		// Its numbers are the first close's: saying "released … refunded N"
		// would claim a refund that did not happen now.
		fmt.Fprintf(w, "not released: the reservation was already settled or released (its first answer refunded %d, over the limit by %d); ",
			resp.Refunded, resp.Over)
	case op == pb.Op_SETTLE || op == pb.Op_RELEASE:
		fmt.Fprintf(w, "%sd (%s): refunded %d, over the limit by %d; ", strings.ToLower(op.String()), resp.Settled, resp.Refunded, resp.Over)
	case op == pb.Op_REFUND:
		fmt.Fprintf(w, "refunded %d of %d; ", resp.Refunded, hits)
	case op == pb.Op_CHARGE:
		fmt.Fprintf(w, "charged %d, over the limit by %d; ", hits, resp.Over)
	}
	switch {
	case op == pb.Op_RESERVE && resp.Allowed:
		fmt.Fprintf(w, "reserved %d: %d of %d remaining, expires in %s, reservation %s; decided by %s",
			hits, resp.Remaining, resp.Limit, ms(resp.ExpiresInMs), resp.Reservation, resp.Owner)
	case op == pb.Op_ACQUIRE && resp.Allowed:
		fmt.Fprintf(w, "acquired a slot: %d of %d free, frees itself in %s, reservation %s; decided by %s",
			resp.Remaining, resp.Limit, ms(resp.ExpiresInMs), resp.Reservation, resp.Owner)
	case resp.Allowed:
		fmt.Fprintf(w, "allowed: %d of %d remaining, resets in %s; decided by %s", resp.Remaining, resp.Limit, ms(resp.ResetAfterMs), resp.Owner)
	case op == pb.Op_CHECK || op == pb.Op_RESERVE || op == pb.Op_ACQUIRE:
		fmt.Fprintf(w, "denied: retry after %s (count %d of %d); decided by %s", ms(resp.RetryAfterMs), resp.CurrentCount, resp.Limit, resp.Owner)
	default: // counted whatever the limit said: the key is in debt
		fmt.Fprintf(w, "in debt: the next hit waits %s (limit %d); decided by %s", ms(resp.RetryAfterMs), resp.Limit, resp.Owner)
	}
	if resp.Degraded {
		fmt.Fprint(w, " (degraded: the owner was unreachable, the fallback answered)")
	}
	fmt.Fprintln(w)
}

func cmdMembers(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCommand("members", "", getenv, stdout, stderr)
	c.grpcFlags()
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError("takes no arguments")
	}
	m, err := call(c, pb.RateLimiterClient.Members, &pb.MembersRequest{})
	if err != nil {
		return c.fail(err)
	}
	// The shape of GET /v1/members: one JSON for both APIs.
	parts := make([]int, len(m.Members))
	for _, i := range m.PartitionOwners {
		if int(i) < len(parts) {
			parts[i]++
		}
	}
	out := httpapi.Members{Self: m.Self, Partitions: int(m.PartitionCount), Members: []httpapi.MemberInfo{}}
	for i, mm := range m.Members {
		info := httpapi.MemberInfo{ID: mm.Id, GRPCAddr: mm.GrpcAddr, GossipAddr: mm.GossipAddr, State: mm.State, Partitions: parts[i],
			Config: mm.Config, ConfigDiffers: mm.ConfigDiffers}
		if m.PartitionCount > 0 {
			info.Share = float64(parts[i]) / float64(m.PartitionCount)
		}
		out.Members = append(out.Members, info)
	}
	if c.json {
		c.printJSON(out)
		return exitOK
	}
	fmt.Fprintf(stdout, "as seen by %s (%d partitions)\n", out.Self, out.Partitions)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tGRPC\tGOSSIP\tPARTITIONS\tCONFIG")
	for _, mm := range out.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d (%.0f%%)\t%s\n", mm.ID, mm.State, mm.GRPCAddr, mm.GossipAddr, mm.Partitions, 100*mm.Share,
			configColumn(mm.Config, mm.ConfigDiffers))
	}
	_ = tw.Flush()
	return exitOK
}

// configColumn prints a member's configuration digests, by source, and
// marks those that differ from the answering node's: "policies=3f2a…
// envoy_rls=9c1d…*"; "-" when the member advertises none.
func configColumn(digests map[string]string, differs []string) string {
	if len(digests) == 0 && len(differs) == 0 {
		return "-"
	}
	var parts []string
	for _, src := range slices.Sorted(maps.Keys(digests)) {
		part := src + "=" + digests[src]
		if slices.Contains(differs, src) {
			part += "*"
		}
		parts = append(parts, part)
	}
	for _, src := range differs {
		if _, ok := digests[src]; !ok {
			parts = append(parts, src+"=none*")
		}
	}
	return strings.Join(parts, " ")
}

// ringEntry is one key's place in the ring, as `ring --json` prints it.
type ringEntry struct {
	Key       string `json:"key"`
	Partition int    `json:"partition"`
	Owner     string `json:"owner"`
	GRPCAddr  string `json:"grpc_addr"`
}

func cmdRing(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCommand("ring", "KEY...", getenv, stdout, stderr)
	c.grpcFlags()
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return c.usageError("want at least one KEY")
	}
	m, err := call(c, pb.RateLimiterClient.Members, &pb.MembersRequest{})
	if err != nil {
		return c.fail(err)
	}
	out := make([]ringEntry, 0, len(pos))
	for _, key := range pos {
		p, owner, err := client.OwnerOf(m, key) // the client's own routing
		if err != nil {
			return c.fail(err)
		}
		out = append(out, ringEntry{Key: key, Partition: p, Owner: owner.Id, GRPCAddr: owner.GrpcAddr})
	}
	if c.json {
		c.printJSON(out)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPARTITION\tOWNER\tGRPC")
	for _, e := range out {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", e.Key, e.Partition, e.Owner, e.GRPCAddr)
	}
	_ = tw.Flush()
	return exitOK
}

func cmdReset(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCommand("reset", "KEY", getenv, stdout, stderr)
	c.grpcFlags()
	var lf limitFlags
	lf.register(c.fs)
	all := c.fs.Bool("all-windows", false, "clear every window and algorithm of the key")
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError("want one KEY, got %d arguments", len(pos))
	}
	inline, sel, err := lf.inline()
	if err != nil {
		return c.usageError("%v", err)
	}
	req := &pb.ResetRequest{Key: pos[0], AllWindows: *all}
	switch {
	case *all && (lf.policy != "" || lf.windowed() || lf.algorithm != ""):
		return c.usageError("--all-windows clears every limit of the key: give no --policy, --window, --calendar or --algorithm")
	case *all:
	case !inline:
		req.Policy = lf.policy
	case !lf.windowed():
		return c.usageError("give --policy NAME, --window D [--algorithm A], --calendar UNIT [--time-zone Z], or --all-windows")
	default:
		req.WindowMs, req.Algorithm = lf.window.Milliseconds(), sel.algo
		req.Calendar, req.TimeZone = sel.cal, lf.timeZone
	}

	resp, err := call(c, pb.RateLimiterClient.Reset, req)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		c.printJSON(httpapi.ResetResponse{Owner: resp.Owner, Existed: resp.Existed, Cleared: resp.Cleared,
			MembersAsked: resp.MembersAsked, MembersAcknowledged: resp.MembersAcknowledged, CopiesCleared: resp.CopiesCleared})
		return exitOK
	}
	what := "nothing to clear"
	if resp.Existed {
		what = fmt.Sprintf("cleared %d state(s)", resp.Cleared)
	}
	others := "no other member to ask"
	if resp.MembersAsked > 0 {
		others = fmt.Sprintf("%d of %d other members answered", resp.MembersAcknowledged, resp.MembersAsked)
	}
	fmt.Fprintf(stdout, "reset %s on %s: %s; %s; %d copies dropped elsewhere\n", req.Key, resp.Owner, what, others, resp.CopiesCleared)
	if resp.MembersAcknowledged < resp.MembersAsked {
		fmt.Fprintln(stdout, "warning: a member that did not answer may still hold a copy, which its next handoff gives back to the owner; reset again later if the key stays blocked")
	}
	return exitOK
}

// healthURL is the default of healthcheck --addr: this host, on the port
// of PEERLIMIT_HTTP_ADDR (what a container running the node has set), else
// 8080.
func healthURL(getenv func(string) string) string {
	port := "8080"
	if _, p, err := net.SplitHostPort(getenv("PEERLIMIT_HTTP_ADDR")); err == nil && p != "" {
		port = p
	}
	return "http://127.0.0.1:" + port
}

// cmdHealthcheck asks GET /healthz. A FROM scratch image has no shell or
// curl, so the node binary itself is the HEALTHCHECK command.
func cmdHealthcheck(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := newCommand("healthcheck", "", getenv, stdout, stderr)
	c.fs.StringVar(&c.addr, "addr", healthURL(getenv), "HTTP address of the node (http://host:port, https://host:port, or host:port)")
	c.fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "deadline of the request")
	c.tlsFlags()
	pos, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if len(pos) != 0 {
		return c.usageError("takes no arguments")
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return c.usageError("%v", err)
	}
	url := strings.TrimSuffix(c.addr, "/")
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	hc := http.DefaultClient
	if tc != nil || strings.HasPrefix(url, "https://") {
		url = "https://" + strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		hc = &http.Client{Transport: tr}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
	if err != nil {
		return c.usageError("--addr: %v", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return c.fail(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "peerlimit-node healthcheck: %s answered %d %s\n", url, resp.StatusCode, body.Status)
		return exitError
	}
	fmt.Fprintln(stdout, body.Status)
	return exitOK
}
