package limiter

// unknownSettles are one partition's settles of tokens it had no record
// of (SettledUnknown: the owner changed), remembered so that a retry
// counts once. They are bounded apart from the reservations: a flood of
// them (with a public token key, anyone can make tokens) must never take
// the room a RESERVE needs. At the bound the oldest is forgotten: a retry
// of it, should one still come, is applied again, which the caller of a
// retry that late already risks with an expired token. Under the shard's
// lock, as the book is.
type unknownSettles struct {
	byID map[uint64]reservation
	// order is the ids in the order they were remembered, oldest first;
	// ids of records the sweep expired stay until they reach the front or
	// a compaction drops them.
	order []uint64
}

// lookup returns the settle of id remembered here.
func (u *unknownSettles) lookup(id uint64) (reservation, bool) {
	rec, ok := u.byID[id]
	return rec, ok
}

// add remembers the settle rec of id, forgetting the oldest while more
// than share are remembered, and returns how many it remembers more (1,
// or 0 when it forgot one: the net change, for the store's total).
func (u *unknownSettles) add(id uint64, rec reservation, share int) int {
	if u.byID == nil {
		u.byID = make(map[uint64]reservation)
	}
	before := len(u.byID)
	u.byID[id] = rec
	u.order = append(u.order, id)
	for len(u.byID) > share && len(u.order) > 0 {
		delete(u.byID, u.order[0])
		u.order = u.order[1:]
	}
	if len(u.order) > 2*len(u.byID)+64 {
		u.compact()
	}
	return len(u.byID) - before
}

// compact drops the ids of forgotten records from order, keeping the
// order of the others.
func (u *unknownSettles) compact() {
	kept := make([]uint64, 0, len(u.byID))
	seen := make(map[uint64]struct{}, len(u.byID))
	for _, id := range u.order {
		if _, ok := u.byID[id]; !ok {
			continue
		}
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		kept = append(kept, id)
	}
	u.order = kept
}

// expire forgets the records due at ms, returns how many, and the
// soonest expiry of those left (next, if none is later than it).
func (u *unknownSettles) expire(ms, next int64) (int, int64) {
	n := 0
	for id, rec := range u.byID {
		if rec.expires > ms {
			next = min(next, rec.expires)
			continue
		}
		delete(u.byID, id)
		n++
	}
	if n > 0 && len(u.order) > 2*len(u.byID)+64 {
		u.compact()
	}
	return n, next
}
