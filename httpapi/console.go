package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/security/scope"
	"github.com/peerlimit/peerlimit/topk"
)

// The operator's console: GET /ui/ (the page, package console), and the
// JSON it polls: GET /v1/cluster, GET /v1/top, GET /v1/inspect.
// docs/console.md describes every field.

// Console is what the console's routes ask of the node: an inspection of
// a key on its owner (route.Service's) and every member's report and the
// cluster's top keys (console.Cluster's).
type Console interface {
	Inspect(ctx context.Context, req route.InspectRequest) (route.InspectResult, error)
	Reports(ctx context.Context, req peer.ReportRequest) []console.MemberReport
	Top(ctx context.Context, n int) (console.TopKeys, error)
}

// reportTimeout bounds how long the console waits for a member's report:
// a member that does not answer in time is shown with its error, so one
// slow member cannot stall the page.
const reportTimeout = 2 * time.Second

// Cluster is the answer of GET /v1/cluster.
type Cluster struct {
	Self       string          `json:"self"`
	TimeMS     int64           `json:"time_ms"`
	Partitions int             `json:"partitions"`
	Members    []ClusterMember `json:"members"`
	Top        Top             `json:"top"`
}

// ClusterMember is a member, its samples, or why it could not be asked.
type ClusterMember struct {
	MemberInfo
	Error   string   `json:"error"`
	Samples []Sample `json:"samples"`
}

// Sample is one second of a member's request path, rates per second; the
// p99s (ms) are null when nothing was observed.
type Sample struct {
	TimeMS              int64    `json:"time_ms"`
	LocalAllowed        float64  `json:"local_allowed"`
	LocalDenied         float64  `json:"local_denied"`
	ForwardedAllowed    float64  `json:"forwarded_allowed"`
	ForwardedDenied     float64  `json:"forwarded_denied"`
	FallbackAllowed     float64  `json:"fallback_allowed"`
	FallbackDenied      float64  `json:"fallback_denied"`
	Errors              float64  `json:"errors"`
	PeerChecks          float64  `json:"peer_checks"`
	Degraded            float64  `json:"degraded"`
	HandoffKeys         float64  `json:"handoff_keys"`
	ForwardP99MS        *float64 `json:"forward_p99_ms"`
	ReplicationLagP99MS *float64 `json:"replication_lag_p99_ms"`
}

// Top is the cluster's hot keys over the last 30 to 60 s (GET /v1/top).
type Top struct {
	SinceMS         int64    `json:"since_ms"`
	MembersAsked    int      `json:"members_asked"`
	MembersAnswered int      `json:"members_answered"`
	Checks          []HotKey `json:"checks"`
	Denials         []HotKey `json:"denials"`
}

// HotKey is a key and its count, an overestimate by at most Error.
type HotKey struct {
	Key   string `json:"key"`
	Count uint64 `json:"count"`
	Error uint64 `json:"error"`
}

// Inspect is the answer of GET /v1/inspect.
type Inspect struct {
	Key       string    `json:"key"`
	Owner     string    `json:"owner"`
	Replica   string    `json:"replica"`
	Partition int       `json:"partition"`
	Limits    []KeyView `json:"limits"`
	// Leases are the budget leases the owner has lent on the key and not
	// yet seen settled.
	Leases []LeaseView `json:"leases"`
	// Reservations are the reservations open on the key, soonest expiry
	// first, at most 100.
	Reservations []ReservationView `json:"reservations"`
}

// ReservationView is one reservation open on a key.
type ReservationView struct {
	Algorithm   string `json:"algorithm"`
	WindowMS    int64  `json:"window_ms"`
	Calendar    string `json:"calendar,omitempty"`
	TimeZone    string `json:"time_zone,omitempty"`
	Hits        int64  `json:"hits"`
	Hold        bool   `json:"hold"`
	AgeMS       int64  `json:"age_ms"`
	ExpiresInMS int64  `json:"expires_in_ms"`
}

// LeaseView is one budget lease lent on a key.
type LeaseView struct {
	Holder      string `json:"holder"`
	Hits        int64  `json:"hits"`
	ExpiresInMS int64  `json:"expires_in_ms"`
}

// KeyView is one of the key's limits.
type KeyView struct {
	Algorithm string `json:"algorithm"`
	WindowMS  int64  `json:"window_ms"`
	// Calendar and TimeZone are a calendar limit's unit and zone; its
	// counter's window_start_ms is then its period's start.
	Calendar     string       `json:"calendar,omitempty"`
	TimeZone     string       `json:"time_zone,omitempty"`
	Count        int64        `json:"count"`
	ResetAfterMS int64        `json:"reset_after_ms"`
	Counter      *CounterView `json:"counter,omitempty"`
	Log          *LogView     `json:"log,omitempty"`
	NextAllowMS  *int64       `json:"next_allow_ms,omitempty"`
}

// CounterView is a sliding window counter's two fixed windows.
type CounterView struct {
	WindowStartMS int64 `json:"window_start_ms"`
	Previous      int64 `json:"previous"`
	Current       int64 `json:"current"`
}

// LogView is a sliding window log's hits in the window, by age, oldest
// first.
type LogView struct {
	EntriesAgeMS []int64 `json:"entries_age_ms"`
}

func (h *handler) registerConsole(mux *http.ServeMux) {
	mux.Handle("GET "+console.Prefix, console.Handler())
	if h.console == nil {
		return
	}
	// The hot keys and any key's state are other callers' business: an
	// operator's (scope.Inspect).
	mux.Handle("GET /v1/cluster", h.guardNeed(scope.Inspect, "the console's cluster view", http.HandlerFunc(h.cluster)))
	mux.Handle("GET /v1/top", h.guardNeed(scope.Inspect, "Top", http.HandlerFunc(h.top)))
	mux.Handle("GET /v1/inspect", h.guardNeed(scope.Inspect, "Inspect", http.HandlerFunc(h.inspect)))
}

func (h *handler) cluster(w http.ResponseWriter, r *http.Request) {
	since, err := queryInt(r, "since_ms", 0, 0, 1<<62)
	if err == nil {
		var n int64
		n, err = queryInt(r, "top", 10, 1, peer.MaxTop)
		if err == nil {
			writeJSON(w, http.StatusOK, h.clusterView(r.Context(), since, int(n)))
			return
		}
	}
	writeError(w, err)
}

// clusterView joins the members this node sees (Deps.Members: every
// state, with its share of the ring) with the reports of the live ones.
func (h *handler) clusterView(ctx context.Context, sinceMS int64, n int) Cluster {
	req := peer.ReportRequest{Top: n}
	if sinceMS > 0 {
		req.Since = time.UnixMilli(sinceMS)
	}
	ctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	reports := h.console.Reports(ctx, req)
	byID := make(map[string]console.MemberReport, len(reports))
	for _, mr := range reports {
		byID[mr.Member.ID] = mr
	}
	out := Cluster{TimeMS: time.Now().UnixMilli(), Top: topJSON(console.MergeTop(reports, n)), Members: []ClusterMember{}}
	if h.deps.Members != nil {
		ms := h.deps.Members()
		out.Self, out.Partitions = ms.Self, ms.Partitions
		for _, m := range ms.Members {
			out.Members = append(out.Members, clusterMember(m, byID))
		}
	}
	return out
}

func clusterMember(m MemberInfo, reports map[string]console.MemberReport) ClusterMember {
	cm := ClusterMember{MemberInfo: m, Samples: []Sample{}}
	mr, ok := reports[m.ID]
	switch {
	case !ok && m.State == "alive":
		cm.Error = "not asked: not in this node's ring yet"
	case !ok:
		cm.Error = "not asked: " + m.State
	case mr.Err != nil:
		cm.Error = mr.Err.Error()
	default:
		for _, s := range mr.Report.Samples {
			cm.Samples = append(cm.Samples, sampleJSON(s))
		}
	}
	return cm
}

func sampleJSON(s peer.Sample) Sample {
	out := Sample{TimeMS: s.Time.UnixMilli(), LocalAllowed: s.LocalAllowed, LocalDenied: s.LocalDenied,
		ForwardedAllowed: s.ForwardedAllowed, ForwardedDenied: s.ForwardedDenied, FallbackAllowed: s.FallbackAllowed,
		FallbackDenied: s.FallbackDenied, Errors: s.Errors, PeerChecks: s.PeerChecks, Degraded: s.Degraded, HandoffKeys: s.HandoffKeys}
	if s.ForwardP99 >= 0 {
		out.ForwardP99MS = msFloat(s.ForwardP99)
	}
	if s.ReplicationLagP99 >= 0 {
		out.ReplicationLagP99MS = msFloat(s.ReplicationLagP99)
	}
	return out
}

func msFloat(d time.Duration) *float64 {
	v := float64(d) / float64(time.Millisecond)
	return &v
}

func (h *handler) top(w http.ResponseWriter, r *http.Request) {
	n, err := queryInt(r, "n", 10, 1, peer.MaxTop)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), reportTimeout)
	defer cancel()
	t, err := h.console.Top(ctx, int(n))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, topJSON(t))
}

func topJSON(t console.TopKeys) Top {
	return Top{SinceMS: t.Since.UnixMilli(), MembersAsked: t.MembersAsked, MembersAnswered: t.MembersAnswered,
		Checks: hotKeysJSON(t.Checks), Denials: hotKeysJSON(t.Denials)}
}

func hotKeysJSON(es []topk.Entry) []HotKey {
	out := make([]HotKey, len(es))
	for i, e := range es {
		out[i] = HotKey{Key: e.Key, Count: e.Count, Error: e.Err}
	}
	return out
}

func (h *handler) inspect(w http.ResponseWriter, r *http.Request) {
	req, err := inspectRequest(r)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := h.console.Inspect(requestContext(w, r), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, InspectJSON(res, time.Now()))
}

func inspectRequest(r *http.Request) (route.InspectRequest, error) {
	q := r.URL.Query()
	req := route.InspectRequest{Key: q.Get("key"), Policy: q.Get("policy")}
	var err error
	if req.Limit, err = queryInt(r, "limit", 0, 0, 1<<62); err != nil {
		return req, err
	}
	if q.Has("hits") {
		hits, err := queryInt(r, "hits", 0, 0, 1<<62)
		if err != nil {
			return req, err
		}
		req.Hits = &hits
	}
	return req, nil
}

// InspectJSON converts an inspection; the log's entries become ages at
// now.
func InspectJSON(res route.InspectResult, now time.Time) Inspect {
	out := Inspect{Key: res.Key, Owner: res.Owner, Replica: res.Replica, Partition: res.Partition, Limits: []KeyView{},
		Leases: []LeaseView{}, Reservations: []ReservationView{}}
	for _, r := range res.Reservations {
		rv := ReservationView{Algorithm: r.Algorithm.String(), WindowMS: r.Window.Milliseconds(),
			Hits: r.Hits, Hold: r.Hold, AgeMS: r.Age.Milliseconds(), ExpiresInMS: r.ExpiresIn.Milliseconds()}
		rv.Calendar, rv.TimeZone = calendarJSON(r.Calendar)
		out.Reservations = append(out.Reservations, rv)
	}
	for _, l := range res.Leases {
		out.Leases = append(out.Leases, LeaseView{Holder: l.Holder, Hits: l.Hits, ExpiresInMS: l.ExpiresIn.Milliseconds()})
	}
	for _, v := range res.Limits {
		kv := KeyView{Algorithm: v.Algorithm.String(), WindowMS: v.Window.Milliseconds(), Count: v.Count,
			ResetAfterMS: v.ResetAfter.Milliseconds()}
		kv.Calendar, kv.TimeZone = calendarJSON(v.Calendar)
		if v.Algorithm == limiter.SlidingWindowCounter {
			kv.Counter = &CounterView{WindowStartMS: v.WindowStart.UnixMilli(), Previous: v.Previous, Current: v.Current}
		} else {
			kv.Log = &LogView{EntriesAgeMS: make([]int64, len(v.Entries))}
			for i, e := range v.Entries {
				kv.Log.EntriesAgeMS[i] = max(now.Sub(e).Milliseconds(), 0)
			}
		}
		if res.Limit > 0 {
			next := v.NextAllow.Milliseconds()
			kv.NextAllowMS = &next
		}
		out.Limits = append(out.Limits, kv)
	}
	return out
}

// queryInt reads the integer query parameter name, def when absent,
// refusing one outside [lo, hi] naming it.
func queryInt(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, &limiter.ArgumentError{Field: name, Reason: "must be an integer in [" + strconv.FormatInt(lo, 10) + ", " +
			strconv.FormatInt(hi, 10) + "], got " + strconv.Quote(s)}
	}
	return v, nil
}
