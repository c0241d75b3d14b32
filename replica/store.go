package replica

import (
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
)

// Store holds the replicas other members sent this node as their
// partitions' backup, by partition, apart from the node's own state. It
// is safe for concurrent use.
type Store struct {
	maxKeys int
	maxLog  int
	metrics *Metrics

	mu      sync.Mutex
	parts   []map[stateKey]limiter.KeyState
	origins []string // by partition: the member that last replicated it
	n       int      // states held
}

type stateKey struct {
	key    string
	window time.Duration
	algo   limiter.Algorithm
}

// NewStore returns an empty Store of partitions partitions that holds at
// most maxKeys states, each log trimmed to its newest maxLog entries (the
// store's MaxLogLimit: no log needs more to decide).
func NewStore(partitions, maxKeys int, maxLog int64, m *Metrics) *Store {
	s := &Store{maxKeys: maxKeys, maxLog: int(maxLog), metrics: m, parts: make([]map[stateKey]limiter.KeyState, partitions),
		origins: make([]string, partitions)}
	for i := range s.parts {
		s.parts[i] = map[stateKey]limiter.KeyState{}
	}
	return s
}

// Apply implements route.Replicas: it drops what it held of r.Whole, then
// replaces its copy of each state's key with the state, or drops the
// copy when the state is empty. States over MaxKeys are refused and
// counted; it returns how many it kept.
func (s *Store) Apply(origin string, r peer.Replication) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range r.Whole {
		if p >= 0 && p < len(s.parts) {
			s.n -= len(s.parts[p])
			clear(s.parts[p])
			s.origins[p] = origin
		}
	}
	kept, refused := 0, 0
	for _, ks := range r.States {
		p := partition.Of(ks.Key, len(s.parts))
		s.origins[p] = origin
		part := s.parts[p]
		k := stateKey{ks.Key, ks.Window, ks.Algorithm}
		_, had := part[k]
		switch {
		case empty(ks):
			if had {
				delete(part, k)
				s.n--
			}
			continue
		case !had && s.n >= s.maxKeys:
			refused++
			continue
		case !had:
			s.n++
		}
		if over := len(ks.Log) - s.maxLog; over > 0 {
			ks.Log = ks.Log[over:]
		}
		part[k] = ks
		kept++
	}
	s.metrics.held(s.n, refused)
	return kept
}

// empty reports whether ks counts nothing: a key's tombstone.
func empty(ks limiter.KeyState) bool {
	return ks.Prev <= 0 && ks.Curr <= 0 && len(ks.Log) == 0
}

// Origin returns the member that last replicated partition p to this
// node ("" if none did).
func (s *Store) Origin(p int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.origins[p]
}

// Holds reports whether the store holds replicas of partition p.
func (s *Store) Holds(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parts[p]) > 0
}

// Take removes and returns the replicas of partition p, and the member
// that sent them: its owner failed, or cannot be reached, and this node,
// its heir, merges them into its own state.
func (s *Store) Take(p int) ([]limiter.KeyState, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]limiter.KeyState, 0, len(s.parts[p]))
	for _, ks := range s.parts[p] {
		out = append(out, ks)
	}
	s.n -= len(s.parts[p])
	clear(s.parts[p])
	s.metrics.held(s.n, 0)
	return out, s.origins[p]
}

// Drop removes the replicas of partition p (its owner left gracefully and
// handed its state off, or this node is no longer its backup) and
// returns how many it dropped.
func (s *Store) Drop(p int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.parts[p])
	s.n -= n
	clear(s.parts[p])
	s.metrics.held(s.n, 0)
	return n
}

// Len returns how many states the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Sweep drops the replicas that count nothing any more at now, and
// returns how many.
func (s *Store) Sweep(now time.Time) int {
	ms := now.UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	freed := 0
	for _, part := range s.parts {
		for k, ks := range part {
			if expiry(ks) <= ms {
				delete(part, k)
				freed++
			}
		}
	}
	s.n -= freed
	s.metrics.held(s.n, 0)
	return freed
}

// expiry is the time (Unix ms) from which ks counts nothing, as the
// limiter computes it: a counter's current count weighs in until the end
// of the next window, a log entry for one window.
func expiry(ks limiter.KeyState) int64 {
	w := ks.Window.Milliseconds()
	switch {
	case ks.Algorithm == limiter.SlidingWindowLog && len(ks.Log) > 0:
		return ks.Log[len(ks.Log)-1] + w
	case ks.Curr > 0:
		return (ks.WindowID + 2) * w
	case ks.Prev > 0:
		return (ks.WindowID + 1) * w
	}
	return 0
}
