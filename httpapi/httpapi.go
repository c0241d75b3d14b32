// Package httpapi serves the public API as JSON over HTTP: POST /v1/check,
// POST /v1/check:batch and POST /v1/reset with the proto field names,
// GET /v1/members, GET /v1/policies, GET /v1/envoy-rls/config, the
// operator's console (GET /ui/ and the JSON it polls: /v1/cluster,
// /v1/top, /v1/inspect), GET /healthz
// (and /healthcheck, envoyproxy/ratelimit's name),
// GET /metrics and, when enabled, /debug/pprof/. It decides through the same route.Service as the
// gRPC API.
//
// int64 fields are plain JSON numbers (not the strings of the proto3 JSON
// mapping), so that curl users read "limit": 5. A denied check is a normal
// 200 answer with "allowed": false; bad input is 400 with a JSON error that
// names the field.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/peerlimit/peerlimit/envoyrls/rlconfig"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/logging"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/policy"
	"github.com/peerlimit/peerlimit/reset"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/security/scope"
)

// Checker decides checks and resets; *route.Service is one.
type Checker interface {
	Check(ctx context.Context, req limiter.Request) peer.Result
	CheckBatch(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error)
	CheckAll(ctx context.Context, reqs []limiter.Request) ([]peer.Result, error)
	BatchTooLarge(what string, n int) error
	PolicyRequest(name, key string, hits *int64, given string) (limiter.Request, error)
	NewResetRequest(key string, windowMS int64, algo limiter.Algorithm, algoSet bool, cal limiter.Calendar, policy string, all bool) (peer.ResetRequest, error)
	Reset(ctx context.Context, r peer.ResetRequest) (reset.Result, error)
}

var _ Checker = (*route.Service)(nil)

// Config holds the handler's settings. Start from DefaultConfig.
type Config struct {
	// MaxBodyBytes caps a request body; a larger one is 413. Default 1 MiB.
	MaxBodyBytes int64
	// Pprof serves Go's profiles under /debug/pprof/ (see pprof.go). Off
	// by default: profiles reveal internals and a CPU profile costs CPU.
	Pprof bool
	// AuthMetrics puts /metrics behind Deps.Auth too. Off by default:
	// metrics hold counts and member ids, no keys, and scrapers are often
	// set up without credentials.
	AuthMetrics bool
	// AllowedOrigins are the web origins (scheme://host[:port]) whose
	// pages a browser may send requests from to this node, with CORS
	// headers for them (crosssite.go). Empty by default: a browser's
	// cross-site POST is refused 403 and no answer carries CORS headers.
	// Clients that are no browser (curl, servers) are unaffected.
	AllowedOrigins []string
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{MaxBodyBytes: 1 << 20} }

// Validate reports an unusable Config.
func (c Config) Validate() error {
	if c.MaxBodyBytes < 1 {
		return field.Errorf("MaxBodyBytes", "must be ≥ 1, got %d", c.MaxBodyBytes)
	}
	return validOrigins(c.AllowedOrigins)
}

// Deps is what the handler serves beyond checks and resets, supplied by
// whoever assembles the node. Each is optional.
type Deps struct {
	// Healthy reports whether the node serves; /healthz answers 503 when it
	// returns false (e.g. while shutting down). Nil: always healthy.
	Healthy func() bool
	// Metrics serves GET /metrics; nil leaves it out.
	Metrics http.Handler
	// Members serves GET /v1/members; nil leaves it out.
	Members func() Members
	// Policies serves GET /v1/policies: the policies in force, or nil when
	// the node has none. Nil leaves the route out.
	Policies func() *policy.Set
	// EnvoyRLS serves GET /v1/envoy-rls/config (envoyrls.go): the Envoy
	// rate limit service's rules in force and when they were put in
	// force (envoyrls.Viewer makes it of a RuleSet), or nil when the node
	// serves none. Nil leaves the route out.
	EnvoyRLS func() *rlconfig.View
	// Auth, if set, guards every /v1/ route (and /metrics with
	// Config.AuthMetrics): it returns the caller's scopes (package scope)
	// to let a request through, or why not, which is answered 401
	// UNAUTHENTICATED. A route or an op the scopes do not cover is 403
	// PERMISSION_DENIED naming it. /healthz stays open for probes. Nil:
	// every caller has every scope.
	Auth func(*http.Request) (scope.Set, error)
	// Console serves the console's data: GET /v1/cluster, /v1/top and
	// /v1/inspect. Nil leaves them out (the page, /ui/, is always served).
	Console Console
	// ConfigErrors, if set, returns why the last reload of each
	// configuration source failed (policies, envoy_rls), by source; empty
	// when none is failing. /healthz shows them as config_errors without
	// changing its status: the node still serves, from the configuration
	// in force, so a bad file must not take it out of rotation.
	ConfigErrors func() map[string]string
	// Tracer, if set, records a server span for each check call
	// (trace.go), under the trace context Propagator reads from the
	// request's headers (traceparent, b3, x-b3-*; nil: none read).
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
}

// Members is the answer of GET /v1/members: the members this node sees and
// the ring's share of each.
type Members struct {
	Self       string       `json:"self"`
	Partitions int          `json:"partitions"`
	Members    []MemberInfo `json:"members"`
	// FaultInjection names the faults injected into the answering node on
	// purpose (node.Config.Faults: a wrong clock, an open peer port).
	// Absent when none: never on a node serving real traffic.
	FaultInjection []string `json:"fault_injection,omitempty"`
}

// MemberInfo is one member. State is alive, failed (declared dead; being
// reconnected) or left; only alive members own partitions.
type MemberInfo struct {
	ID         string  `json:"id"`
	GRPCAddr   string  `json:"grpc_addr"`
	GossipAddr string  `json:"gossip_addr"`
	State      string  `json:"state"`
	Partitions int     `json:"partitions"`
	Share      float64 `json:"share"`
	// Config is the digests of the configurations the member serves, by
	// source (policies, envoy_rls), as it advertises them: the first 12
	// hex digits of their SHA-256. {} when it serves none; null when it
	// advertises none (not alive, or a version before digests).
	Config map[string]string `json:"config"`
	// ConfigDiffers lists the sources whose digest differs from the
	// answering node's own (a source only one of them serves included):
	// requests using them may be decided differently there. Absent when
	// they agree, or when the member's digests are unknown.
	ConfigDiffers []string `json:"config_differs,omitempty"`
	// FaultInjection: the member advertises that it runs with a fault
	// injected on purpose (its own /v1/members and /metrics say which).
	// Absent otherwise.
	FaultInjection bool `json:"fault_injection,omitempty"`
}

// CheckRequest is the JSON form of peerlimit.v1.CheckRequest.
type CheckRequest struct {
	Key       string `json:"key"`
	Limit     int64  `json:"limit"`
	WindowMS  int64  `json:"window_ms"`
	Algorithm string `json:"algorithm,omitempty"`
	Hits      *int64 `json:"hits,omitempty"`
	Policy    string `json:"policy,omitempty"`
	// Op, Reservation and TTLMS are peerlimit.v1.CheckRequest's op (by
	// name), reservation and ttl_ms.
	Op          string `json:"op,omitempty"`
	Reservation string `json:"reservation,omitempty"`
	TTLMS       int64  `json:"ttl_ms,omitempty"`
	// Calendar and TimeZone are peerlimit.v1.CheckRequest's calendar (by
	// name, in any case: "month" or "MONTH") and time_zone.
	Calendar string `json:"calendar,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	// Burst is peerlimit.v1.CheckRequest's burst: a GCRA bucket's size,
	// absent for the limit; an explicit 0 or less is refused naming it.
	Burst *int64 `json:"burst,omitempty"`
}

// CheckResponse is the JSON form of peerlimit.v1.CheckResponse.
type CheckResponse struct {
	Allowed       bool   `json:"allowed"`
	Limit         int64  `json:"limit"`
	Remaining     int64  `json:"remaining"`
	CurrentCount  int64  `json:"current_count"`
	RetryAfterMS  int64  `json:"retry_after_ms"`
	ResetAfterMS  int64  `json:"reset_after_ms"`
	RefillAfterMS int64  `json:"refill_after_ms"`
	Owner         string `json:"owner"`
	Degraded      bool   `json:"degraded"`
	// What an op other than CHECK reports (peerlimit.v1.CheckResponse),
	// absent for a check.
	Reservation string `json:"reservation,omitempty"`
	ExpiresInMS int64  `json:"expires_in_ms,omitempty"`
	Refunded    int64  `json:"refunded,omitempty"`
	Over        int64  `json:"over,omitempty"`
	Settled     string `json:"settled,omitempty"`
}

// CheckBatchRequest is the JSON form of peerlimit.v1.CheckBatchRequest.
type CheckBatchRequest struct {
	Checks       []CheckRequest `json:"checks"`
	AllOrNothing bool           `json:"all_or_nothing,omitempty"`
}

// CheckBatchResponse is the JSON form of peerlimit.v1.CheckBatchResponse.
type CheckBatchResponse struct {
	Results []CheckResult `json:"results"`
}

// CheckResult holds exactly one of Response and Error.
type CheckResult struct {
	Response *CheckResponse `json:"response,omitempty"`
	Error    *Error         `json:"error,omitempty"`
}

// Error is the JSON error of a failed request or batch item. Code is the
// gRPC code's name (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, …).
type Error struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// ResetRequest is the JSON form of peerlimit.v1.ResetRequest.
type ResetRequest struct {
	Key        string `json:"key"`
	WindowMS   int64  `json:"window_ms,omitempty"`
	Algorithm  string `json:"algorithm,omitempty"`
	Policy     string `json:"policy,omitempty"`
	AllWindows bool   `json:"all_windows,omitempty"`
	Calendar   string `json:"calendar,omitempty"`
	TimeZone   string `json:"time_zone,omitempty"`
}

// ResetResponse is the JSON form of peerlimit.v1.ResetResponse.
type ResetResponse struct {
	Owner               string `json:"owner"`
	Existed             bool   `json:"existed"`
	Cleared             uint32 `json:"cleared"`
	MembersAsked        uint32 `json:"members_asked"`
	MembersAcknowledged uint32 `json:"members_acknowledged"`
	CopiesCleared       uint32 `json:"copies_cleared"`
}

// Policies is the answer of GET /v1/policies: the node's policy file and
// what it defines. Digest is the file's SHA-256: nodes showing the same
// digest resolve every policy alike.
type Policies struct {
	File     string       `json:"file"`
	Digest   string       `json:"digest"`
	Policies []PolicyInfo `json:"policies"`
}

// PolicyInfo is one policy. Window is WindowMS as a Go duration, for
// people.
type PolicyInfo struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	WindowMS  int64  `json:"window_ms"`
	Window    string `json:"window"`
	// Calendar and TimeZone are a calendar policy's unit and zone; its
	// window is then 0.
	Calendar string `json:"calendar,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	// Burst is a GCRA policy's bucket size, absent when it is the limit.
	Burst int64 `json:"burst,omitempty"`
}

type errorBody struct {
	Error Error `json:"error"`
}

// NewHandler returns the node's HTTP API over c, or why cfg is unusable.
func NewHandler(c Checker, cfg Config, deps Deps) (http.Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &handler{c: c, cfg: cfg, deps: deps, console: deps.Console}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/check", h.traced("POST /v1/check", h.guard(http.HandlerFunc(h.check))))
	mux.Handle("POST /v1/check:batch", h.traced("POST /v1/check:batch", h.guard(http.HandlerFunc(h.checkBatch))))
	mux.Handle("POST /v1/reset", h.guardNeed(scope.Reset, "Reset", http.HandlerFunc(h.reset)))
	mux.HandleFunc("GET /healthz", h.healthz)
	// envoyproxy/ratelimit's name for it, which Envoy Gateway's probes ask.
	mux.HandleFunc("GET /healthcheck", h.healthz)
	if deps.Metrics != nil {
		m := deps.Metrics
		if cfg.AuthMetrics {
			m = h.guard(m)
		}
		mux.Handle("GET /metrics", m)
	}
	if deps.Members != nil {
		mux.Handle("GET /v1/members", h.guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, deps.Members())
		})))
	}
	if deps.Policies != nil {
		mux.Handle("GET /v1/policies", h.guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, policiesJSON(deps.Policies()))
		})))
	}
	if deps.EnvoyRLS != nil {
		mux.Handle("GET /v1/envoy-rls/config", h.guard(http.HandlerFunc(h.envoyRLSConfig)))
	}
	h.registerConsole(mux)
	if cfg.Pprof {
		registerPprof(mux)
	}
	return newCrossSite(cfg.AllowedOrigins, mux), nil
}

// guard answers 401 to a request Deps.Auth refuses, before its body is
// read, and gives next the caller's scopes in the request's context
// (scope.FromContext), for the ops it asks.
func (h *handler) guard(next http.Handler) http.Handler { return h.guardNeed(0, "", next) }

// guardNeed is guard for a route that needs the scopes need: a caller
// without them is answered 403 naming what, the route's operation.
func (h *handler) guardNeed(need scope.Set, what string, next http.Handler) http.Handler {
	if h.deps.Auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := h.deps.Auth(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="peerlimit"`)
			writeJSON(w, http.StatusUnauthorized, errorBody{Error{Code: "UNAUTHENTICATED", Message: err.Error()}})
			return
		}
		if err := s.Need(need, what, ""); err != nil {
			writeError(w, err)
			return
		}
		if s != scope.All { // All is what a context without scopes means
			r = r.WithContext(scope.WithContext(r.Context(), s))
		}
		next.ServeHTTP(w, r)
	})
}

type handler struct {
	c       Checker
	console Console // nil: no console data routes
	cfg     Config
	deps    Deps
}

func (h *handler) check(w http.ResponseWriter, r *http.Request) {
	var in CheckRequest
	if !h.decode(w, r, &in) {
		return
	}
	req, err := h.request(in)
	if err == nil {
		err = scope.FromContext(r.Context()).AllowOp(req.Op)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	res := h.c.Check(requestContext(w, r), req)
	if res.Err != nil {
		writeError(w, res.Err)
		return
	}
	writeJSON(w, http.StatusOK, toJSON(res))
}

func (h *handler) checkBatch(w http.ResponseWriter, r *http.Request) {
	var in CheckBatchRequest
	if !h.decode(w, r, &in) {
		return
	}
	if err := h.c.BatchTooLarge("checks", len(in.Checks)); err != nil {
		writeError(w, err)
		return
	}
	out := CheckBatchResponse{Results: make([]CheckResult, len(in.Checks))}
	reqs := make([]limiter.Request, 0, len(in.Checks))
	idx := make([]int, 0, len(in.Checks))
	scopes := scope.FromContext(r.Context())
	for i, c := range in.Checks {
		req, err := h.request(c)
		if err == nil {
			err = scopes.AllowOp(req.Op)
		}
		if err != nil && in.AllOrNothing {
			writeError(w, route.ItemError(i, err)) // nothing of the batch may count: refused whole
			return
		}
		if err != nil {
			out.Results[i].Error = errorOf(err)
			continue
		}
		reqs = append(reqs, req)
		idx = append(idx, i)
	}
	check := h.c.CheckBatch
	if in.AllOrNothing {
		check = h.c.CheckAll
	}
	results, err := check(requestContext(w, r), reqs)
	if err != nil {
		writeError(w, err)
		return
	}
	for j, res := range results {
		if res.Err != nil {
			out.Results[idx[j]].Error = errorOf(res.Err)
		} else {
			resp := toJSON(res)
			out.Results[idx[j]].Response = &resp
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) reset(w http.ResponseWriter, r *http.Request) {
	var in ResetRequest
	if !h.decode(w, r, &in) {
		return
	}
	algo, err := limiter.ParseAlgorithm(in.Algorithm)
	if err != nil {
		writeError(w, err)
		return
	}
	cal, err := parseCalendar(in.Calendar, in.TimeZone)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := h.c.NewResetRequest(in.Key, in.WindowMS, algo, in.Algorithm != "", cal, in.Policy, in.AllWindows)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := h.c.Reset(requestContext(w, r), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ResetResponse{Owner: res.Owner, Existed: res.Existed(), Cleared: uint32(res.Cleared),
		MembersAsked: uint32(res.MembersAsked), MembersAcknowledged: uint32(res.MembersAcknowledged),
		CopiesCleared: uint32(res.CopiesCleared)})
}

// requestContext returns r's context carrying the client's X-Request-Id,
// when it sent a valid one (peer.ValidRequestID), and echoes it: the nodes'
// log lines about the request name it as request_id. An invalid one is
// ignored, not refused.
func requestContext(w http.ResponseWriter, r *http.Request) context.Context {
	id := r.Header.Get("X-Request-Id")
	if id == "" || !peer.ValidRequestID(id) {
		return r.Context()
	}
	w.Header().Set("X-Request-Id", id)
	return peer.WithRequestID(r.Context(), id)
}

func policiesJSON(set *policy.Set) Policies {
	out := Policies{Policies: []PolicyInfo{}}
	if set == nil {
		return out
	}
	out.File, out.Digest = set.File, set.Digest
	for _, p := range set.All() {
		info := PolicyInfo{Name: p.Name, Algorithm: p.Algorithm.String(),
			Limit: p.Limit, WindowMS: p.Window.Milliseconds(), Window: p.Window.String(), Burst: p.Burst}
		info.Calendar, info.TimeZone = calendarJSON(p.Calendar)
		out.Policies = append(out.Policies, info)
	}
	return out
}

func (h *handler) healthz(w http.ResponseWriter, _ *http.Request) {
	body := map[string]any{"status": "SERVING"}
	code := http.StatusOK
	if h.deps.Healthy != nil && !h.deps.Healthy() {
		body["status"], code = "NOT_SERVING", http.StatusServiceUnavailable
	}
	if h.deps.ConfigErrors != nil {
		if errs := h.deps.ConfigErrors(); len(errs) > 0 {
			body["config_errors"] = errs
		}
	}
	writeJSON(w, code, body)
}

// decode reads one JSON value into v, strictly: unknown fields, trailing
// data, wrong types and oversize bodies are all answered here, with the
// field named where there is one. It reports whether v is usable.
func (h *handler) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error{Code: "RESOURCE_EXHAUSTED",
				Message: fmt.Sprintf("request body exceeds %d bytes", mbe.Limit)}})
			return false
		}
		writeJSON(w, http.StatusBadRequest, errorBody{Error{Code: "INVALID_ARGUMENT", Message: "reading body: " + err.Error()}})
		return false
	}
	if err := Decode(body, v); err != nil {
		writeError(w, err)
		return false
	}
	return true
}

// Decode parses body into v with the API's strict rules: besides what
// encoding/json refuses, unknown fields, trailing data, a key twice in one
// object and strings that are not valid UTF-8 (checkUnambiguous). Errors
// are *limiter.ArgumentError naming the field when one is at fault. v is
// one of the API's request structs: a map would let an object hold many
// keys, which the duplicate check searches linearly.
func Decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	// More() is false before a stray '}' or ']', so ask for one more token:
	// only the end of the input will do.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &limiter.ArgumentError{Field: "body", Reason: "unexpected data after the JSON object"}
	}
	return checkUnambiguous(body)
}

// jsonError turns encoding/json's errors into ones that name the field.
func jsonError(err error) error {
	var (
		typeErr *json.UnmarshalTypeError
		synErr  *json.SyntaxError
	)
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return &limiter.ArgumentError{Field: field, Reason: fmt.Sprintf("must be %s, got JSON %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)}
	case errors.As(err, &synErr):
		return &limiter.ArgumentError{Field: "body", Reason: fmt.Sprintf("malformed JSON at byte %d: %v", synErr.Offset, err)}
	case errors.Is(err, io.EOF):
		return &limiter.ArgumentError{Field: "body", Reason: "empty; want a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &limiter.ArgumentError{Field: "body", Reason: "truncated JSON"}
	}
	// DisallowUnknownFields reports `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &limiter.ArgumentError{Field: limiter.Echo(strings.Trim(name, `"`)), Reason: "unknown field"}
	}
	return &limiter.ArgumentError{Field: "body", Reason: err.Error()}
}

func jsonKind(k string) string {
	switch k {
	case "int64":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "ptr":
		return "an object"
	}
	return k
}

// request converts a JSON check. Any algorithm given counts as given: in
// JSON, unlike proto3, an explicit SLIDING_WINDOW_COUNTER is visible, so
// it cannot be sent with a policy either.
func (h *handler) request(c CheckRequest) (limiter.Request, error) {
	algo, err := limiter.ParseAlgorithm(c.Algorithm)
	if err != nil {
		return limiter.Request{}, err
	}
	op, err := limiter.ParseOp(c.Op)
	if err != nil {
		return limiter.Request{}, err
	}
	cal, err := parseCalendar(c.Calendar, c.TimeZone)
	if err != nil {
		return limiter.Request{}, err
	}
	burst, err := parseBurst(c.Burst)
	if err != nil {
		return limiter.Request{}, err
	}
	var r limiter.Request
	if c.Policy != "" {
		given := route.InlineField(c.Limit, c.WindowMS, c.Algorithm != "")
		switch {
		case given != "":
		case c.Calendar != "":
			given = "calendar"
		case c.TimeZone != "":
			given = "time_zone"
		case c.Burst != nil:
			given = "burst"
		}
		if r, err = h.c.PolicyRequest(c.Policy, c.Key, c.Hits, given); err != nil {
			return r, err
		}
	} else {
		r = limiter.NewRequest(c.Key, c.Limit, c.WindowMS, algo, c.Hits)
		r.Calendar, r.Burst = cal, burst
	}
	if op == limiter.OpCheck && c.Reservation == "" && c.TTLMS == 0 {
		return r, nil
	}
	return r, r.SetOp(op, c.Reservation, c.TTLMS, c.Hits != nil)
}

// parseBurst reads a JSON request's optional burst as Request.Burst,
// where 0 means absent (the limit): an explicit burst must be positive,
// or it is refused naming the field rather than read as absent. The gRPC
// face's twin is protoconv.BurstFromAPI.
func parseBurst(burst *int64) (int64, error) {
	switch {
	case burst == nil:
		return 0, nil
	case *burst <= 0:
		return 0, &limiter.ArgumentError{Field: "burst", Reason: fmt.Sprintf("must be positive, got %d; leave it out for a bucket of limit hits", *burst)}
	}
	return *burst, nil
}

// parseCalendar reads a JSON request's calendar and time_zone; bad
// values are refused naming the field.
func parseCalendar(unit, zone string) (limiter.Calendar, error) {
	if unit == "" && zone == "" {
		return 0, nil
	}
	u, err := limiter.ParseCalendarUnit(unit)
	if err != nil {
		return 0, err
	}
	return limiter.NewCalendar(u, zone)
}

// calendarJSON is c's unit and zone as JSON shows them; "" for none.
func calendarJSON(c limiter.Calendar) (unit, zone string) {
	if c == 0 {
		return "", ""
	}
	return c.Unit().String(), c.Zone()
}

func toJSON(r peer.Result) CheckResponse {
	d := r.Decision
	out := CheckResponse{
		Allowed:       d.Allowed,
		Limit:         d.Limit,
		Remaining:     d.Remaining,
		CurrentCount:  d.CurrentCount,
		RetryAfterMS:  d.RetryAfter.Milliseconds(),
		ResetAfterMS:  d.ResetAfter.Milliseconds(),
		RefillAfterMS: d.RefillAfter.Milliseconds(),
		Owner:         r.Owner,
		Degraded:      r.Degraded,
	}
	if a := d.Adjust; a != nil {
		out.Reservation, out.ExpiresInMS, out.Refunded, out.Over = a.Reservation, a.ExpiresIn.Milliseconds(), a.Refunded, a.Over
		out.Settled = a.Settled.String()
	}
	return out
}

// maxMessage caps an error's message: each value it repeats is capped
// already (limiter.Echo); this bounds what a message built of many, or
// one from another member, can cost. gRPC's cap.
const maxMessage = 1024

func errorOf(err error) *Error {
	return &Error{Code: peer.CodeOf(err).String(), Field: limiter.Echo(peer.FieldOf(err)), Message: logging.ClipWithin(err.Error(), maxMessage)}
}

// writeError answers a failed request with the HTTP status its code maps to.
func writeError(w http.ResponseWriter, err error) {
	e := errorOf(err)
	status := http.StatusInternalServerError
	switch e.Code {
	case "INVALID_ARGUMENT":
		status = http.StatusBadRequest
	case "FAILED_PRECONDITION":
		status = http.StatusConflict // a settle retried at another cost: the state conflicts, the request is well formed
	case "PERMISSION_DENIED":
		status = http.StatusForbidden
	case "UNAUTHENTICATED":
		status = http.StatusUnauthorized
	case "RESOURCE_EXHAUSTED":
		status = http.StatusTooManyRequests
		if errors.Is(err, route.ErrBatchTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
	case "DEADLINE_EXCEEDED":
		status = http.StatusGatewayTimeout
	case "UNAVAILABLE":
		status = http.StatusServiceUnavailable
	case "CANCELLED":
		status = 499 // client closed request, as nginx and grpc-gateway say
	}
	writeJSON(w, status, errorBody{*e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}
