package limiter

// Concurrency limits. A concurrency limit of N slots, each held at most
// W, is a log of the times its slots were taken: a slot is an entry, in
// flight while it is in the log's window, so a slot never released frees
// itself W after it was taken, as a log entry leaves its window. OpAcquire
// is OpHold of one hit under a TTL of W, so OpRelease frees the slot (the
// hold's refund removes its entry) and a retried release counts once.
// Being a log, the state is replicated, handed off, rebased and persisted
// as a log is: the replicas carry every slot's time, so a failover frees
// no slot early. The log's entries are what the limit counts, so it is
// exact on its owner under any concurrency.
//
// Its state is stored in the shard's logs under a window of its own,
// concurrencyWindow: negative as a calendar counter's, but past every
// calendar code (a uint32), so that neither a window log of the same key
// and window nor a calendar's change record can be taken for it.

// concurrencyBase offsets a concurrency limit's state window past every
// Calendar.stateWindow.
const concurrencyBase = 1 << 40

// concurrencyWindow is the state window of a concurrency limit whose
// slots last w ms.
func concurrencyWindow(w int64) int64 { return -(concurrencyBase + w) }

// concurrency reports whether k is a concurrency limit's.
func (k stateKey) concurrency() bool { return k.window <= -concurrencyBase }

// span is the window, in ms, of the log k names: a window log's, or how
// long a concurrency limit's slot lasts.
func (k stateKey) span() int64 {
	if k.concurrency() {
		return -k.window - concurrencyBase
	}
	return k.window
}

// logAlgorithm is the algorithm of the log k names.
func (k stateKey) logAlgorithm() Algorithm {
	if k.concurrency() {
		return Concurrency
	}
	return SlidingWindowLog
}

// releaseSlack is how far after its token's time a released slot's entry
// may be found. A slot that travelled (a replica's copy, a handoff) was
// rebased onto its new owner's clock and lands up to the call's transit
// later (rebase.go), so after a failover the entry stamped at is not
// there; the earliest entry within releaseSlack after it is taken for it.
// The count is what it must be, one slot fewer; which slot frees itself
// when may differ by up to releaseSlack. The cost, stated in
// docs/limiter.md: a release the dead owner had applied, retried on the
// heir, frees one more slot if one was taken within releaseSlack after it.
const releaseSlack = 250 // ms

// removeSlotsOrEntries takes back up to n entries of the log of k counted
// at at (ms), as seen at now: exactly at for a window log; for a
// concurrency limit's slots, at or, if none is there, the earliest within
// releaseSlack after it. Requires the shard's lock held.
func removeSlotsOrEntries(st *logState, k stateKey, now, at, n int64) int64 {
	got := st.removeAt(now, k.span(), at, n)
	if got < n && k.concurrency() {
		got += st.removeBetween(now, k.span(), at+1, at+releaseSlack, n-got)
	}
	return got
}
