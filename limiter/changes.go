package limiter

import (
	"strings"
	"time"
)

// A journal records, per partition, which states changed since the
// replicator last took them (Config.TrackChanges), so that a round sends
// a backup only those, without walking the partition.
//
// A check is the common change, and it must cost almost nothing: the
// state it changed carries the round (epoch) in which it was last
// journaled and its record's index (mark, slot), so a repeated change
// overwrites its record in place and a first one appends. Neither looks
// anything up, and the round reads the records in order without looking
// anything up either: a counter's record holds its counts, a log's its
// state. Rarer changes (a merge, a handoff's forget, a lease's move, a
// reset) append a lookup record, read from the maps when taken; so does a
// journaled state that is deleted (evicted, expired, reset), which then
// goes as its tombstone, as the backup must drop its copy. A GCRA
// bucket's every change, a check's or a rarer one's, writes its record
// (its TAT) as a counter's check does, and its deletion that record's
// tombstone (TAT 0): it never needs a lookup.
//
// Records go in the order the changes were made, and a backup applies
// them in order: a lookup record reads the state as it is when taken,
// never older than an earlier record of the same key.
type journal struct {
	epoch   uint32 // never 0: a new state's mark is 0
	changes []change
}

type changeKind uint8

const (
	counterChange changeKind = iota // counter holds the counts
	logChange                       // log is the state, read when taken
	lookupChange                    // read the counter's and the log's maps when taken
	gcraChange                      // tat holds the bucket's TAT, 0 its tombstone
)

type change struct {
	key     string // the journal's copy: the caller's may be a request buffer
	window  int64  // ms
	kind    changeKind
	counter counterState
	log     *logState
	tat     int64 // Unix ns
}

func newJournal() *journal { return &journal{epoch: 1} }

// owns reports whether the record at slot is k's, journaled this epoch
// as kind: the slot of a state journaled in an earlier epoch may hold
// another key's record, or none.
func (j *journal) owns(mark, slot uint32, k stateKey, kind changeKind) bool {
	if mark != j.epoch || int(slot) >= len(j.changes) {
		return false
	}
	c := &j.changes[slot]
	return c.kind == kind && c.window == k.window && c.key == k.key
}

// journalCounter records that the counter of k changed to *st, and marks
// st with its record: call it before st is stored. Requires sh.mu held.
func (sh *shard) journalCounter(k stateKey, st *counterState) {
	j := sh.journal
	if j == nil {
		return
	}
	if j.owns(st.mark, st.slot, k, counterChange) {
		j.changes[st.slot].counter = *st
		return
	}
	st.mark, st.slot = j.epoch, uint32(len(j.changes))
	j.changes = append(j.changes, change{key: strings.Clone(k.key), window: k.window, kind: counterChange, counter: *st})
}

// journalLog records that the log of k changed. Requires sh.mu held.
func (sh *shard) journalLog(k stateKey, st *logState) {
	j := sh.journal
	if j == nil || j.owns(st.mark, st.slot, k, logChange) {
		return // the record reads st when taken
	}
	st.mark, st.slot = j.epoch, uint32(len(j.changes))
	j.changes = append(j.changes, change{key: strings.Clone(k.key), window: k.window, kind: logChange, log: st})
}

// touch records that k's state, of either algorithm, changed or went,
// to be read when taken. Requires sh.mu held.
func (sh *shard) touch(k stateKey) {
	if sh.journal != nil {
		sh.journal.changes = append(sh.journal.changes, change{key: strings.Clone(k.key), window: k.window, kind: lookupChange})
	}
}

// unjournal turns the record of a state being deleted, if it has one
// this epoch, into a lookup: taken, it finds the state gone (or a new
// one) and sends that. Requires sh.mu held.
func (sh *shard) unjournal(k stateKey, mark, slot uint32, kind changeKind) {
	if j := sh.journal; j != nil && j.owns(mark, slot, k, kind) {
		j.changes[slot] = change{key: j.changes[slot].key, window: k.window, kind: lookupChange}
	}
}

// Changes is a Store's change tracking (Config.TrackChanges): what
// changed in each partition since the last round, which a node sends its
// backups and its disk. Get it with Store.Changes. It is safe for
// concurrent use, with itself and with every other call on the Store:
// each call locks one partition at a time. Without TrackChanges it
// tracks nothing, and Take and TakeAll return nothing.
type Changes struct {
	shards shards
}

// Take appends to out the state, at now, of every key of
// partition i that changed since the last call, in the order they
// changed, and forgets that they changed: what an owner sends its backup
// (see Config.TrackChanges). A state that is gone or expired comes as
// its tombstone, an empty state (no counts, no log), on which a backup
// drops its copy; a key changed by something rarer than a check (see
// journal) comes under both window algorithms, as its state or its
// tombstone (a GCRA bucket comes as its own). A bucket's TAT is read
// against now's millisecond: one that drained within it still comes as
// its state, which counts nothing.
// The caller may reuse out: nothing appended refers to the store's
// memory but key strings and fresh logs.
func (c *Changes) Take(out []KeyState, i int, now time.Time) []KeyState {
	ms := max(now.UnixMilli(), 0)
	sh := &c.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	j := sh.journal
	if j == nil || len(j.changes) == 0 {
		return out
	}
	for i := range j.changes {
		out = sh.appendChange(out, &j.changes[i], ms)
	}
	j.reset()
	return out
}

// TakeAll is Take of every partition, into out (by
// partition; reused, its slices emptied first, and made if too short):
// what a node's round takes once for its backups and its disk alike.
func (c *Changes) TakeAll(out [][]KeyState, now time.Time) [][]KeyState {
	if len(out) < len(c.shards) {
		out = make([][]KeyState, len(c.shards))
	}
	for i := range c.shards {
		clear(out[i])
		out[i] = c.Take(out[i][:0], i, now)
	}
	return out
}

// Clear forgets which keys of partition i changed: the caller has
// just taken a whole copy of it (Transfer.SnapshotPartition).
func (c *Changes) Clear(i int) {
	sh := &c.shards[i]
	sh.mu.Lock()
	if sh.journal != nil {
		sh.journal.reset()
	}
	sh.mu.Unlock()
}

// reset drops the records, and what they reference, and starts a new
// epoch: no state's mark names it. The records' array is kept for the
// next round unless a burst (a handoff merged, a reset of many keys)
// left it far larger than this round needed.
func (j *journal) reset() {
	if n := len(j.changes); cap(j.changes) > 1024 && cap(j.changes) > 4*n {
		j.changes = nil
	} else {
		clear(j.changes)
		j.changes = j.changes[:0]
	}
	if j.epoch++; j.epoch == 0 {
		j.epoch = 1
	}
}

// appendChange appends the state c recorded, at now (ms), to out.
// Requires sh.mu held.
func (sh *shard) appendChange(out []KeyState, c *change, now int64) []KeyState {
	k := stateKey{c.key, c.window}
	switch c.kind {
	case counterChange:
		ks := keyStateOf(k, SlidingWindowCounter)
		if counterExpiryOf(k, &c.counter) > now {
			ks.WindowID, ks.Prev, ks.Curr = c.counter.window, c.counter.prev, c.counter.curr
		}
		return append(out, ks)
	case logChange:
		ks := keyStateOf(k, k.logAlgorithm())
		ks.Log, ks.Tags = liveOf(k, c.log, now)
		return append(out, ks)
	case gcraChange:
		ks := keyStateOf(k, GCRA)
		if c.tat > satMul(now, int64(time.Millisecond)) {
			ks.TAT = c.tat
		}
		return append(out, ks)
	}
	return sh.appendLookup(out, k, now)
}

// appendLookup appends the state of k at now (ms) under each algorithm:
// its counter and its log, each as its tombstone if it is gone or
// expired. A calendar limit has a counter only, a concurrency limit a
// log only. Requires sh.mu held.
func (sh *shard) appendLookup(out []KeyState, k stateKey, now int64) []KeyState {
	counter := keyStateOf(k, SlidingWindowCounter)
	if st, ok := sh.counters[k]; ok && counterExpiryOf(k, &st) > now {
		counter.WindowID, counter.Prev, counter.Curr = st.window, st.prev, st.curr
	}
	log := keyStateOf(k, k.logAlgorithm())
	if st, ok := sh.logs[k]; ok {
		log.Log, log.Tags = liveOf(k, st, now)
	}
	switch {
	case k.concurrency():
		return append(out, log)
	case k.window < 0:
		return append(out, counter)
	}
	return append(out, counter, log)
}
