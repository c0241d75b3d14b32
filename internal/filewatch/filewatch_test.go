package filewatch

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/testkit/configmap"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
)

// Every Watcher a test starts must be gone, goroutines and all.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fastConfig keeps tests quick: a short quiet period, and directories
// looked at again often.
func fastConfig() Config {
	return Config{Debounce: 50 * time.Millisecond, MaxDelay: time.Second, Recheck: 50 * time.Millisecond}
}

// recorder is a target's callback: it records what read returns at each
// call, in one log shared by the targets of a test so that their order
// shows.
type recorder struct {
	name string
	log  *callLog
	read func() string
}

type callLog struct {
	mu    sync.Mutex
	calls []call
}

type call struct{ target, saw string }

func (l *callLog) target(name string, read func() string) Target {
	r := &recorder{name: name, log: l, read: read}
	return Target{OnChange: func() {
		saw := ""
		if r.read != nil {
			saw = r.read()
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.calls = append(l.calls, call{r.name, saw})
	}}
}

// of returns what the calls of target saw, in order.
func (l *callLog) of(target string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		if c.target == target {
			out = append(out, c.saw)
		}
	}
	return out
}

// waitSaw waits until target's latest call saw want.
func (l *callLog) waitSaw(t *testing.T, target, want string) {
	t.Helper()
	wait.For(t, 5*time.Second, func() (bool, string) {
		got := l.of(target)
		return len(got) > 0 && got[len(got)-1] == want, fmt.Sprintf("%s's calls saw %q, want one last seeing %q", target, got, want)
	})
}

// waitCalls waits until target has been called n times.
func (l *callLog) waitCalls(t *testing.T, target string, n int) {
	t.Helper()
	wait.For(t, 5*time.Second, func() (bool, string) {
		got := l.of(target)
		return len(got) >= n, fmt.Sprintf("%s called %d times, want %d", target, len(got), n)
	})
}

func readFile(path string) func() string {
	return func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
}

func start(t *testing.T, cfg Config, targets ...Target) *Watcher {
	t.Helper()
	w, err := New(cfg, slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelDebug})), targets...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, w.Close()) })
	return w
}

func with(t Target, path string, mode Mode) Target {
	t.Path, t.Mode = path, mode
	return t
}

func write(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
}

// A ConfigMap update changes only hidden entries (..data renamed over);
// both a watch on the directory and one on a visible file see it.
func TestConfigMapSwap(t *testing.T) {
	cm := configmap.New(t, t.TempDir())
	cm.Update(map[string]string{"config.yaml": "v1", "other.yaml": "o1"})
	visible := cm.Path("config.yaml")
	var l callLog
	start(t, fastConfig(),
		with(l.target("dir", readFile(visible)), cm.Dir(), Auto),
		with(l.target("file", readFile(visible)), visible, Auto))

	cm.Update(map[string]string{"config.yaml": "v2", "other.yaml": "o1"})
	l.waitSaw(t, "dir", "v2")
	l.waitSaw(t, "file", "v2")

	// And again: the watch outlives the swaps.
	cm.Update(map[string]string{"config.yaml": "v3"})
	l.waitSaw(t, "dir", "v3")
	l.waitSaw(t, "file", "v3")
}

// A file written in place.
func TestFileWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	write(t, path, "v1")
	var l callLog
	start(t, fastConfig(), with(l.target("file", readFile(path)), path, File))
	write(t, path, "v2")
	l.waitSaw(t, "file", "v2")
	write(t, path, "v3")
	l.waitSaw(t, "file", "v3")
}

// A file replaced by renaming another over it, as editors and config
// management do: the inode watched would be gone, the directory is not.
func TestFileReplacedByRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rls.yaml")
	write(t, path, "v1")
	var l callLog
	start(t, fastConfig(), with(l.target("file", readFile(path)), path, Auto))
	for _, v := range []string{"v2", "v3"} {
		tmp := filepath.Join(dir, ".rls.yaml.tmp")
		write(t, tmp, v)
		require.NoError(t, os.Rename(tmp, path))
		l.waitSaw(t, "file", v)
	}
}

// A plain file's target ignores its neighbours. The witness, a watch on
// the whole directory listed after it, is called in the same round as
// any target the same event marked: once the witness has been called,
// the file's target would have been too.
func TestFileIgnoresItsNeighbours(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	write(t, path, "v1")
	var l callLog
	start(t, fastConfig(),
		with(l.target("file", nil), path, File),
		with(l.target("witness", nil), dir, Dir))
	write(t, filepath.Join(dir, "app.log"), "a line")
	l.waitCalls(t, "witness", 1)
	assert.Empty(t, l.of("file"))
}

// upstream's RUNTIME_WATCH_ROOT=true: the root is a symlink swapped
// atomically to a new version; its parent is watched.
func TestWatchRootSwap(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "current")
	for _, v := range []string{"v1", "v2", "v3"} {
		require.NoError(t, os.MkdirAll(filepath.Join(parent, v, "config"), 0o755))
		write(t, filepath.Join(parent, v, "config", "rls.yaml"), v)
	}
	require.NoError(t, os.Symlink("v1", root))
	config := filepath.Join(root, "config", "rls.yaml")
	var l callLog
	start(t, fastConfig(), with(l.target("root", readFile(config)), root, Root))
	for _, v := range []string{"v2", "v3"} {
		tmp := filepath.Join(parent, "current_tmp")
		require.NoError(t, os.Symlink(v, tmp))
		require.NoError(t, os.Rename(tmp, root))
		l.waitSaw(t, "root", v)
	}
}

// With a watched root, neither a sibling of the root nor an edit inside
// the version it points at is a change (upstream's semantics: a new
// version is published by swapping the root). The witness watches the
// root's parent and the version's directory and, listed after the root,
// is called in the same round as the root would be.
func TestWatchRootIgnoresOthers(t *testing.T) {
	parent := t.TempDir()
	v1 := filepath.Join(parent, "v1")
	require.NoError(t, os.Mkdir(v1, 0o755))
	write(t, filepath.Join(v1, "rls.yaml"), "v1")
	root := filepath.Join(parent, "current")
	require.NoError(t, os.Symlink("v1", root))
	var l callLog
	start(t, fastConfig(),
		with(l.target("root", nil), root, Root),
		with(l.target("witness", nil), parent, Dir),
		with(l.target("witness-v1", nil), v1, Dir))

	write(t, filepath.Join(parent, "unrelated"), "x")
	l.waitCalls(t, "witness", 1)
	write(t, filepath.Join(v1, "rls.yaml"), "v1 edited in place")
	l.waitCalls(t, "witness-v1", 1)
	assert.Empty(t, l.of("root"))
}

// A burst of writes is one call, made after the last. A later Trigger
// is a call of its own: had the burst been split, the calls before it
// would number more than one, the first seeing a version before the last.
func TestDebounceCoalescesABurst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, "v0")
	cfg := fastConfig()
	// Long enough that no pause of a loaded machine between two writes
	// of the burst ends the quiet period.
	cfg.Debounce, cfg.MaxDelay = 400*time.Millisecond, 10*time.Second
	var l callLog
	w := start(t, cfg, with(l.target("file", readFile(path)), path, File))
	for i := 1; i <= 50; i++ {
		write(t, path, fmt.Sprintf("v%d", i))
	}
	l.waitSaw(t, "file", "v50")
	w.Trigger()
	l.waitCalls(t, "file", 2)
	assert.Equal(t, []string{"v50", "v50"}, l.of("file"))
}

// MaxDelay bounds the wait of a directory that never falls quiet: a
// neighbour written more often than Debounce.
func TestMaxDelayUnderSteadyEvents(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rls.yaml")
	write(t, path, "v1")
	cfg := fastConfig()
	cfg.Debounce, cfg.MaxDelay = 200*time.Millisecond, 400*time.Millisecond
	var l callLog
	start(t, cfg, with(l.target("dir", readFile(path)), dir, Dir))
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = os.WriteFile(filepath.Join(dir, "app.log"), []byte(time.Now().String()), 0o644)
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	write(t, path, "v2")
	l.waitSaw(t, "dir", "v2")
}

// A watched directory deleted and made again: the deletion is a change
// (what reads it fails and says so), its return is one, and changes
// after it are seen again.
func TestDirectoryGoneAndBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rls")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "rls.yaml")
	write(t, path, "v1")
	var l callLog
	start(t, fastConfig(), with(l.target("dir", readFile(path)), dir, Dir))

	require.NoError(t, os.RemoveAll(dir))
	wait.For(t, 5*time.Second, func() (bool, string) {
		got := l.of("dir")
		return len(got) > 0 && strings.HasPrefix(got[len(got)-1], "error:"), fmt.Sprintf("calls saw %q", got)
	})
	require.NoError(t, os.Mkdir(dir, 0o755))
	write(t, path, "v2")
	l.waitSaw(t, "dir", "v2")
	write(t, path, "v3")
	l.waitSaw(t, "dir", "v3")
}

// A directory missing at New is watched once it appears.
func TestDirectoryMissingAtNew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	path := filepath.Join(dir, "rls.yaml")
	var l callLog
	start(t, fastConfig(), with(l.target("dir", readFile(path)), dir, Dir))
	require.NoError(t, os.Mkdir(dir, 0o755))
	write(t, path, "v1")
	l.waitSaw(t, "dir", "v1")
}

// A watched directory reached through a symlink that is swapped (upstream's
// RUNTIME_WATCH_ROOT=false under a swapped root): the watch was on the
// old version's directory; Recheck sees another directory at the path.
func TestDirectoryBehindASwappedSymlink(t *testing.T) {
	parent := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(parent, v, "config"), 0o755))
		write(t, filepath.Join(parent, v, "config", "rls.yaml"), v)
	}
	require.NoError(t, os.Symlink("v1", filepath.Join(parent, "current")))
	dir := filepath.Join(parent, "current", "config")
	path := filepath.Join(dir, "rls.yaml")
	var l callLog
	start(t, fastConfig(), with(l.target("dir", readFile(path)), dir, Dir))

	tmp := filepath.Join(parent, "current_tmp")
	require.NoError(t, os.Symlink("v2", tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(parent, "current")))
	l.waitSaw(t, "dir", "v2")
	write(t, path, "v2 edited")
	l.waitSaw(t, "dir", "v2 edited")
}

// Two targets in one directory reached by different paths, one through
// a symlink (a policy file and the Envoy rules' directory named from two
// mounts of the same volume): inotify keeps one watch per directory and
// fsnotify names its events after the first path added, so before the
// directories were watched under their resolved paths, whichever target
// was added second saw none of its changes.
func TestOneDirectoryByTwoPaths(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "config")
	require.NoError(t, os.Mkdir(dir, 0o755))
	link := filepath.Join(parent, "link")
	require.NoError(t, os.Symlink("config", link))
	direct, via := filepath.Join(dir, "a.yaml"), filepath.Join(link, "b.yaml")
	write(t, direct, "a1")
	write(t, via, "b1")
	var l callLog
	start(t, fastConfig(),
		with(l.target("direct", readFile(direct)), direct, File),
		with(l.target("via link", readFile(via)), via, File),
		with(l.target("dir via link", readFile(direct)), link, Dir))

	write(t, direct, "a2")
	l.waitSaw(t, "direct", "a2")
	l.waitSaw(t, "dir via link", "a2")
	write(t, via, "b2")
	l.waitSaw(t, "via link", "b2")

	// The link moved elsewhere: its targets follow, the other keeps its
	// watch on the directory they shared.
	other := filepath.Join(parent, "other")
	require.NoError(t, os.Mkdir(other, 0o755))
	write(t, filepath.Join(other, "b.yaml"), "b3")
	tmp := filepath.Join(parent, "link_tmp")
	require.NoError(t, os.Symlink("other", tmp))
	require.NoError(t, os.Rename(tmp, link))
	l.waitSaw(t, "via link", "b3")
	write(t, via, "b4")
	l.waitSaw(t, "via link", "b4")
	write(t, direct, "a3")
	l.waitSaw(t, "direct", "a3")
}

// Close stops the goroutine (TestMain checks for leaks), waits for a
// callback under way, and may be called again.
func TestCloseWaitsForACallback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, "v1")
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var returned bool
	w, err := New(fastConfig(), nil, Target{Path: path, OnChange: func() {
		once.Do(func() { close(entered) })
		<-release
		returned = true
	}})
	require.NoError(t, err)
	w.Trigger()
	<-entered
	closed := make(chan error)
	go func() { closed <- w.Close() }()
	release <- struct{}{}
	require.NoError(t, <-closed)
	assert.True(t, returned)
	assert.NoError(t, w.Close())
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	err := Config{Debounce: 0, MaxDelay: -1, Recheck: 0}.Validate()
	require.Error(t, err)
	for _, want := range []string{"Debounce must be positive", "MaxDelay must be ≥ Debounce", "Recheck must be positive"} {
		assert.ErrorContains(t, err, want)
	}
	_, err = New(Config{}, nil)
	assert.ErrorContains(t, err, "Debounce")
	_, err = New(fastConfig(), nil, Target{Path: "x"})
	assert.ErrorContains(t, err, "OnChange must not be nil")
	_, err = New(fastConfig(), nil, Target{Path: "x", Mode: Mode(9), OnChange: func() {}})
	assert.ErrorContains(t, err, "unknown mode Mode(9)")
}
