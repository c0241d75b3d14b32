package jepsenlite

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"
)

// Link is how a slow link treats each packet: held for Delay plus a
// uniform jitter in [-Jitter, +Jitter] (never below 0), or dropped with
// probability Loss. Jitter reorders packets, those of one TCP flow too, as
// a real path with several routes does.
type Link struct {
	Delay, Jitter time.Duration
	Loss          float64
}

// Validate rejects a link no delayer can make.
func (l Link) Validate() error {
	switch {
	case l.Delay < 0 || l.Jitter < 0:
		return fmt.Errorf("link: delay %s and jitter %s must not be negative", l.Delay, l.Jitter)
	case l.Loss < 0 || l.Loss > 1:
		return fmt.Errorf("link: loss %g must be in [0, 1]", l.Loss)
	case l.Delay > 10*time.Second:
		return fmt.Errorf("link: delay %s over 10 s would hold every packet of a run", l.Delay)
	}
	return nil
}

func (l Link) String() string {
	s := l.Delay.String()
	if l.Jitter > 0 {
		s += " ± " + l.Jitter.String()
	}
	if l.Loss > 0 {
		s += fmt.Sprintf(", %g %% loss", 100*l.Loss)
	}
	return s
}

// DelayStats are a delayer's counters since it started.
type DelayStats struct {
	Held      int64 `json:"held"`       // packets held and released
	Lost      int64 `json:"lost"`       // dropped by a link's Loss
	Full      int64 `json:"full"`       // dropped because the queue was full
	MaxQueued int   `json:"max_queued"` // most packets held at once
}

// Dropped is every packet dropped, for loss or for room.
func (s DelayStats) Dropped() int64 { return s.Lost + s.Full }

// holdQueue decides what happens to each packet and when: the delayer's
// scheduling, pure. Time is a parameter; the randomness is seeded, so a
// run's delays are reproducible from its seed (given the same packets).
// It holds at most Cap packets; one more is dropped and counted. Not safe
// for concurrent use.
type holdQueue struct {
	cap   int
	rng   *rand.Rand
	h     releaseHeap
	seq   uint64 // ties release in arrival order
	stats DelayStats
}

func newHoldQueue(capacity int, seed uint64) *holdQueue {
	return &holdQueue{cap: capacity, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Offer takes packet id, arriving at now on link l, and reports whether
// it is held (true) or must be dropped now (false: lost, or no room).
func (q *holdQueue) Offer(id uint32, l Link, now time.Time) bool {
	if l.Loss > 0 && q.rng.Float64() < l.Loss {
		q.stats.Lost++
		return false
	}
	if len(q.h) >= q.cap {
		q.stats.Full++
		return false
	}
	d := l.Delay
	if l.Jitter > 0 {
		d += time.Duration(q.rng.Int64N(int64(2*l.Jitter)+1)) - l.Jitter
	}
	q.seq++
	heap.Push(&q.h, held{id: id, at: now.Add(max(d, 0)), seq: q.seq})
	q.stats.MaxQueued = max(q.stats.MaxQueued, len(q.h))
	return true
}

// Next is when the earliest held packet is due; ok false when none is
// held.
func (q *holdQueue) Next() (at time.Time, ok bool) {
	if len(q.h) == 0 {
		return time.Time{}, false
	}
	return q.h[0].at, true
}

// Due removes and appends to out the packets due at now, earliest first.
func (q *holdQueue) Due(now time.Time, out []uint32) []uint32 {
	for len(q.h) > 0 && !q.h[0].at.After(now) {
		out = append(out, heap.Pop(&q.h).(held).id)
		q.stats.Held++
	}
	return out
}

// Drain removes every held packet, due or not: the delayer is stopping.
func (q *holdQueue) Drain(out []uint32) []uint32 {
	for len(q.h) > 0 {
		out = append(out, heap.Pop(&q.h).(held).id)
		q.stats.Held++
	}
	return out
}

// Len is how many packets are held.
func (q *holdQueue) Len() int { return len(q.h) }

// Stats are the counters so far.
func (q *holdQueue) Stats() DelayStats { return q.stats }

type held struct {
	id  uint32
	at  time.Time
	seq uint64
}

type releaseHeap []held

func (h releaseHeap) Len() int { return len(h) }
func (h releaseHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h releaseHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *releaseHeap) Push(x any)   { *h = append(*h, x.(held)) }
func (h *releaseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
