package jepsenlite

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// nodeTick is the resolution of the nodes' timestamps: they keep whole
// milliseconds, so a node may see two instants up to a tick further
// apart than they were (a window is taken a tick short, as in sliding,
// and an interval a tick long).
const nodeTick = time.Millisecond

// gcraBound is one decider's bound on a GCRA key's admissions in an
// interval of span: burst + rate × span, as a node may measure the span
// (a tick longer), floored (admissions are whole). An exact bucket with
// an emission interval of window ÷ limit rounded up never admits more:
// n hits at t₁ ≤ … ≤ tₙ need (n − burst) emission intervals ≤ tₙ − t₁.
func gcraBound(ks KeySpec, span time.Duration) int {
	// In whole windows and the rest: limit × span alone may overflow.
	whole, rest := (span+nodeTick)/ks.Window, (span+nodeTick)%ks.Window
	return int(ks.BurstOrLimit() + ks.Limit*int64(whole) + ks.Limit*int64(rest)/int64(ks.Window))
}

// gcraPerDecider is how gcraBound made its number, for a violation's
// message.
func gcraPerDecider(ks KeySpec, span time.Duration) string {
	return fmt.Sprintf("burst %d + ⌊%d per %s × %s⌋ = %d", ks.BurstOrLimit(), ks.Limit, ks.Window, span+nodeTick, gcraBound(ks, span))
}

// gcra checks a GCRA key (ops: its admitted checks, by invoke) over every
// interval [from, to] from one admission's invoke to another's
// completion. The admissions charged to it are those whose whole
// [invoke, complete] lies inside, certainly decided in it (a lower bound,
// as for the windows), and their decisions are at most to − from apart
// (an upper bound). So a count over deciders × gcraBound(to − from) is a
// certain violation. The deciders are the phases' over [from, to] plus
// the nodes that answered by fallback, and the silent rule holds: over
// one decider's bound, one of them must say it was degraded.
//
// Unlike a window, an interval has any length: a decider that admits a
// little over the rate shows over a long interval, where the burst no
// longer hides it. Each start keeps its worst violation (worse), so
// that one over-admission does not list every end after it.
func (r *Result) gcra(a *Admission, ks KeySpec, ops []Op) {
	byComplete := slices.SortedFunc(slices.Values(ops), func(x, y Op) int { return cmp.Compare(x.Complete, y.Complete) })
	for i, first := range ops {
		from := first.Invoke
		if i > 0 && ops[i-1].Invoke == from {
			continue // the same intervals as the one before
		}
		var (
			t      tally
			owners = map[string]bool{}
			worst  *Violation
		)
		for _, op := range byComplete {
			if op.Invoke < from {
				continue
			}
			t.n++
			if op.Degraded {
				t.degraded = true
				if !owners[op.Owner] {
					owners[op.Owner] = true
					t.fallback++
				}
			}
			one := gcraBound(ks, op.Complete-from)
			v := r.judge(a, ks.Name, from, op.Complete, t, one, float64(one), 0)
			if v != nil && (worst == nil || worse(*v, *worst)) {
				v.Kind, v.To, v.PerDecider = KindInterval, op.Complete, gcraPerDecider(ks, op.Complete-from)
				worst = v
			}
		}
		if worst != nil {
			a.Violations = append(a.Violations, *worst)
		}
	}
}

// worse reports whether v is a worse violation than w: over the
// deciders' bound rather than silent, or further over its bound.
func worse(v, w Violation) bool {
	if v.Silent != w.Silent {
		return !v.Silent
	}
	return v.Allowed-v.Bound > w.Allowed-w.Bound
}

// excessGCRA replays the admitted checks (by invoke) through an exact
// bucket and counts those it would certainly have refused. An exact
// bucket refuses a hit at t if, with some earlier admission at t₀, the
// hits from t₀ to t, this one included, would be more than burst + rate
// × (t − t₀). Certainly so when the kept admissions certainly decided
// before this one (completed before its invoke) and after k's invoke,
// with it, are more than gcraBound(its completion − k's invoke).
func (r *Result) excessGCRA(a *Admission, ks KeySpec, ops []Op) {
	var kept []Op // by invoke
	for _, op := range ops {
		if since, refused := gcraRefuses(ks, kept, op); refused {
			a.Excess++
			if _, calm := r.bound(since, op.Complete); calm {
				a.ExcessCalm++
			}
			continue
		}
		kept = append(kept, op)
	}
}

// gcraRefuses reports whether an exact bucket that admitted kept (by
// invoke) certainly refuses op, and since which admission's invoke it
// counted.
func gcraRefuses(ks KeySpec, kept []Op, op Op) (time.Duration, bool) {
	n := 1 // op
	for i := len(kept) - 1; i >= 0; i-- {
		k := kept[i]
		if k.Complete <= op.Invoke {
			n++
		}
		b := gcraBound(ks, op.Complete-k.Invoke)
		if n > b {
			return k.Invoke, true
		}
		if n+i <= b {
			// The i earlier ones add at most i, and the bound only grows
			// as the interval does.
			break
		}
	}
	return 0, false
}
