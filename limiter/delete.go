package limiter

import "time"

// Delete removes key's state under window and algorithm alg, and reports
// whether that state still counted anything at now (an expired state is
// removed too, but reported as absent: it no longer limited anyone). An
// operator's reset uses it to lift a block by hand.
//
// Only that one state is touched: the same key under another window or
// algorithm is another limit (see Request).
func (a *Admin) Delete(now time.Time, key string, window time.Duration, alg Algorithm) bool {
	return a.DeleteLimit(now, Request{Key: key, Window: window, Algorithm: alg})
}

// DeleteLimit is Delete of the limit r names: r's key under its window,
// or its calendar, and its algorithm.
func (a *Admin) DeleteLimit(now time.Time, r Request) bool {
	ms := max(now.UnixMilli(), 0)
	k := stateKey{r.Key, r.stateWindow()}
	alg := r.Algorithm
	sh := a.shards.of(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if alg == GCRA {
		st, ok := sh.gcras[k]
		if !ok {
			return false
		}
		sh.removeGCRA(k, st) // journals its tombstone: a backup's copy must go too
		return st.tat > nanos(now)
	}
	sh.touch(k) // a backup's copy must go too
	if alg.Logged() {
		st, ok := sh.logs[k]
		if !ok {
			return false
		}
		sh.deleteLog(k, st)
		return st.expiry(k.span()) > ms
	}
	st, ok := sh.counters[k]
	if !ok {
		return false
	}
	sh.deleteCounter(k, st)
	return counterExpiryOf(k, &st) > ms
}

// DeleteKey removes key's state under every window and algorithm and
// returns how many of the removed states still counted anything at now.
//
// States are indexed by (key, window), so finding every window of a key
// means scanning its partition under the partition's lock: about MaxKeys
// divided by the partition count entries at most (~3,900 with the defaults:
// 2^20 over 271), tens of microseconds during which that one partition's
// decisions wait. Fine for an operator's call, not for a request path.
func (a *Admin) DeleteKey(now time.Time, key string) int {
	ms := max(now.UnixMilli(), 0)
	sh := a.shards.of(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	live := 0
	for k, st := range sh.counters {
		if k.key == key {
			if counterExpiryOf(k, &st) > ms {
				live++
			}
			sh.touch(k)
			sh.deleteCounter(k, st)
		}
	}
	for k, st := range sh.logs {
		if k.key == key {
			if st.expiry(k.span()) > ms {
				live++
			}
			sh.touch(k)
			sh.deleteLog(k, st)
		}
	}
	ns := nanos(now)
	for k, st := range sh.gcras {
		if k.key == key {
			if st.tat > ns {
				live++
			}
			sh.removeGCRA(k, st)
		}
	}
	return live
}
