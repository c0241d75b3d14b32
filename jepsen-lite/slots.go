package jepsenlite

import (
	"context"
	"math/rand/v2"
	"time"
)

// How a workload holds the concurrency slots it takes (jepsen-lite's and
// the simulation's alike): from HoldMin to HoldMax, except one in
// AbandonEvery, never released (it frees itself at the key's window);
// then released through a node, retried through another after
// releaseRetry when one does not answer, releaseAttempts times at most.
const (
	HoldMin, HoldMax = 50 * time.Millisecond, 500 * time.Millisecond
	AbandonEvery     = 20
	releaseAttempts  = 3
	releaseRetry     = 100 * time.Millisecond
)

// DrawHold draws from r how long a slot just taken is held; false: it is
// abandoned.
func DrawHold(r *rand.Rand) (time.Duration, bool) {
	if r.IntN(AbandonEvery) == 0 {
		return 0, false
	}
	return HoldMin + time.Duration(r.Int64N(int64(HoldMax-HoldMin))), true
}

// HoldThenRelease waits hold, then releases a slot as a client would:
// pick names a node and returns a send that releases through it and
// reports whether the node answered (nil send: no node to ask). A node
// that did not answer is not picked again while another is (8 draws at
// most). A slot still held when ctx ends is abandoned.
func HoldThenRelease(ctx context.Context, hold time.Duration, pick func() (node string, send func() bool)) {
	t := time.NewTimer(hold)
	defer t.Stop()
	failed := map[string]bool{}
	for range releaseAttempts {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		node, send := pick()
		for i := 0; i < 8 && send != nil && failed[node]; i++ {
			node, send = pick()
		}
		if send == nil || send() {
			return
		}
		failed[node] = true
		t.Reset(releaseRetry)
	}
}
