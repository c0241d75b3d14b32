package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/ratelimitheader"
)

// Checker is what Middleware needs of a cluster: *Client, or a fake in
// tests.
type Checker interface {
	CheckN(ctx context.Context, key string, l Limit, n int64) (Decision, error)
}

var _ Checker = (*Client)(nil)

// KeyFunc names the rate-limit key of a request: requests with the same key
// share one quota. An error, or an empty key, means the request cannot be
// keyed; Middleware answers it 400 (see MiddlewareConfig.Key).
type KeyFunc func(*http.Request) (string, error)

// ErrNoKey wraps the errors that MiddlewareConfig.OnError receives when the
// KeyFunc failed or returned an empty key.
var ErrNoKey = errors.New("peerlimit middleware: no rate-limit key")

// KeyByIP keys a request by the host part of r.RemoteAddr: the peer of the
// TCP connection, which a client cannot choose.
//
// It deliberately ignores X-Forwarded-For, Forwarded and X-Real-IP: any
// client can send those headers with any value, so trusting them by default
// would let every request pick a fresh key and never be limited. Behind a
// reverse proxy or load balancer RemoteAddr is the proxy, so every client
// shares one quota; there, write a KeyFunc that reads the address your own
// proxy sets (e.g. the last X-Forwarded-For entry, the one your proxy
// appended), and only for requests that come from the proxy.
//
// A RemoteAddr without a port (a Unix socket's "@") is used whole. Note
// that one IPv6 client usually controls a whole /64; key by prefix if that
// matters to you.
func KeyByIP(r *http.Request) (string, error) {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil && host != "" {
		return host, nil
	}
	if r.RemoteAddr == "" {
		return "", errors.New("request has no RemoteAddr")
	}
	return r.RemoteAddr, nil
}

// KeyByHeader keys a request by the value of header name; a request without
// it (or with it empty) cannot be keyed, and Middleware answers it 400.
//
// The value is whatever the client sent: use a header that is authenticated
// before the middleware runs (an API key your auth layer has verified, a
// user id set by your gateway), or a client can rotate values to dodge the
// limit. To limit anonymous requests instead of rejecting them, fall back to
// the address:
//
//	FirstOf(Prefix("key:", KeyByHeader("X-API-Key")), Prefix("ip:", KeyByIP))
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if v := r.Header.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("missing header %s", http.CanonicalHeaderKey(name))
	}
}

// Prefix prepends prefix to f's keys. Use it to keep keys from different
// sources (or different middlewares sharing a cluster and a window) apart:
// the cluster counts by key, window and algorithm, so "user:42" under two
// limits of the same window would otherwise share its count.
func Prefix(prefix string, f KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := f(r)
		if err != nil || k == "" {
			return "", err
		}
		return prefix + k, nil
	}
}

// FirstOf returns the key of the first of fs that gives one (no error, not
// empty); when none does, the error says why each failed.
func FirstOf(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var errs []error
		for _, f := range fs {
			k, err := f(r)
			if err == nil && k != "" {
				return k, nil
			}
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			return "", err
		}
		return "", nil
	}
}

// MiddlewareConfig configures Middleware. Limit and Key are required.
type MiddlewareConfig struct {
	// Limit is the quota per key: Limit.Limit units (requests, by default)
	// per Limit.Window, counted by Limit.Algorithm.
	Limit Limit
	// Key names each request's key; see KeyByIP, KeyByHeader, Prefix and
	// FirstOf. A request it cannot key (an error, or "") is answered 400
	// and its handler does not run: letting it through unlimited would make
	// "omit the header" a way around the limit. Compose with FirstOf to
	// fall back to another key instead.
	Key KeyFunc
	// Policy names the quota policy in the RateLimit-Policy and RateLimit
	// headers: printable ASCII. Default "default".
	Policy string
	// Cost is how many units a request consumes. Default 1. 0 consumes
	// nothing: the check is a peek, which the cluster allows unless the key
	// is already over its limit, and the headers report the key's state. A
	// cost the cluster refuses (negative, or above Limit.Limit, which could
	// never be allowed) is answered 400.
	Cost func(*http.Request) int64
	// FailClosed answers 503 with "Retry-After: 1" when the cluster cannot
	// decide (unreachable, timed out, out of capacity). By default
	// (false) the middleware fails open: the request is served, without
	// rate-limit headers. OnError hears of it either way.
	FailClosed bool
	// LegacyHeaders also sets X-RateLimit-Limit (the quota),
	// X-RateLimit-Remaining and X-RateLimit-Reset, for clients that predate
	// the IETF fields. X-RateLimit-Reset is in seconds from now (the same
	// value as the RateLimit t parameter), not a Unix timestamp as some
	// services send.
	LegacyHeaders bool
	// Timeout bounds each check, within the request's context. Default
	// 250ms. Keep the Client's AttemptTimeout well below it, so that a
	// node that hangs still leaves time to ask another.
	Timeout time.Duration
	// OnError, if set, is called (for logging) with every error that kept a
	// request from being decided: cluster errors (whatever FailClosed
	// says), checks the cluster refused as invalid (a gRPC status with
	// codes.InvalidArgument, e.g. a key over the nodes' --max-key-bytes or
	// not UTF-8), and key errors (errors.Is(err, ErrNoKey)). It runs on the
	// request's goroutine before the response is written.
	OnError func(r *http.Request, err error)
	// Denied serves the requests over the limit. The RateLimit-Policy,
	// RateLimit and Retry-After headers are already set when it runs, and
	// its status defaults to 429 (it may write another with WriteHeader).
	// Default: 429 with the plain-text body "rate limit exceeded".
	Denied http.Handler
}

// Middleware limits an http.Handler through c: each request consumes Cost
// units of its key's quota, and is served when the cluster allows it.
//
// Every decided response, allowed or denied, carries the two fields of the
// IETF draft "RateLimit header fields for HTTP",
// draft-ietf-httpapi-ratelimit-headers-11 (whose syntax is unchanged from
// -10), as Structured Field Lists of one Item, the policy name as a String:
//
//	RateLimit-Policy: "default";q=100;w=60
//	RateLimit: "default";r=41;t=30
//
// q is Limit.Limit, in quota units (no qu parameter is sent: the draft's
// default unit is requests, which is what a unit is unless Cost says
// otherwise). w is Limit.Window in seconds, omitted when the window is not
// a whole number of seconds: the draft has no sub-second windows, and w is
// optional. r is the quota left after this request. No partition key (pk)
// is sent: keys are often addresses or credentials. t is in whole seconds,
// rounded up:
//   - for an allowed request, the decision's ResetAfter (the time until the
//     key's whole quota is back if nothing else is spent), capped at the
//     window. The draft's t is the time until more quota is available
//     (-10), or within which no more than r can be used (-11). Both
//     algorithms only give quota back as time passes, so spending r within
//     t ≤ w stays within the limit; the cap matters for the sliding window
//     counter, whose state lasts up to two windows;
//   - for a denied request, the same value as Retry-After: ceil(RetryAfter),
//     at least 1, after which the same request would be allowed if no other
//     traffic came (the draft asks that Retry-After not end before t).
//
// A denied request is answered by Denied (default 429) with Retry-After,
// and its handler does not run. Decisions the cluster marks Degraded (the
// key's owner was unreachable and a node answered by its fallback) are
// honoured as given, allowed or not. For what happens when no decision is
// made, see MiddlewareConfig's Key, Cost and FailClosed: no rate-limit
// headers are set then.
//
// Middleware returns an error for an invalid cfg.
func Middleware(c Checker, cfg MiddlewareConfig) (func(http.Handler) http.Handler, error) {
	if c == nil {
		return nil, errors.New("peerlimit middleware: nil Checker")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name, _ := ratelimitheader.String(cfg.Policy) // Validate checked it
	m := &middleware{c: c, cfg: cfg, name: name, policy: ratelimitheader.Policy(name, cfg.Limit.Limit, cfg.Limit.Window)}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

// DefaultMiddlewareConfig returns the defaults documented on
// MiddlewareConfig; Limit and Key are the caller's. As with Config, a zero
// field means its default, so MiddlewareConfig{Limit: ..., Key: ...} is
// complete.
func DefaultMiddlewareConfig() MiddlewareConfig {
	return MiddlewareConfig{Policy: "default", Timeout: 250 * time.Millisecond, Denied: http.HandlerFunc(deny)}
}

func deny(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
}

// withDefaults returns c with every zero field set to its default.
func (c MiddlewareConfig) withDefaults() MiddlewareConfig {
	d := DefaultMiddlewareConfig()
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if c.Denied == nil {
		c.Denied = d.Denied
	}
	return c
}

// Validate reports every unusable field of c as Middleware would use it:
// zero fields count as their defaults.
func (c MiddlewareConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Limit.Limit <= 0 {
		errs = append(errs, fmt.Errorf("Limit.Limit must be positive, got %d", c.Limit.Limit))
	}
	switch {
	case c.Limit.Calendar != NoCalendar:
		if c.Limit.Window != 0 {
			errs = append(errs, fmt.Errorf("Limit.Window must be 0 with Limit.Calendar (%s), whose period is the window, got %s", c.Limit.Calendar, c.Limit.Window))
		}
	case c.Limit.Window <= 0 || c.Limit.Window%time.Millisecond != 0:
		errs = append(errs, fmt.Errorf("Limit.Window must be a positive whole number of milliseconds, got %s", c.Limit.Window))
	}
	if c.Limit.Algorithm == Concurrency {
		errs = append(errs, errors.New("Limit.Algorithm CONCURRENCY counts requests in flight, which a check or a reservation cannot: take a slot with Client.Acquire and free it with Client.Release"))
	}
	if c.Key == nil {
		errs = append(errs, errors.New("Key is nil; use e.g. client.KeyByIP"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Timeout must not be negative, got %s", c.Timeout))
	}
	if _, err := ratelimitheader.String(c.Policy); err != nil {
		errs = append(errs, fmt.Errorf("Policy %q: %w", c.Policy, err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("peerlimit middleware: %w", err)
	}
	return nil
}

type middleware struct {
	c      Checker
	cfg    MiddlewareConfig
	name   string // the policy name, serialized
	policy string // the RateLimit-Policy value
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, ok := m.key(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), m.cfg.Timeout)
	d, err := m.c.CheckN(ctx, key, m.cfg.Limit, m.cost(r))
	cancel()
	if err != nil {
		if m.failed(w, r, err) {
			next.ServeHTTP(w, r)
		}
		return
	}
	if m.decided(w, r, d) {
		next.ServeHTTP(w, r)
	}
}

// key returns r's key, or answers 400 and returns false.
func (m *middleware) key(w http.ResponseWriter, r *http.Request) (string, bool) {
	key, err := m.cfg.Key(r)
	if err != nil || key == "" {
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrNoKey, err)
		} else {
			err = ErrNoKey
		}
		m.reject(w, r, err)
		return "", false
	}
	return key, true
}

func (m *middleware) cost(r *http.Request) int64 {
	if m.cfg.Cost != nil {
		return m.cfg.Cost(r)
	}
	return 1
}

// failed answers a request the cluster could not decide: 400 when it
// refused the check as invalid, 503 when FailClosed, else nothing. It
// reports whether to serve the request anyway (failing open).
func (m *middleware) failed(w http.ResponseWriter, r *http.Request, err error) bool {
	if status.Code(err) == codes.InvalidArgument {
		m.reject(w, r, err)
		return false
	}
	if m.cfg.OnError != nil {
		m.cfg.OnError(r, err)
	}
	if m.cfg.FailClosed {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return false
	}
	return true
}

// decided sets the rate-limit headers of d and, when d is denied, answers
// with Denied. It reports whether to serve the request.
func (m *middleware) decided(w http.ResponseWriter, r *http.Request, d Decision) bool {
	h := w.Header()
	window := m.cfg.Limit.Window
	if m.cfg.Limit.Calendar != NoCalendar {
		window = d.RefillAfter // a calendar limit's window is what is left of its period
	}
	t := ratelimitheader.T(d.Allowed, d.ResetAfter, d.RetryAfter, window)
	if !d.Allowed {
		h.Set(ratelimitheader.RetryAfter, strconv.FormatInt(t, 10))
	}
	remaining := max(d.Remaining, 0)
	h.Set(ratelimitheader.PolicyField, m.policy)
	h.Set(ratelimitheader.Field, ratelimitheader.Value(m.name, remaining, t))
	if m.cfg.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(m.cfg.Limit.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(t, 10))
	}
	if d.Allowed {
		return true
	}
	dw := &deniedWriter{ResponseWriter: w}
	m.cfg.Denied.ServeHTTP(dw, r)
	if !dw.wrote {
		dw.WriteHeader(http.StatusTooManyRequests)
	}
	return false
}

// reject answers 400 a request that cannot be checked as made.
func (m *middleware) reject(w http.ResponseWriter, r *http.Request, err error) {
	if m.cfg.OnError != nil {
		m.cfg.OnError(r, err)
	}
	http.Error(w, "missing or invalid rate-limit key", http.StatusBadRequest)
}

// deniedWriter makes 429 the status of a Denied handler that writes a body
// without choosing one.
type deniedWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *deniedWriter) WriteHeader(code int) {
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *deniedWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *deniedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
