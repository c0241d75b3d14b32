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

// slotRebaseFloor is the least clock difference (ms) by which a
// concurrency limit's slots are rebased when they travel (a replica's
// copy, a handoff). A release finds its slot by its token's time, exactly:
// had the slots moved by the call's transit, as a log's entries do, a
// release on the heir after a failover would find nothing, and the slot
// would stay held until it freed itself. And no release may take another
// slot near its time instead: a token whose slot was never here (acquired
// on the other side of a partition, or before a reset) would then free a
// slot still held, one more in flight, silently. So within this floor a
// slot keeps its time, and a slot never released frees itself on the heir
// up to the two clocks' difference early or late; beyond it (a clock
// fault) the slots move as log entries do, and a release on the heir from
// a token finds nothing (under-admission until the slot frees itself).
const slotRebaseFloor = 250 // ms

// rebaseSlots moves a concurrency limit's slots by d ms, unless the two
// clocks agree within slotRebaseFloor (see there).
func (s *KeyState) rebaseSlots(d int64) {
	if -slotRebaseFloor <= d && d <= slotRebaseFloor {
		return
	}
	s.rebaseLog(d)
}
