package limiter

import (
	"time"

	"github.com/peerlimit/peerlimit/topk"
)

// HotKeysEpoch is the length of one epoch of the hot-key summaries. A
// summary counts the current epoch and keeps the one before, so HotKeys
// covers the last one to two epochs: 30 to 60 s, "the last minute".
// Epochs are aligned to the Unix epoch, so every node's agree.
const HotKeysEpoch = 30 * time.Second

const hotEpochMS = int64(HotKeysEpoch / time.Millisecond)

// hotKeys is one partition's Space-Saving summaries of the keys it
// decided: by checks and by denied checks, for the current epoch [0]
// and the one before [1]. Guarded by its shard's lock.
type hotKeys struct {
	epoch   int64
	end     int64 // ms: where epoch ends, so that observing needs no division
	checks  [2]*topk.Summary
	denials [2]*topk.Summary
}

func newHotKeys(capacity int) *hotKeys {
	h := &hotKeys{}
	for i := range 2 {
		h.checks[i], h.denials[i] = topk.New(capacity), topk.New(capacity)
	}
	return h
}

// observe counts one decided check of key (hash: its partition.Hash) at
// now (ms).
func (h *hotKeys) observe(now int64, hash uint64, key string, allowed bool) {
	if now >= h.end {
		h.roll(now / hotEpochMS)
	}
	h.checks[0].Add(hash, key, 1)
	if !allowed {
		h.denials[0].Add(hash, key, 1)
	}
}

// roll moves the summaries to epoch e: the current one becomes the one
// before, or both are cleared when more than an epoch passed. A clock
// that stepped back keeps counting into the current epoch.
func (h *hotKeys) roll(e int64) {
	switch {
	case e <= h.epoch:
		return
	case e == h.epoch+1:
		for _, s := range []*[2]*topk.Summary{&h.checks, &h.denials} {
			s[0], s[1] = s[1], s[0]
			s[0].Reset()
		}
	default:
		for _, s := range []*topk.Summary{h.checks[0], h.checks[1], h.denials[0], h.denials[1]} {
			s.Reset()
		}
	}
	h.epoch, h.end = e, (e+1)*hotEpochMS
}

// HotKeys is a store's heaviest keys over the last 30 to 60 s.
type HotKeys struct {
	// Since is when the counts start: the start of the previous epoch.
	Since time.Time
	// Checks and Denials are the keys with the most decided checks and
	// the most denied checks, heaviest first. Each Count overestimates
	// the true count by at most its Err.
	Checks, Denials []topk.Entry
}

// HotKeys returns the n keys this store decided most often, and the n it
// denied most often, over the current and the previous epoch
// (HotKeysEpoch); empty when Config.HotKeys is 0. Each partition
// monitors Config.HotKeys keys per list, so a key with more than
// 1 ÷ HotKeys of its partition's checks in an epoch is always listed,
// and any count is at most the partition's smallest monitored count
// above the truth (Entry.Err says by how much at most). It locks one
// partition at a time and allocates its answer: an operator's call.
func (a *Admin) HotKeys(now time.Time, n int) HotKeys {
	ms := max(now.UnixMilli(), 0)
	e := ms / hotEpochMS
	out := HotKeys{Since: time.UnixMilli((e - 1) * hotEpochMS)}
	if a.cfg.HotKeys == 0 || n < 1 {
		return out
	}
	var checks, denials []topk.Entry
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		sh.hot.roll(e)
		checks = append(checks, mergeEpochs(sh.hot.checks)...)
		denials = append(denials, mergeEpochs(sh.hot.denials)...)
		sh.mu.Unlock()
	}
	// Partitions hold disjoint keys: their lists add up as they are.
	out.Checks, out.Denials = topk.Top(checks, n), topk.Top(denials, n)
	return out
}

// mergeEpochs combines one partition's two epochs of one list.
func mergeEpochs(s [2]*topk.Summary) []topk.Entry {
	return topk.Merge([][]topk.Entry{s[0].AppendEntries(nil), s[1].AppendEntries(nil)}, []uint64{s[0].Min(), s[1].Min()})
}
