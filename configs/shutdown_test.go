package configs_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/limiter"
)

// A reload of the watcher's that blocks (here in Deps.Check, where a read
// on a file system that hangs would block it) does not hold Shutdown up
// past its context: Shutdown returns when the context ends, saying a
// reload was left behind. The reload then ends on its own, and a later
// Shutdown finds everything stopped. Before, Shutdown waited for it with
// no deadline, and the node's shutdown with it.
func TestShutdownDoesNotWaitForABlockedReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, "login: {limit: 3, window: 1h}\n")
	var armed atomic.Bool
	var enter sync.Once
	entered, release := make(chan struct{}), make(chan struct{})
	s := startSet(t, fileConfig(func(c *configs.Config) { c.PoliciesFile = path }), func(d *configs.Deps) {
		d.Check = func(limiter.Request) error {
			if armed.Load() {
				enter.Do(func() { close(entered) })
				<-release
			}
			return nil
		}
	})
	armed.Store(true)
	write(t, path, "login: {limit: 4, window: 1h}\n") // the watcher's next reload blocks in Check
	select {
	case <-entered:
	case <-time.After(10 * time.Second): // a deadline for the failure, not a wait for success
		t.Fatal("no reload of the watcher's began")
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	cancel() // the node's --shutdown-timeout, run out
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorContains(t, err, "a reload under way was left behind")
	case <-time.After(10 * time.Second): // a deadline for the failure, not a wait for success
		close(release)
		t.Fatal("Shutdown waited for the blocked reload past its context")
	}

	close(release) // the file system answers at last: the reload ends, and the watcher with it
	within(t, "the second shutdown", func() { require.NoError(t, s.Shutdown(context.Background())) })
}
