package route

import "sync/atomic"

// slots bounds the forwarded checks of this node that wait for their
// owners' answers, all peers together (Config.MaxInflightForwards): a
// check that finds none free is refused at once (ErrTooManyForwards), so
// that a slow owner shows as overload and queued checks cannot pile up
// without bound. Lock-free; safe for concurrent use.
type slots struct {
	limit int64
	n     atomic.Int64
}

// acquire reserves up to n slots and returns how many it got.
func (s *slots) acquire(n int) int {
	if n == 1 { // the common case: one atomic add
		if s.n.Add(1) <= s.limit {
			return 1
		}
		s.n.Add(-1)
		return 0
	}
	for {
		cur := s.n.Load()
		got := min(int64(n), s.limit-cur)
		if got <= 0 {
			return 0
		}
		if s.n.CompareAndSwap(cur, cur+got) {
			return int(got)
		}
	}
}

// release frees n slots.
func (s *slots) release(n int) { s.n.Add(-int64(n)) }

// inUse returns how many slots are taken now.
func (s *slots) inUse() int { return int(s.n.Load()) }
