package jepsenlite

import (
	"cmp"
	"slices"
	"time"
)

// A concurrency key's bound is on the slots held at each instant: at
// most limit × deciders. Which slots were held when, the checker must
// judge from the client's side, where every time is uncertain: an
// acquire took its slot somewhere between its invoke and its answer, a
// release freed it somewhere between its invoke and its answer (or not
// at all, if it failed before the owner saw it), and an unreleased slot
// freed itself window after it was taken, on its owner's clock.
//
// The rule, as for the windows (Jepsen's): only what is certain counts.
// A slot is certainly held from its acquire's answer until the first
// release of it was sent, or, never released, until window − a tick
// after the acquire was sent (the earliest its owner, keeping whole
// milliseconds, may free it). Whatever the node did inside the
// uncertain ends, the slots counted at an instant were held then on
// the node that decided them, so a count over the bound is a certain
// violation, never an artefact of timing.
//
// The other rule would be wrong: counting a slot from the acquire's
// invoke until the release's answer (every moment it may have been
// held) charges the node with slots it had already freed. A release
// answered at 320 ms may have been decided at 300 ms, and an acquire of
// another client at 305 ms rightly given the freed slot: counted to
// 320 ms, both are held at once, a false alarm on a key at its limit,
// as the workload keeps them. A release that failed or timed out may
// have been applied before the client gave up: it ends the certain
// hold too (its retry changes nothing). What the checker gives up is
// strictness, never soundness: the slots counted are a lower bound of
// those held.

// slot is one admitted acquire and when its slot was certainly held:
// [from, to), empty when to ≤ from.
type slot struct {
	acq      Op
	from, to time.Duration
}

// firstReleases maps each slot released in ops to when the first
// release of it was sent.
func firstReleases(ops []Op) map[int]time.Duration {
	out := map[int]time.Duration{}
	for _, op := range ops {
		if op.Kind != ReleaseOp {
			continue
		}
		if at, ok := out[op.Slot]; !ok || op.Invoke < at {
			out[op.Slot] = op.Invoke
		}
	}
	return out
}

// heldSlots is when each admitted acquire of ks (acquires, by invoke)
// certainly held its slot, by from, given when the first release of each
// was sent (firstReleases). ks.Window is the slot's lifetime in real
// time (Analyze shortens it by a clock that runs fast).
func heldSlots(ks KeySpec, acquires []Op, released map[int]time.Duration) []slot {
	out := make([]slot, 0, len(acquires))
	for _, op := range acquires {
		s := slot{acq: op, from: op.Complete, to: op.Invoke + ks.Window - nodeTick}
		if at, ok := released[op.Slot]; ok && op.Slot != 0 {
			s.to = min(s.to, at)
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(x, y slot) int { return cmp.Compare(x.from, y.from) })
	return out
}

// inFlight checks a concurrency key at every instant the slots certainly
// held change (a hold begins or ends): at most limit × deciders. The
// deciders are those of every phase from the earliest invoke of the
// held slots' acquires to the instant, where they may have been
// decided, plus the nodes that answered them by fallback; and over the
// limit, one of them must say it was degraded (the windows' rules).
func (r *Result) inFlight(a *Admission, ks KeySpec, slots []slot) {
	var instants []time.Duration
	for _, s := range slots {
		if s.to > s.from {
			instants = append(instants, s.from, s.to)
		}
	}
	slices.Sort(instants)
	instants = slices.Compact(instants)
	var held []slot
	next := 0
	for _, t := range instants {
		held = slices.DeleteFunc(held, func(s slot) bool { return s.to <= t })
		for ; next < len(slots) && slots[next].from <= t; next++ {
			if slots[next].to > t {
				held = append(held, slots[next])
			}
		}
		if len(held) == 0 {
			continue
		}
		from, in := acquiresOf(held)
		if v := r.judge(a, ks.Name, from, t, tallyOf(in), int(ks.Limit), float64(ks.Limit), 0); v != nil {
			v.Kind, v.To = KindInFlight, t
			a.Violations = append(a.Violations, *v)
		}
	}
}

// acquiresOf returns the slots' acquires and the earliest of their
// invokes.
func acquiresOf(slots []slot) (time.Duration, []Op) {
	in := make([]Op, len(slots))
	from := slots[0].acq.Invoke
	for i, s := range slots {
		in[i] = s.acq
		from = min(from, s.acq.Invoke)
	}
	return from, in
}

// excessSlots replays the admitted acquires (by invoke) through an exact
// count of slots and counts those it would certainly have refused: the
// kept slots certainly held over the acquire's whole [invoke, complete]
// were already limit.
func (r *Result) excessSlots(a *Admission, ks KeySpec, slots []slot) {
	byInvoke := slices.SortedStableFunc(slices.Values(slots), func(x, y slot) int { return cmp.Compare(x.acq.Invoke, y.acq.Invoke) })
	var kept []slot
	for _, s := range byInvoke {
		var full []slot
		for _, k := range kept {
			if k.from <= s.acq.Invoke && s.acq.Complete < k.to {
				full = append(full, k)
			}
		}
		if len(full) < int(ks.Limit) {
			kept = append(kept, s)
			continue
		}
		a.Excess++
		if from, _ := acquiresOf(full); r.calm(from, s.acq.Complete) {
			a.ExcessCalm++
		}
	}
}

// calm reports whether every phase [from, to] touches is calm.
func (r *Result) calm(from, to time.Duration) bool {
	_, calm := r.bound(from, to)
	return calm
}
