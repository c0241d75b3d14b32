package replica

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
)

// Store holds the replicas other members sent this node as their
// partitions' backup, by partition, apart from the node's own state. It
// is safe for concurrent use.
//
// Receiving must cost a backup almost nothing: every change an owner
// admits arrives here within a round, and an index by key (the map this
// store used to be) costs a cold lookup per state, the largest part of
// what replication added to a check. So a partition's replicas are a
// list of the states in the order they came, where a key's last state
// is its copy: a state received is appended. The list is compacted to
// one state per key, tombstones and superseded states dropped, when it
// has grown past twice what the last compaction left (plus
// compactSlack), before it is read (Take, Holds, Len) and at every
// Sweep. A compaction indexes one partition's states, hundreds where
// an index of the whole store would hold millions, so it runs in cache:
// it costs about one map insert per state received, in a small map.
type Store struct {
	share   int // states each partition holds at most, after compaction
	maxLog  int
	metrics *Metrics
	journal Journal

	mu    sync.Mutex
	parts []part
	held  int // states held, over all partitions, repeats included
	// seen is compact's scratch index, sized for seenFor states: reused
	// while the partitions compacted are of a size with it.
	seen    map[stateKey]struct{}
	seenFor int
}

// part is one partition's replicas.
type part struct {
	states []limiter.KeyState // in the order received: a key's last is its copy
	live   int                // len(states) after the last compaction
	origin Origin             // the member that last replicated the partition
	// synced: the states hold a whole copy of the partition from origin
	// (it was sent whole, and every change since), not part of one: the
	// backup restarted, restored them from its disk, or dropped them.
	synced bool
}

// Origin is the member a partition's replicas came from.
type Origin struct {
	// ID is the member's.
	ID string
	// Boot is its process's when it sent them (peer.Replication.Boot):
	// a member back under another boot has restarted.
	Boot string
}

// compactSlack is what a partition's list may grow by past twice what
// its last compaction left: a partition of few keys is not compacted
// every few states.
const compactSlack = 64

type stateKey struct {
	key    string
	window time.Duration
	algo   limiter.Algorithm
	cal    limiter.Calendar
}

func stateKeyOf(ks limiter.KeyState) stateKey {
	return stateKey{ks.Key, ks.Window, ks.Algorithm, ks.Calendar}
}

// Journal is told of every change to a Store's replicas that a restart
// must replay, in the order made: what persistence writes (persist.Log).
// Its methods are called under the Store's lock, one at a time, and must
// not call the Store.
type Journal interface {
	// Replicated: the Store applied r from origin (Apply).
	Replicated(origin string, r peer.Replication)
	// Dropped: the Store dropped the replicas of partitions (Take, Drop).
	Dropped(partitions []int)
}

// noJournal tells nobody.
type noJournal struct{}

func (noJournal) Replicated(string, peer.Replication) {}
func (noJournal) Dropped([]int)                       {}

// NewStore returns an empty Store of partitions partitions that holds at
// most maxKeys states, split evenly over the partitions as the limiter's
// MaxKeys is, each log trimmed to its newest maxLog entries (the store's
// MaxLogLimit: no log needs more to decide). j is told of its changes
// (nil: nobody).
func NewStore(partitions, maxKeys int, maxLog int64, m *Metrics, j Journal) *Store {
	if j == nil {
		j = noJournal{}
	}
	return &Store{share: (maxKeys + partitions - 1) / partitions, maxLog: int(maxLog), metrics: m, journal: j,
		parts: make([]part, partitions)}
}

// Apply keeps r, a replication from origin, as the backup of its
// partitions: the partitions in r.Whole start afresh, and each state is
// its key's newest copy. It returns how many states it kept, and the
// partitions of r's states it holds no whole copy of from origin (this
// node restarted, restored them from its disk, dropped them, or last had
// them from another member): origin sends those whole next round.
func (s *Store) Apply(origin string, r peer.Replication) peer.Replicated {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.journal.Replicated(origin, r)
	from := Origin{ID: origin, Boot: r.Boot}
	for _, p := range r.Whole {
		if p >= 0 && p < len(s.parts) {
			s.drop(p)
			s.parts[p].origin, s.parts[p].synced = from, true
		}
	}
	var out peer.Replicated
	refused := 0
	for _, ks := range r.States {
		p := partition.Of(ks.Key, len(s.parts))
		pt := &s.parts[p]
		if !pt.synced || pt.origin.ID != origin {
			out.Unsynced = appendOnce(out.Unsynced, p)
			pt.synced = false
		}
		pt.origin = from
		if over := len(ks.Log) - s.maxLog; over > 0 {
			ks.Log = ks.Log[over:]
			if len(ks.Tags) > over { // a concurrency limit's slots keep their tags
				ks.Tags = ks.Tags[over:]
			}
		}
		pt.states = append(pt.states, ks)
		s.held++
		if !empty(ks) {
			out.Kept++
		}
		if len(pt.states) > 2*pt.live+compactSlack {
			_, r := s.compact(pt, noExpiry)
			refused += r
		}
	}
	s.metrics.held(s.held, refused)
	return out
}

// appendOnce appends p to ps unless ps holds it: a call's states come
// partition by partition, so the check is mostly against the last.
func appendOnce(ps []int, p int) []int {
	if slices.Contains(ps, p) {
		return ps
	}
	return append(ps, p)
}

// Stale marks every partition's replicas as no whole copy: what a
// restart restored from the disk misses what its owners sent after the
// last write that reached it. They stay, for a heir to promote if their
// owner does not come back, and each owner's next round, told so
// (peer.Replicated.Unsynced), sends its partitions whole again.
func (s *Store) Stale() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.parts {
		s.parts[p].synced = false
	}
}

// noExpiry compacts without dropping expired states: Apply has no clock.
const noExpiry = math.MinInt64

// compact leaves one state per key in pt, its last, in the order
// received: it drops superseded states, tombstones (with what they
// supersede), the states expired at now (Unix ms), and the states
// replicated longest ago past the partition's share, which it returns
// as refused. A calendar counter's state is never refused: it is a
// quota spent, which a promotion must find, and its owner held it (past
// its own cap if need be: limiter.Stats.CalendarOverCap), so what it adds
// past the share is bounded by what the owner holds. Requires s.mu held.
func (s *Store) compact(pt *part, now int64) (expired, refused int) {
	n := len(pt.states)
	if n == pt.live && now == noExpiry {
		return 0, 0 // nothing received since the last compaction
	}
	seen := s.scratch(n)
	w := n // pt.states[w:] are kept, newest last; w ≥ i throughout
	for i := n - 1; i >= 0; i-- {
		ks := pt.states[i]
		k := stateKeyOf(ks)
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		switch {
		case empty(ks):
		case now != noExpiry && expiry(ks) <= now:
			expired++
		case n-w >= s.share && ks.Calendar == 0:
			refused++
		default:
			w--
			pt.states[w] = ks
		}
	}
	live := copy(pt.states, pt.states[w:])
	clear(pt.states[live:]) // release the dropped states' keys and logs
	pt.states = pt.states[:live]
	s.held += live - n
	pt.live = live
	return expired, refused
}

// scratch returns compact's index, empty, for n states: a map is cleared
// in time proportional to the most it held, so one much larger than n is
// replaced. Requires s.mu held.
func (s *Store) scratch(n int) map[stateKey]struct{} {
	if s.seen == nil || n > s.seenFor || s.seenFor > 4*n {
		s.seen, s.seenFor = make(map[stateKey]struct{}, n), n
	} else {
		clear(s.seen)
	}
	return s.seen
}

// drop empties partition p. Requires s.mu held.
func (s *Store) drop(p int) int {
	pt := &s.parts[p]
	n := len(pt.states)
	s.held -= n
	pt.states, pt.live, pt.synced = nil, 0, false
	return n
}

// empty reports whether ks counts nothing: a key's tombstone
// (limiter.KeyState.Empty: a GCRA bucket's TAT counts too).
func empty(ks limiter.KeyState) bool { return ks.Empty() }

// Origin returns the member that last replicated partition p to this
// node (zero if none did).
func (s *Store) Origin(p int) Origin {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parts[p].origin
}

// Holds reports whether the store holds replicas of partition p.
func (s *Store) Holds(p int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactFor(p)
	return len(s.parts[p].states) > 0
}

// compactFor compacts partition p before it is read, and counts what it
// refused. Requires s.mu held.
func (s *Store) compactFor(p int) {
	if _, refused := s.compact(&s.parts[p], noExpiry); refused > 0 {
		s.metrics.held(s.held, refused)
	}
}

// Take removes and returns the replicas of partition p, and the member
// that sent them: its owner failed, or cannot be reached, and this node,
// its heir, merges them into its own state.
func (s *Store) Take(p int) ([]limiter.KeyState, Origin) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactFor(p)
	out := s.parts[p].states
	if len(out) > 0 {
		s.journal.Dropped([]int{p})
	}
	s.drop(p)
	s.metrics.held(s.held, 0)
	return out, s.parts[p].origin
}

// Drop removes the replicas of partition p (its owner left gracefully and
// handed its state off, or this node is no longer its backup) and
// returns how many it dropped.
func (s *Store) Drop(p int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compactFor(p)
	if len(s.parts[p].states) > 0 {
		s.journal.Dropped([]int{p})
	}
	n := s.drop(p)
	s.metrics.held(s.held, 0)
	return n
}

// Export yields a copy of every partition's replicas, compacted, as the
// whole replication of that partition from the member that sent them,
// one partition at a time and outside the lock: what a snapshot of the
// node's state writes. A partition changed while it is exported is the
// journal's to replay.
func (s *Store) Export(yield func(origin string, r peer.Replication) error) error {
	for p := range s.parts {
		s.mu.Lock()
		s.compactFor(p)
		states, origin := slices.Clone(s.parts[p].states), s.parts[p].origin
		s.mu.Unlock()
		if len(states) == 0 {
			continue
		}
		if err := yield(origin.ID, peer.Replication{Whole: []int{p}, States: states, Boot: origin.Boot}); err != nil {
			return err
		}
	}
	return nil
}

// Len returns how many states the store holds, one per key.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.parts {
		s.compactFor(p)
	}
	s.metrics.held(s.held, 0)
	return s.held
}

// Sweep compacts every partition, drops the replicas that count nothing
// any more at now, and returns how many expired.
func (s *Store) Sweep(now time.Time) int {
	ms := now.UnixMilli()
	freed, refused := 0, 0
	for p := range s.parts {
		s.mu.Lock() // a partition at a time: Apply waits one compaction at most
		e, r := s.compact(&s.parts[p], ms)
		s.mu.Unlock()
		freed, refused = freed+e, refused+r
	}
	s.mu.Lock()
	s.metrics.held(s.held, refused)
	s.mu.Unlock()
	return freed
}

// expiry is the time (Unix ms) from which ks counts nothing, as the
// limiter computes it (limiter.KeyState.Expiry).
func expiry(ks limiter.KeyState) int64 { return ks.Expiry() }
