// Package wait polls a condition with a deadline: how tests wait for a
// cluster to converge, never by sleeping a guessed time.
package wait

import (
	"testing"
	"time"
)

// For polls cond every 20ms until it holds, and fails t with cond's last
// explanation if it still does not after within.
func For(t testing.TB, within time.Duration, cond func() (ok bool, why string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
