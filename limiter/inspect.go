package limiter

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// KeyView is one of a key's limits as a check would see it now, read
// without changing anything.
type KeyView struct {
	Algorithm Algorithm
	Window    time.Duration // 0 for a calendar limit
	// Calendar is a calendar limit's unit and zone; its WindowStart is
	// its period's start, Current its count.
	Calendar Calendar
	// Count is the count a check would see now: the counter's floored
	// weighted estimate, or the log's hits in the window.
	Count int64
	// ResetAfter is the time until the state holds nothing.
	ResetAfter time.Duration
	// The counter's current fixed window (epoch-aligned) and the counts of
	// it and of the window before, as of now.
	WindowStart       time.Time
	Previous, Current int64
	// The log's hits in the window, oldest first.
	Entries []time.Time
	// TAT is a GCRA bucket's theoretical arrival time: when it is empty
	// again. Its Count is its level in hits of the inspected limit (whose
	// burst is taken to be the limit), 0 when Inspect was given none.
	TAT time.Time
	// NextAllow is the time until the inspected hits more would be
	// allowed under the inspected limit, if no other traffic came: 0 when
	// they would be now. Meaningful only when Inspect was given a limit.
	NextAllow time.Duration
}

// Inspect returns key's limits as a check at now would see them, under
// every window and algorithm the store holds for it, ordered by algorithm
// and window; none if it holds nothing that still counts. With limit > 0,
// each view's NextAllow is for hits more under that limit. It consumes
// nothing and creates no state.
//
// Like DeleteKey, it scans key's partition under its lock: an operator's
// call, not a request path's.
func (a *Admin) Inspect(now time.Time, key string, limit, hits int64) ([]KeyView, error) {
	if err := a.ValidateInspect(key, limit, hits); err != nil {
		return nil, err
	}
	ms := max(now.UnixMilli(), 0)
	if limit == 0 {
		limit, hits = math.MaxInt64, 0
	}
	sh := a.shards.of(key)
	var out []KeyView
	sh.mu.Lock()
	for k, st := range sh.counters {
		if k.key != key {
			continue
		}
		inspect := inspectCounter
		if k.window < 0 {
			inspect = inspectCalendar
		}
		if v, ok := inspect(st, ms, k.window, limit, hits); ok {
			out = append(out, v)
		}
	}
	for k, st := range sh.logs {
		if k.key == key {
			if v, ok := inspectLog(st, ms, k.span(), limit, hits); ok {
				v.Algorithm = k.logAlgorithm()
				out = append(out, v)
			}
		}
	}
	for k, st := range sh.gcras {
		if k.key == key {
			if v, ok := inspectGCRA(st, nanos(now), k.window, limit, hits); ok {
				out = append(out, v)
			}
		}
	}
	sh.mu.Unlock()
	slices.SortFunc(out, func(a, b KeyView) int {
		return cmp.Or(cmp.Compare(a.Algorithm, b.Algorithm), cmp.Compare(a.Window, b.Window),
			cmp.Compare(a.Calendar.Unit(), b.Calendar.Unit()), cmp.Compare(a.Calendar.Zone(), b.Calendar.Zone()))
	})
	return out, nil
}

// ValidateInspect reports why Inspect would refuse its arguments, naming
// the field: a node refuses a bad inspection before asking the owner.
func (a *Admin) ValidateInspect(key string, limit, hits int64) error {
	switch {
	case key == "":
		return &ArgumentError{Field: "key", Reason: "must not be empty"}
	case len(key) > a.cfg.MaxKeyBytes:
		return &ArgumentError{Field: "key", Reason: "longer than the maximum key length (--max-key-bytes)"}
	case limit < 0:
		return &ArgumentError{Field: "limit", Reason: "must be ≥ 0 (0: no limit given)"}
	case hits < 0 || (limit > 0 && hits > limit):
		return &ArgumentError{Field: "hits", Reason: "must be in [0, limit]"}
	}
	return nil
}

// inspectCounter decides a copy of st, so that st is untouched; ok is
// false when it counts nothing any more.
func inspectCounter(st counterState, now, w, limit, hits int64) (KeyView, bool) {
	res := decideCounter(&st, now, w, limit, hits) // st is a copy: rolled to now, then +hits if allowed
	if res.allowed {
		st.curr -= hits
	}
	if st.prev == 0 && st.curr == 0 {
		return KeyView{}, false
	}
	v := KeyView{Algorithm: SlidingWindowCounter, Window: ms(w), Count: res.count, ResetAfter: ms(res.resetAfter),
		WindowStart: time.UnixMilli(st.window * w), Previous: st.prev, Current: st.curr}
	if !res.allowed {
		v.NextAllow = ms(res.retryAfter)
	}
	return v, true
}

// inspectLog reads st's entries in the window at now without pruning
// them; ok is false when none is left.
func inspectLog(st *logState, now, w, limit, hits int64) (KeyView, bool) {
	if st.n > 0 {
		now = max(now, st.newest()) // as decideLog clamps a clock that stepped back
	}
	live := st.live(now - w)
	if len(live) == 0 {
		return KeyView{}, false
	}
	count := int64(len(live))
	v := KeyView{Algorithm: SlidingWindowLog, Window: ms(w), Count: count, ResetAfter: ms(live[len(live)-1] + w - now),
		Entries: make([]time.Time, len(live))}
	for i, t := range live {
		v.Entries[i] = time.UnixMilli(t)
	}
	if count > limit-hits { // as decideLog: the (count+hits−limit)-th oldest hit has to leave
		v.NextAllow = ms(live[count+hits-limit-1] + w - now)
	}
	return v, true
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
