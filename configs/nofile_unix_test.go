//go:build unix

package configs_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/configs"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	"github.com/peerlimit/peerlimit/limiter"
)

// notFiles makes, in dir, what a config path must not be: a named pipe,
// and a symlink to /dev/zero. Each is named by its path.
func notFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	zero := filepath.Join(dir, "zero")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	return map[string]string{fifo: "a named pipe (FIFO)", zero: "a character device"}
}

// A named pipe or a /dev/zero symlink at --policies or at a single-file
// --envoy-rls-config is refused at start, naming it, without blocking.
func TestAConfigPathThatIsNoFileIsRefusedAtStart(t *testing.T) {
	for path, kind := range notFiles(t, t.TempDir()) {
		for name, edit := range map[string]func(*configs.Config){
			"policies":         func(c *configs.Config) { c.PoliciesFile = path },
			"envoy rls config": func(c *configs.Config) { c.EnvoyRLSConfig = path },
		} {
			deps := configs.Deps{Check: func(limiter.Request) error { return nil }, Now: time.Now, Registerer: prometheus.NewRegistry(), Logger: slog.Default()}
			var err error
			within(t, "New with "+path, func() { _, err = configs.New(fileConfig(edit), deps) })
			require.Error(t, err)
			assert.Contains(t, err.Error(), name+": "+path+" is "+kind+", not a regular file")
		}
	}
}

// The same put in place of a file in force, by rename, as an operator's
// mistake would: the watcher's reload and a SIGHUP's refuse it, naming
// it, and keep what is in force; a valid file after it applies, and the
// shutdown is not held up.
func TestAConfigPathThatBecomesNoFileIsRefusedAtReload(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies.yaml")
	rls := filepath.Join(dir, "rls.yaml")
	write(t, policies, "login: {limit: 3, window: 1h}\n")
	write(t, rls, edgeRules(3))
	s := startSet(t, fileConfig(func(c *configs.Config) { c.PoliciesFile, c.EnvoyRLSConfig = policies, rls }), nil)
	login := func() int64 { p, _ := s.Policies().Lookup("login"); return p.Limit }

	policyLimit, rlsLimit := int64(3), uint32(3)
	for _, which := range []string{"fifo", "zero"} {
		for _, c := range []struct {
			source, path string
			reload       func() error
		}{{"policies", policies, s.ReloadPolicies}, {"envoy_rls", rls, s.ReloadEnvoyRLS}} {
			made := filepath.Join(t.TempDir(), which)
			kind := notFiles(t, filepath.Dir(made))[made]
			require.NoError(t, os.Rename(made, c.path))
			want := c.path + " is " + kind + ", not a regular file"
			wait.For(t, 10*time.Second, func() (bool, string) {
				return strings.Contains(s.Errors()[c.source], want), fmt.Sprintf("config errors %q, want %q", s.Errors(), want)
			})
			var err error
			within(t, "the reload of "+c.path, func() { err = c.reload() })
			assert.ErrorContains(t, err, want)
			assert.Equal(t, policyLimit, login(), "the policies in force are kept")
			assert.Equal(t, rlsLimit, s.edgeLimit(), "the rules in force are kept")

			// A valid file replaces it: reloaded as ever.
			require.NoError(t, os.Remove(c.path))
			if c.source == "policies" {
				policyLimit++
				write(t, policies, fmt.Sprintf("login: {limit: %d, window: 1h}\n", policyLimit))
				wait.For(t, 10*time.Second, func() (bool, string) { return login() == policyLimit, fmt.Sprint("login's limit is ", login()) })
			} else {
				rlsLimit++
				write(t, rls, edgeRules(int(rlsLimit)))
				s.awaitEdgeLimit(rlsLimit)
			}
		}
	}
	within(t, "the shutdown", func() { assert.NoError(t, s.Shutdown(context.Background())) })
}

// In a configuration directory, entries that are no files are skipped,
// as upstream skips them, and each is logged.
func TestAConfigDirectorySaysWhatItSkipped(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "edge.yaml"), edgeRules(7))
	skipped := notFiles(t, dir)
	var logs syncBuffer
	s := startSet(t, fileConfig(func(c *configs.Config) { c.EnvoyRLSConfig = dir }), func(d *configs.Deps) {
		d.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	assert.EqualValues(t, 7, s.edgeLimit())
	for path, kind := range skipped {
		assert.Contains(t, logs.String(), fmt.Sprintf("path=%s why=\"%s, not a regular file\"", path, kind))
	}

	// At a reload too: a named pipe put there since is skipped and said.
	later := filepath.Join(dir, "later.yaml")
	require.NoError(t, syscall.Mkfifo(later, 0o600))
	write(t, filepath.Join(dir, "edge.yaml"), edgeRules(8))
	within(t, "the reload", func() { require.NoError(t, s.ReloadEnvoyRLS()) })
	assert.EqualValues(t, 8, s.edgeLimit())
	assert.Contains(t, logs.String(), fmt.Sprintf("path=%s why=\"a named pipe (FIFO), not a regular file\"", later))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}
func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }
