//go:build unix

package main

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
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
	exitsOnSIGTERM(t, p.cmd)
}

// credentialFiles writes, in dir, a file for every credential flag a node
// reads (TLS material, API tokens, cluster secrets, the gossip keyring),
// each valid, and returns the flags and their paths.
func credentialFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	nodeCA, clientCA := testcerts.NewCA(t, "nodes"), testcerts.NewCA(t, "clients")
	srv := nodeCA.Issue(t, testcerts.Leaf{Name: "server", DNSNames: []string{"node.test"}, IPs: testcerts.Loopback, Server: true})
	peer := nodeCA.Issue(t, testcerts.Leaf{Name: "peer", DNSNames: []string{"peerlimit-peer"}})
	files := map[string]string{}
	for flag, from := range map[string]string{
		"--tls-cert-file": srv.CertFile, "--tls-key-file": srv.KeyFile, "--tls-client-ca-file": clientCA.File,
		"--peer-tls-ca-file": nodeCA.File, "--peer-tls-cert-file": peer.CertFile, "--peer-tls-key-file": peer.KeyFile,
	} {
		b, err := os.ReadFile(from)
		require.NoError(t, err)
		files[flag] = writeFile(t, dir, flag[2:], string(b))
	}
	files["--api-token-file"] = writeFile(t, dir, "tokens", tokenOld+"\n")
	files["--cluster-secret-file"] = writeFile(t, dir, "secrets", "cluster-secret-0123456789\n")
	files["--gossip-keyring-file"] = writeFile(t, dir, "keyring", "MDEyMzQ1Njc4OWFiY2RlZg==\n")
	return files
}

// flagArgs are files as command line arguments.
func flagArgs(files map[string]string) []string {
	var args []string
	for flag, path := range files {
		args = append(args, flag, path)
	}
	return args
}

// notFileKinds is how the refusal names what makeNotFile made.
var notFileKinds = map[string]string{"fifo": "a named pipe (FIFO)", "zero": "a character device"}

// A real process whose credential file (TLS certificate, key or CA, API
// tokens, cluster secrets, gossip keyring) is a named pipe or /dev/zero
// exits at once, naming the flag and the path: before, the node hung in
// open() without a word, or read /dev/zero until its memory ran out.
func TestAProcessRefusesACredentialFileThatIsNoFile(t *testing.T) {
	valid := credentialFiles(t, t.TempDir())
	for flag := range valid {
		for _, which := range []string{"fifo", "zero"} {
			files := maps.Clone(valid)
			files[flag] = filepath.Join(t.TempDir(), "not-a-file")
			makeNotFile(t, files[flag], which)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"--id", "nofile", "--http-addr", "127.0.0.1:0",
				"--grpc-addr", "127.0.0.1:0", "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local"}, flagArgs(files)...)...)
			cmd.Env = append(os.Environ(), runMainEnv+"=1")
			out, err := cmd.CombinedOutput()
			timedOut := ctx.Err()
			cancel()
			require.NoError(t, timedOut, "%s (%s): the process did not exit", flag, which)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%s (%s): %s", flag, which, out)
			assert.Equal(t, 1, exit.ExitCode(), "%s (%s): %s", flag, which, out)
			assert.Contains(t, string(out), "("+flag+"): "+files[flag]+" is "+notFileKinds[which]+", not a regular file", "%s (%s)", flag, which)
		}
	}
}

// A running process whose credential files become named pipes, then
// /dev/zero: each SIGHUP reload refuses them, naming each, and keeps the
// credentials in force; once the files are back, the next SIGHUP applies
// them (nothing was left blocked); SIGTERM stops the node at once.
// Before, the reload blocked in open() holding the reload lock, and every
// later SIGHUP, credential rotation included, was only queued behind it.
func TestACredentialFileThatBecomesNoFileWedgesNothing(t *testing.T) {
	dir := t.TempDir()
	files := credentialFiles(t, dir)
	orig := map[string][]byte{}
	for flag, path := range files {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		orig[flag] = b
	}
	p := startProcess(t, "nofile", flagArgs(files)...)
	// One TLS file per reload: TLS stops at its first bad file. The lines
	// files are all broken each time.
	lines := []string{"--api-token-file", "--cluster-secret-file", "--gossip-keyring-file"}
	for _, which := range []string{"fifo", "zero"} {
		for _, tlsFlag := range []string{"--tls-cert-file", "--tls-key-file", "--peer-tls-cert-file", "--peer-tls-key-file",
			"--peer-tls-ca-file", "--tls-client-ca-file"} {
			broken := append([]string{tlsFlag}, lines...)
			for _, flag := range broken {
				tmp := filepath.Join(t.TempDir(), which)
				makeNotFile(t, tmp, which)
				require.NoError(t, os.Rename(tmp, files[flag]))
			}
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
			rec := waitForLog(t, p.lines, "security reload: some credentials kept their old values", "security reloaded")
			require.Equal(t, "security reload: some credentials kept their old values", logMessage(rec), "%s (%s)", tlsFlag, which)
			for _, flag := range broken {
				assert.Contains(t, rec["err"], files[flag]+" is "+notFileKinds[which]+", not a regular file", "%s (%s)", flag, which)
			}
			for _, flag := range broken { // the files as they were, for the next round
				require.NoError(t, os.Remove(files[flag]))
				require.NoError(t, os.WriteFile(files[flag], orig[flag], 0o600))
			}
		}
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitForLog(t, p.lines, "security reloaded")
	exitsOnSIGTERM(t, p.cmd)
}

// The ratelimit mode's PROMETHEUS_MAPPER_YAML, read at start, refuses a
// named pipe and /dev/zero, naming the variable and the path.
func TestAMapperFileThatIsNoFileIsRefused(t *testing.T) {
	for _, which := range []string{"fifo", "zero"} {
		path := filepath.Join(t.TempDir(), "statsd.yaml")
		makeNotFile(t, path, which)
		env := map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": path, "PEERLIMIT_CLUSTER_SECRET": "a-secret-of-at-least-16-bytes"}
		done := make(chan error, 1)
		go func() {
			_, _, err := upstreamArgs(func(k string) string { return env[k] }, keys(env))
			done <- err
		}()
		select {
		case err := <-done:
			assert.ErrorContains(t, err, `PROMETHEUS_MAPPER_YAML="`+path+`": `+path+" is "+notFileKinds[which]+", not a regular file")
		case <-time.After(10 * time.Second): // a deadline for the failure, not a wait for success
			if f, _ := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); f != nil {
				f.Close()
			}
			t.Fatalf("PROMETHEUS_MAPPER_YAML at a %s: the read blocked", which)
		}
	}
}

// exitsOnSIGTERM sends cmd SIGTERM and requires it to exit with status 0
// within 20 s.
func exitsOnSIGTERM(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status after SIGTERM")
	case <-time.After(20 * time.Second): // a deadline for the failure, not a wait for success
		t.Fatal("the node did not exit within 20s of SIGTERM")
	}
}
