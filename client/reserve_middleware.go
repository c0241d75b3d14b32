package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/internal/ratelimitheader"
)

// Reserver is what ReserveMiddleware needs of a cluster: *Client, or a
// fake in tests.
type Reserver interface {
	Reserve(ctx context.Context, key string, l Limit, estimate int64, ttl time.Duration) (Reservation, error)
	Settle(ctx context.Context, r Reservation, cost int64) (Settlement, error)
	Release(ctx context.Context, r Reservation) (Settlement, error)
}

var _ Reserver = (*Client)(nil)

// ReserveConfig configures ReserveMiddleware: MiddlewareConfig's fields
// mean what they mean for Middleware, except:
//   - Cost is the estimate reserved before the handler runs (default 1):
//     at least 1, at most Limit.Limit, else the request is answered 400.
//     For an LLM call, its max_tokens.
//   - Timeout bounds the reservation and, after the handler, the settle,
//     each. The settle runs even when the request's context has ended
//     (the client went away mid-stream): the work done is paid.
//   - OnError also hears of a settle or release that failed, after the
//     response; the reservation then counts as used when it expires.
type ReserveConfig struct {
	MiddlewareConfig
	// TTL is how long a reservation lasts unsettled: longer than the
	// slowest handler, or a slow stream's reservation counts as used
	// before it settles, and its settle charges only what exceeds it. 0
	// is the nodes' --reservation-ttl (1 minute by default).
	TTL time.Duration
	// OnSettle, if set, is called after each reservation is closed, with
	// the cost it was settled at (0 for a release) and the answer. For
	// metrics and logs; it runs on the request's goroutine.
	OnSettle func(r *http.Request, cost int64, s Settlement)
}

// Validate reports every unusable field of c as ReserveMiddleware would
// use it.
func (c ReserveConfig) Validate() error {
	err := c.MiddlewareConfig.Validate()
	if c.TTL < 0 || c.TTL%time.Millisecond != 0 {
		err = errors.Join(err, fmt.Errorf("peerlimit middleware: TTL must be a whole number of milliseconds, not negative, got %s", c.TTL))
	}
	return err
}

// ReserveMiddleware limits a handler whose cost is known only when it
// ends, such as a streamed LLM answer, through c: each request reserves
// Cost units of its key's quota before the handler runs, and when the
// handler returns the reservation is settled at what the handler
// reported with ReportUsage, so that the quota pays for the work done and
// no more.
//
// When the handler reported nothing, the reservation is released
// (everything given back) if the handler panicked or answered with a
// status of 400 or more, taken as work that did not happen; otherwise it
// is settled at the estimate, as reserved. When it reported usage, that
// is the cost, whatever the status, panics included: what streamed was
// spent. A panic goes on up after the settle.
//
// A denied reservation is answered as Middleware answers a denied check:
// Denied (default 429) with Retry-After and the RateLimit headers, which
// allowed requests carry too (r is what is left after the estimate).
// Errors and FailClosed are handled as Middleware handles them; a request
// served because the cluster could not be asked (failing open) is not
// metered.
//
// ReserveMiddleware returns an error for an invalid cfg.
func ReserveMiddleware(c Reserver, cfg ReserveConfig) (func(http.Handler) http.Handler, error) {
	if c == nil {
		return nil, errors.New("peerlimit middleware: nil Reserver")
	}
	cfg.MiddlewareConfig = cfg.MiddlewareConfig.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name, _ := ratelimitheader.String(cfg.Policy) // Validate checked it
	m := &reserving{c: c, cfg: cfg, mw: &middleware{cfg: cfg.MiddlewareConfig, name: name,
		policy: ratelimitheader.Policy(name, cfg.Limit.Limit, cfg.Limit.Window)}}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

// usage is what a handler reported, through its request's context.
type usage struct {
	n        atomic.Int64
	reported atomic.Bool
}

type usageKey struct{}

// ReportUsage adds n (≥ 0) units to what the request whose context ctx
// is (or derives from) has used, for ReserveMiddleware to settle at when
// the handler returns; call it as the work proceeds, e.g. once per token
// streamed, from any goroutine. Reporting 0 says the request used
// nothing (it is then settled at 0, not at its estimate). It reports
// whether the usage is counted: false when ctx is not a reserved
// request's (no ReserveMiddleware, or it failed open) or n < 0.
func ReportUsage(ctx context.Context, n int64) bool {
	u, _ := ctx.Value(usageKey{}).(*usage)
	if u == nil || n < 0 {
		return false
	}
	u.n.Add(n)
	u.reported.Store(true)
	return true
}

type reserving struct {
	c   Reserver
	cfg ReserveConfig
	mw  *middleware // keys, headers, denials and errors as Middleware's
}

func (m *reserving) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, ok := m.mw.key(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), m.cfg.Timeout)
	res, err := m.c.Reserve(ctx, key, m.cfg.Limit, m.mw.cost(r), m.cfg.TTL)
	cancel()
	if err != nil {
		if m.mw.failed(w, r, err) {
			next.ServeHTTP(w, r)
		}
		return
	}
	if !m.mw.decided(w, r, res.Decision) {
		return
	}
	u := &usage{}
	sw := &statusWriter{ResponseWriter: w}
	panicked := true
	defer func() { m.close(r, res, u, sw.status, panicked) }()
	next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), usageKey{}, u)))
	panicked = false
}

// close settles res at the reported usage, or releases it or settles it
// at its estimate when none was reported (see ReserveMiddleware).
func (m *reserving) close(r *http.Request, res Reservation, u *usage, status int, panicked bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.cfg.Timeout)
	defer cancel()
	var s Settlement
	var err error
	cost := u.n.Load()
	switch {
	case u.reported.Load():
		s, err = m.c.Settle(ctx, res, cost)
	case panicked || status >= http.StatusBadRequest:
		cost = 0
		s, err = m.c.Release(ctx, res)
	default:
		cost = res.Hits
		s, err = m.c.Settle(ctx, res, cost)
	}
	if err != nil {
		if m.cfg.OnError != nil {
			m.cfg.OnError(r, fmt.Errorf("peerlimit middleware: settling %d reserved at %d: %w", res.Hits, cost, err))
		}
		return
	}
	if m.cfg.OnSettle != nil {
		m.cfg.OnSettle(r, cost, s)
	}
}

// statusWriter remembers the status a handler answered with, and keeps
// flushing possible, which a streaming handler needs through the wrapper.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher for handlers that assert it.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
