package console_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The JSON shapes of /tmp/console/CONTRACT.md (docs/console.md), as the
// fake backend serves them: the page is tested against the contract, not
// against whatever the real handlers happen to do today.

type sample struct {
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

func (s sample) checks() float64 {
	return s.LocalAllowed + s.LocalDenied + s.ForwardedAllowed + s.ForwardedDenied + s.FallbackAllowed + s.FallbackDenied
}

func (s sample) denied() float64 { return s.LocalDenied + s.ForwardedDenied + s.FallbackDenied }

type member struct {
	ID         string   `json:"id"`
	GRPCAddr   string   `json:"grpc_addr"`
	GossipAddr string   `json:"gossip_addr"`
	State      string   `json:"state"`
	Partitions int      `json:"partitions"`
	Share      float64  `json:"share"`
	Error      string   `json:"error"`
	Samples    []sample `json:"samples"`
	// Config is null for a member not alive, as a node shows it.
	Config        map[string]string `json:"config"`
	ConfigDiffers []string          `json:"config_differs,omitempty"`
}

type topEntry struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Error int64  `json:"error"`
}

type top struct {
	SinceMS         int64      `json:"since_ms"`
	MembersAsked    int        `json:"members_asked"`
	MembersAnswered int        `json:"members_answered"`
	Checks          []topEntry `json:"checks"`
	Denials         []topEntry `json:"denials"`
}

type clusterAnswer struct {
	Self       string   `json:"self"`
	TimeMS     int64    `json:"time_ms"`
	Partitions int      `json:"partitions"`
	Members    []member `json:"members"`
	Top        top      `json:"top"`
}

type counterState struct {
	WindowStartMS int64 `json:"window_start_ms"`
	Previous      int64 `json:"previous"`
	Current       int64 `json:"current"`
}

type logState struct {
	EntriesAgeMS []int64 `json:"entries_age_ms"`
}

type inspectLimit struct {
	Algorithm    string        `json:"algorithm"`
	WindowMS     int64         `json:"window_ms"`
	Count        int64         `json:"count"`
	ResetAfterMS int64         `json:"reset_after_ms"`
	Counter      *counterState `json:"counter,omitempty"`
	Log          *logState     `json:"log,omitempty"`
	NextAllowMS  *int64        `json:"next_allow_ms,omitempty"`
}

type inspectAnswer struct {
	Key       string         `json:"key"`
	Owner     string         `json:"owner"`
	Replica   string         `json:"replica"`
	Partition int            `json:"partition"`
	Limits    []inspectLimit `json:"limits"`
}

type apiError struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// The keys the fake's top lists hold; evilKey must render as text.
const (
	hotKey  = "user:42"
	evilKey = `<img src=x onerror=alert(1)>`
	downKey = "unavailable:owner-down" // the fake answers 503 for it
)

// fakeBackend serves /v1/cluster, /v1/top and /v1/inspect per the contract,
// from a clock the test moves (so that what the page must show is known
// exactly), with member states, a token and an outage the test switches.
type fakeBackend struct {
	mu     sync.Mutex
	now    time.Time
	states map[string]string
	// policies is each member's policies digest; node1, the node that
	// answers, is the reference.
	policies map[string]string
	token    string // "": no token needed
	down     bool   // every /v1/ connection is cut without an answer

	lastSince   string // since_ms of the last /v1/cluster call
	lastTop     string // its top
	lastInspect string // key of the last /v1/inspect call, decoded
	lastLimit   string
	lastAuth    string // Authorization of the last /v1/ call answered
}

var memberIDs = []string{"node1", "node2", "node3"}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{
		now:      time.Now().Truncate(time.Second),
		states:   map[string]string{"node1": "alive", "node2": "alive", "node3": "alive"},
		policies: map[string]string{"node1": "0123456789ab", "node2": "0123456789ab", "node3": "0123456789ab"},
	}
}

func (f *fakeBackend) routes(mux *http.ServeMux) {
	mux.Handle("GET /v1/cluster", f.guard(f.cluster))
	mux.Handle("GET /v1/top", f.guard(f.top))
	mux.Handle("GET /v1/inspect", f.guard(f.inspect))
}

// guard cuts the connection while down and asks for the token when one is
// set, as a node does (401, WWW-Authenticate: Bearer).
func (f *fakeBackend) guard(h func(http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		down, token := f.down, f.token
		f.mu.Unlock()
		if down {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeError(w, http.StatusUnauthorized, apiError{Code: "UNAUTHENTICATED", Message: "missing or invalid bearer token"})
			return
		}
		f.mu.Lock()
		f.lastAuth = r.Header.Get("Authorization")
		f.mu.Unlock()
		h(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, map[string]apiError{"error": e})
}

// sampleAt is member i's sample of second sec: whole numbers (so that the
// page's figures are exact), a slow wave, and a burst of denials and a
// degraded spell now and then so that every chart has something to draw.
func sampleAt(i int, sec int64) sample {
	wave := math.Sin(float64(sec)/25 + float64(i))
	burst := sec%120 >= 60 && sec%120 < 80
	s := sample{
		TimeMS:           sec*1000 - int64(i)*37, // members sample at their own moments
		LocalAllowed:     math.Round(40 + 15*wave + 10*float64(i)),
		LocalDenied:      float64(sec % 3),
		ForwardedAllowed: float64(20 + sec%5),
		ForwardedDenied:  float64(1 + i),
		PeerChecks:       float64(18 + sec%4),
	}
	if burst {
		s.LocalDenied += 20
	}
	if i == 2 && sec%90 < 12 {
		s.FallbackAllowed, s.Degraded = 4, 4
	}
	if sec%60 < 2 {
		s.HandoffKeys = 12
	}
	if sec%17 != 0 { // now and then a second without forwards: null
		p99 := math.Round(100*(0.6+0.25*float64(i)+0.15*math.Sin(float64(sec)/15+float64(i)))) / 100
		s.ForwardP99MS = &p99
	}
	lag := float64(18 + sec%5)
	s.ReplicationLagP99MS = &lag
	return s
}

func (f *fakeBackend) cluster(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, err := strconv.ParseInt(q.Get("since_ms"), 10, 64)
	if q.Get("since_ms") != "" && err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: "INVALID_ARGUMENT", Field: "since_ms", Message: err.Error()})
		return
	}
	n, ok := topN(w, q.Get("top"), "top")
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastSince, f.lastTop = q.Get("since_ms"), q.Get("top")
	ans := clusterAnswer{Self: "node1", TimeMS: f.now.UnixMilli(), Partitions: 271, Top: f.topLocked(n)}
	alive := 0
	for _, id := range memberIDs {
		if f.states[id] == "alive" {
			alive++
		}
	}
	for i, id := range memberIDs {
		ans.Members = append(ans.Members, f.memberLocked(i, id, since, alive))
	}
	writeJSON(w, http.StatusOK, ans)
}

func (f *fakeBackend) memberLocked(i int, id string, since int64, alive int) member {
	m := member{
		ID: id, State: f.states[id], Samples: []sample{},
		GRPCAddr:   fmt.Sprintf("127.0.0.1:%d", 9090+i),
		GossipAddr: fmt.Sprintf("127.0.0.1:%d", 7946+i),
	}
	if m.State != "alive" {
		m.Error = "rpc error: code = Unavailable desc = connection refused"
		return m
	}
	m.Partitions = 271 / alive
	if i == 0 {
		m.Partitions += 271 % alive
	}
	m.Share = float64(m.Partitions) / 271
	m.Config = map[string]string{"policies": f.policies[id], "envoy_rls": "fedcba987654"}
	if f.policies[id] != f.policies["node1"] {
		m.ConfigDiffers = []string{"policies"}
	}
	nowSec := f.now.Unix()
	for sec := nowSec - 299; sec <= nowSec; sec++ {
		if s := sampleAt(i, sec); s.TimeMS > since {
			m.Samples = append(m.Samples, s)
		}
	}
	return m
}

func topN(w http.ResponseWriter, v, field string) (int, bool) {
	if v == "" {
		return 10, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		writeError(w, http.StatusBadRequest, apiError{Code: "INVALID_ARGUMENT", Field: field, Message: "must be 1..100"})
		return 0, false
	}
	return n, true
}

func (f *fakeBackend) topLocked(n int) top {
	t := top{
		SinceMS: f.now.Add(-45 * time.Second).UnixMilli(), MembersAsked: 3, MembersAnswered: 3,
		Checks: []topEntry{
			{Key: hotKey, Count: 1200}, {Key: "tenant:acme/api v2", Count: 640},
			{Key: evilKey, Count: 310, Error: 3}, {Key: "ip:10.0.0.7", Count: 95, Error: 2},
		},
		Denials: []topEntry{{Key: hotKey, Count: 700}, {Key: evilKey, Count: 12, Error: 3}},
	}
	for _, id := range memberIDs {
		if f.states[id] != "alive" {
			t.MembersAnswered--
		}
	}
	t.Checks = t.Checks[:min(n, len(t.Checks))]
	t.Denials = t.Denials[:min(n, len(t.Denials))]
	return t
}

func (f *fakeBackend) top(w http.ResponseWriter, r *http.Request) {
	n, ok := topN(w, r.URL.Query().Get("n"), "n")
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, http.StatusOK, f.topLocked(n))
}

func (f *fakeBackend) inspect(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	key := q.Get("key")
	f.mu.Lock()
	f.lastInspect, f.lastLimit = key, q.Get("limit")
	now := f.now
	f.mu.Unlock()
	if key == "" {
		writeError(w, http.StatusBadRequest, apiError{Code: "INVALID_ARGUMENT", Field: "key", Message: "key must not be empty"})
		return
	}
	var limit int64
	if s := q.Get("limit"); s != "" {
		var err error
		if limit, err = strconv.ParseInt(s, 10, 64); err != nil || limit < 1 {
			writeError(w, http.StatusBadRequest, apiError{Code: "INVALID_ARGUMENT", Field: "limit", Message: "invalid limit: must be positive, got " + s})
			return
		}
	}
	if key == downKey {
		writeError(w, http.StatusServiceUnavailable, apiError{Code: "UNAVAILABLE", Message: "owner node3 unreachable and no replica holds the key"})
		return
	}
	writeJSON(w, http.StatusOK, inspectFor(key, limit, now))
}

// inspectFor holds a counter (count 7) and a log (count 3) for the keys of
// the top lists, and nothing for any other key.
func inspectFor(key string, limit int64, now time.Time) inspectAnswer {
	a := inspectAnswer{Key: key, Owner: "node2", Replica: "node3", Partition: 17, Limits: []inspectLimit{}}
	if key != hotKey && key != evilKey {
		return a
	}
	counter := inspectLimit{
		Algorithm: "SLIDING_WINDOW_COUNTER", WindowMS: 60000, Count: 7, ResetAfterMS: 52000,
		Counter: &counterState{WindowStartMS: now.Add(-8 * time.Second).UnixMilli(), Previous: 3, Current: 5},
	}
	log := inspectLimit{
		Algorithm: "SLIDING_WINDOW_LOG", WindowMS: 10000, Count: 3, ResetAfterMS: 8800,
		Log: &logState{EntriesAgeMS: []int64{1200, 800, 5}},
	}
	if limit > 0 {
		counter.NextAllowMS = nextAllow(counter.Count, limit, 4100)
		log.NextAllowMS = nextAllow(log.Count, limit, 8800)
	}
	a.Limits = []inspectLimit{counter, log}
	return a
}

func nextAllow(count, limit, wait int64) *int64 {
	if count < limit {
		wait = 0
	}
	return &wait
}

func (f *fakeBackend) setState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[id] = state
}

func (f *fakeBackend) setPolicies(id, digest string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policies[id] = digest
}

func (f *fakeBackend) setToken(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.token = token
}

func (f *fakeBackend) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// tick moves the fake's clock: each alive member has d/1s new samples.
func (f *fakeBackend) tick(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// newest is member i's newest sample now, which the page must show.
func (f *fakeBackend) newest(i int) sample {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sampleAt(i, f.now.Unix())
}

// recent is member i's checks/s and denied/s as the page's table shows
// them now: the means of its samples of the 10 s before its newest.
func (f *fakeBackend) recent(i int) (checks, denied float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now.Unix()
	for sec := now - 9; sec <= now; sec++ {
		s := sampleAt(i, sec)
		checks, denied = checks+s.checks(), denied+s.denied()
	}
	return checks / 10, denied / 10
}

// seen returns what the page last asked: since_ms and top of /v1/cluster,
// the key and limit of /v1/inspect, and its Authorization header.
func (f *fakeBackend) seen() (since, topParam, key, limit, auth string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastSince, f.lastTop, f.lastInspect, f.lastLimit, f.lastAuth
}
