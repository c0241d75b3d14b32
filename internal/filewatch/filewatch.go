// Package filewatch calls back when configuration files change, with the
// semantics of envoyproxy/ratelimit's runtime loader (lyft/goruntime over
// fsnotify), so that a file edited in place, replaced by rename, or
// updated by Kubernetes as a ConfigMap is noticed without a signal.
//
// A Watcher watches directories, never files: editors and kubelet replace
// a file by renaming another over it, and a watch on the file itself dies
// with the old inode. What counts as a change of a Target depends on its
// Mode. The callbacks are debounced: a burst of events (kubelet's swap of
// a ConfigMap is half a dozen) is one call, made once the directory has
// been quiet for Config.Debounce.
//
// A watched directory that disappears (deleted, renamed, or replaced
// through a symlink in its path) takes its inotify watch with it. The
// Watcher looks at every watched directory again every Config.Recheck,
// and as soon as an event says one went: when one is back, or is another
// directory than the one watched, it is watched anew and its targets'
// callbacks run, since what they read may have changed meanwhile.
package filewatch

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config tunes a Watcher. Start from DefaultConfig.
type Config struct {
	// Debounce is how long a target's directory must stay quiet after an
	// event before its callback runs: a file written in several writes,
	// or a ConfigMap swap, is read once, whole. Default 150ms.
	Debounce time.Duration
	// MaxDelay bounds the wait when the directory never falls quiet (a
	// log written next to the file): the callback runs at most this long
	// after the first event it answers. At least Debounce. Default 2s.
	MaxDelay time.Duration
	// Recheck is how often every watched directory is looked at again,
	// to watch anew one that disappeared and came back, or was replaced:
	// the longest such a change goes unnoticed. Default 2s.
	Recheck time.Duration
}

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{Debounce: 150 * time.Millisecond, MaxDelay: 2 * time.Second, Recheck: 2 * time.Second}
}

// Validate reports every unusable field, named.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, path, format string, args ...any) {
		if bad {
			errs = append(errs, field.Errorf(path, format, args...))
		}
	}
	check(c.Debounce <= 0, "Debounce", "must be positive, got %s", c.Debounce)
	check(c.MaxDelay < c.Debounce, "MaxDelay", "must be ≥ Debounce (%s), got %s", c.Debounce, c.MaxDelay)
	check(c.Recheck <= 0, "Recheck", "must be positive, got %s", c.Recheck)
	return errors.Join(errs...)
}

// Mode says what, in a Target's directory, is a change of the Target.
type Mode int

const (
	// Auto is Dir when Path is a directory at New, File otherwise.
	Auto Mode = iota
	// Dir watches Path, a directory: any event of any entry in it is a
	// change, hidden ones included. That is what makes a ConfigMap
	// update count: kubelet writes a new hidden directory and renames a
	// hidden symlink, ..data, over the old one; the visible names are
	// symlinks through ..data and see no event of their own. Skipping
	// dotfiles is for whoever reads the directory. upstream's
	// RUNTIME_WATCH_ROOT=false.
	Dir
	// File watches Path's parent directory and counts an event naming
	// Path, or, while Path is a symlink, any event in the directory: its
	// content then depends on other entries (a ConfigMap's ..data, a
	// chain of links), which is not worth resolving when a reload that
	// finds nothing new costs one read.
	File
	// Root is for a Path that is a symlink swapped atomically to publish
	// a new version (/srv/runtime_data/current -> v2): it watches Path's
	// parent and counts only events naming Path, as upstream's
	// RUNTIME_WATCH_ROOT=true does; edits inside the version it points
	// at do not count.
	Root
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Dir:
		return "dir"
	case File:
		return "file"
	case Root:
		return "root"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Target is a path to watch and what to call when it changes.
type Target struct {
	Path string
	Mode Mode
	// OnChange is called, debounced, after a change: from the Watcher's
	// goroutine, never concurrently with itself or another target's, so
	// events wait while it runs. It must not call Close.
	OnChange func()
}

// Watcher watches its targets until Close. Its methods are safe for
// concurrent use.
type Watcher struct {
	cfg      Config
	log      *slog.Logger
	fsw      *fsnotify.Watcher
	targets  []target
	dirs     map[string]*watchedDir // by path, as the targets name it
	poke     chan struct{}          // capacity 1: Trigger
	done     chan struct{}          // closed by Close
	stopped  chan struct{}          // closed when run returns
	once     sync.Once
	closeErr error
}

// target is a Target resolved: its absolute path, the directory watched
// for it, and whether its callback is due.
type target struct {
	Target
	dir     string
	pending bool
}

// watchedDir is one directory the Watcher watches: what was at its path
// when last looked at (nil: nothing, or no directory), and, while a watch
// on it is in place, the path it was added under.
//
// That path is the directory's, symlinks resolved: inotify keeps one
// watch per directory, and fsnotify names every event of it after the
// first path it was added under, so two targets reaching one directory
// by different paths (through a symlink) would see each other's events
// named after the wrong path, or none. Resolved, both add the same path,
// share the watch, and events are matched to each through it.
type watchedDir struct {
	path     string
	info     os.FileInfo
	watched  bool
	resolved string // valid while watched
}

// New watches targets, each Path relative to the working directory or
// absolute, with its goroutine running until Close; log (nil: nowhere)
// says what it cannot watch. A directory missing
// now is not an error: it is watched once it appears (Config.Recheck).
// The error is about the Config, a Target, or fsnotify itself (out of
// inotify instances: fs.inotify.max_user_instances).
func New(cfg Config, log *slog.Logger, targets ...Target) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{cfg: cfg, log: log, dirs: map[string]*watchedDir{}, poke: make(chan struct{}, 1),
		done: make(chan struct{}), stopped: make(chan struct{})}
	for i, t := range targets {
		rt, err := resolve(t)
		if err != nil {
			return nil, fmt.Errorf("filewatch: target %d: %w", i, err)
		}
		w.targets = append(w.targets, rt)
		if w.dirs[rt.dir] == nil {
			w.dirs[rt.dir] = &watchedDir{path: rt.dir}
		}
	}
	var err error
	if w.fsw, err = fsnotify.NewWatcher(); err != nil {
		return nil, fmt.Errorf("filewatch: %w", err)
	}
	for _, d := range w.dirs {
		if err := w.watchFirst(d); err != nil {
			w.fsw.Close()
			return nil, err
		}
	}
	go w.run()
	return w, nil
}

// watchFirst watches d as New finds it: missing is for later (check),
// but a directory there that cannot be watched is an error.
func (w *Watcher) watchFirst(d *watchedDir) error {
	if d.info = statDir(d.path); d.info == nil {
		w.log.Warn("file watch: directory missing; watching for it to appear", "dir", d.path, "every", w.cfg.Recheck)
		return nil
	}
	if err := w.watch(d); err != nil {
		return fmt.Errorf("filewatch: watch %s: %w", d.path, err)
	}
	return nil
}

// watch adds a watch on the directory at d's path, under its resolved
// path (watchedDir), shared with any other watchedDir resolving to it.
func (w *Watcher) watch(d *watchedDir) error {
	resolved, err := filepath.EvalSymlinks(d.path)
	if err != nil {
		return err
	}
	if err := w.fsw.Add(resolved); err != nil {
		return err
	}
	d.watched, d.resolved = true, resolved
	return nil
}

// unwatch drops d's watch, and removes it from inotify unless another
// watchedDir shares it. The watch may be gone with its directory
// already; then there is nothing to remove, and fsnotify says so.
func (w *Watcher) unwatch(d *watchedDir) {
	d.watched = false
	for _, o := range w.dirs {
		if o.watched && o.resolved == d.resolved {
			return
		}
	}
	_ = w.fsw.Remove(d.resolved)
}

// resolve makes t's path absolute and finds the directory to watch.
func resolve(t Target) (target, error) {
	if t.OnChange == nil {
		return target{}, errors.New("OnChange must not be nil")
	}
	if t.Path == "" {
		return target{}, errors.New("Path must not be empty")
	}
	abs, err := filepath.Abs(t.Path)
	if err != nil {
		return target{}, fmt.Errorf("%s: %w", t.Path, err)
	}
	t.Path = abs
	if t.Mode == Auto {
		t.Mode = File
		if st, err := os.Stat(abs); err == nil && st.IsDir() {
			t.Mode = Dir
		}
	}
	switch t.Mode {
	case Dir:
		return target{Target: t, dir: abs}, nil
	case File, Root:
		return target{Target: t, dir: filepath.Dir(abs)}, nil
	}
	return target{}, fmt.Errorf("%s: unknown mode %s", t.Path, t.Mode)
}

// Trigger runs every target's callback, debounced, as if each had
// changed: for a caller that read the files before New, to catch a
// change made in between.
func (w *Watcher) Trigger() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Close stops the Watcher and waits for its goroutine, and for a
// callback under way, to end. Safe to call more than once.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		close(w.done)
		<-w.stopped
		w.closeErr = w.fsw.Close()
	})
	return w.closeErr
}
