package loop_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/loop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every runs its task each interval until Stop, which waits for every
// loop: no goroutine outlives it, and no run starts after it.
func TestEveryRunsUntilStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := loop.New()
		var runs atomic.Int32
		g.Every(time.Second, func() { runs.Add(1) })
		stopped := make(chan struct{})
		g.Go(func(stop <-chan struct{}) { <-stop; close(stopped) })
		time.Sleep(3500 * time.Millisecond)
		if n := runs.Load(); n != 3 {
			t.Fatalf("after 3.5 intervals: %d runs, want 3", n)
		}
		g.Stop()
		select {
		case <-stopped:
		default:
			t.Fatal("Stop returned before a loop did")
		}
		time.Sleep(5 * time.Second)
		if n := runs.Load(); n != 3 {
			t.Fatalf("%d runs after Stop, want none more", n-3)
		}
		g.Stop() // twice is fine
	})
}
