//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// makeNotFile makes at path what a config file must not be: a named pipe
// ("fifo") or a symlink to /dev/zero ("zero").
func makeNotFile(t *testing.T, path, which string) {
	t.Helper()
	if which == "fifo" {
		require.NoError(t, syscall.Mkfifo(path, 0o600))
		return
	}
	require.NoError(t, os.Symlink("/dev/zero", path))
}

// A real process started with a named pipe or /dev/zero at --policies or
// at a single-file --envoy-rls-config exits at once, naming the path:
// before, it hung in open() without a word.
func TestAProcessRefusesAConfigPathThatIsNoFile(t *testing.T) {
	for _, flag := range []string{"--policies", "--envoy-rls-config"} {
		for _, which := range []string{"fifo", "zero"} {
			path := filepath.Join(t.TempDir(), "config.yaml")
			makeNotFile(t, path, which)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, os.Args[0], "--id", "nofile", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
				"--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local", flag, path)
			cmd.Env = append(os.Environ(), runMainEnv+"=1")
			out, err := cmd.CombinedOutput()
			timedOut := ctx.Err()
			cancel()
			require.NoError(t, timedOut, "%s %s (%s): the process did not exit", flag, path, which)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s", out)
			assert.Equal(t, 1, exit.ExitCode())
			assert.Contains(t, string(out), path+" is ", "%s %s", flag, which)
			assert.Contains(t, string(out), "not a regular file")
		}
	}
}

// A running process whose config files become a named pipe, then a
// /dev/zero symlink: the watcher's reload and SIGHUP's refuse them,
// naming the path, and SIGTERM still stops the node at once. Before, the
// reload blocked in open() and the shutdown with it, until SIGKILL.
func TestAConfigPathThatBecomesNoFileWedgesNothing(t *testing.T) {
	dir := t.TempDir()
	policies, rls := filepath.Join(dir, "policies.yaml"), filepath.Join(dir, "rls.yaml")
	require.NoError(t, os.WriteFile(policies, []byte("login: {limit: 5, window: 1m}\n"), 0o600))
	require.NoError(t, os.WriteFile(rls, []byte("domain: edge\ndescriptors: [{key: client, rate_limit: {unit: minute, requests_per_unit: 5}}]\n"), 0o600))
	p := startProcess(t, "nofile", "--policies", policies, "--envoy-rls-config", rls)
	for _, which := range []string{"fifo", "zero"} {
		for _, path := range []string{policies, rls} {
			tmp := filepath.Join(t.TempDir(), which)
			makeNotFile(t, tmp, which)
			require.NoError(t, os.Rename(tmp, path))
		}
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
		kind := map[string]string{"fifo": "a named pipe (FIFO)", "zero": "a character device"}[which]
		prefix := map[string]string{policies: "policies", rls: "envoy rls config"}
		for seen := map[string]bool{}; len(seen) < 2; { // the watcher's reloads and SIGHUP's, in any order
			rec := waitForLog(t, p.lines, "policy reload failed; the policies in force are kept",
				"envoy rls config reload failed; the configuration in force is kept")
			for _, path := range []string{policies, rls} {
				if rec["err"] == prefix[path]+": "+path+" is "+kind+", not a regular file" {
					seen[path] = true
				}
			}
		}
		require.NoError(t, os.Remove(policies))
		require.NoError(t, os.Remove(rls))
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM")
	case <-time.After(20 * time.Second): // a deadline for the failure, not a wait for success
		t.Fatal("the node did not exit within 20s of SIGTERM")
	}
}
