package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// run is the Watcher's goroutine: it reads fsnotify's events, marks the
// targets they concern, and calls the marked ones back once their
// directory has been quiet for Debounce (or MaxDelay has passed).
func (w *Watcher) run() {
	defer close(w.stopped)
	recheck := time.NewTicker(w.cfg.Recheck)
	defer recheck.Stop()
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	var first time.Time // of the earliest event the marked targets wait on; zero: none waits
	for {
		marked := false
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			marked = w.event(ev)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			marked = w.fsError(err)
		case <-recheck.C:
			marked = w.recheck()
		case <-w.poke:
			marked = w.markAll()
		case <-due.C:
			first = time.Time{}
			w.fire()
		}
		if marked {
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			due.Reset(min(w.cfg.Debounce, first.Add(w.cfg.MaxDelay).Sub(now)))
		}
	}
}

// event marks the targets ev is a change of, and reports whether it
// marked any. fsnotify names ev after the resolved path of the directory
// watched (watchedDir), so it is matched, by that, to every watchedDir
// that shares the watch, and by its entry's name in each, to their
// targets. An event naming a watched directory itself (removed, renamed,
// or a symlink to it swapped) checks that directory at once.
func (w *Watcher) event(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	marked := false
	for _, d := range w.dirs {
		if d.watched && d.resolved == name && w.check(d) {
			marked = w.markDir(d.path) || marked
		}
	}
	parent, base := filepath.Split(name)
	parent = filepath.Clean(parent)
	for _, p := range w.dirs {
		if !p.watched || p.resolved != parent {
			continue
		}
		entry := filepath.Join(p.path, base) // the event's name as p's targets know it
		if d := w.dirs[entry]; d != nil && w.check(d) {
			marked = w.markDir(d.path) || marked
		}
		for i := range w.targets {
			if t := &w.targets[i]; t.dir == p.path && t.matches(entry) {
				t.pending, marked = true, true
			}
		}
	}
	return marked
}

// matches reports whether an event naming name, an entry of t's
// directory, is a change of t (Mode).
func (t *target) matches(name string) bool {
	switch t.Mode {
	case Dir:
		return true
	case Root:
		return name == t.Path
	default: // File
		if name == t.Path {
			return true
		}
		st, err := os.Lstat(t.Path)
		return err == nil && st.Mode()&os.ModeSymlink != 0
	}
}

// fsError handles an error fsnotify reports. An overflow of the kernel's
// queue lost events, any of which may have been a change: every target
// is marked.
func (w *Watcher) fsError(err error) bool {
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		w.log.Warn("file watch: events were lost (inotify queue overflow); reloading every watched configuration", "err", err)
		return w.markAll()
	}
	w.log.Warn("file watch error", "err", err)
	return false
}

// recheck checks every watched directory (check) and marks the targets
// of those that changed.
func (w *Watcher) recheck() bool {
	marked := false
	for _, d := range w.dirs {
		if w.check(d) {
			marked = w.markDir(d.path) || marked
		}
	}
	return marked
}

// check compares what is at d's path with what was there when last
// looked at, and reports whether it changed: the directory disappeared,
// came back, or is another one (replaced, or a symlink on its path
// swapped). Then the old watch is dropped and the directory now there, if
// any, watched. A directory that could not be watched is tried again,
// quietly, and reported as changed once watched: changes made meanwhile
// went unseen.
func (w *Watcher) check(d *watchedDir) bool {
	st := statDir(d.path)
	same := (st == nil && d.info == nil) || (st != nil && d.info != nil && os.SameFile(st, d.info))
	if same && (d.watched || st == nil) {
		return false
	}
	if d.watched {
		w.unwatch(d)
	}
	d.info = st
	if st == nil {
		w.log.Warn("file watch: watched directory missing; watching for it to come back", "dir", d.path, "every", w.cfg.Recheck)
		return true
	}
	// The identity was taken before the watch is added: if the directory
	// is replaced in between, the next check sees a difference and
	// watches it again, where the other order could watch the old one
	// for good.
	if err := w.watch(d); err != nil {
		if !same {
			w.log.Warn("file watch: cannot watch directory; trying again", "dir", d.path, "every", w.cfg.Recheck, "err", err)
		}
		return !same
	}
	w.log.Debug("file watch: watching directory", "dir", d.path, "as", d.resolved)
	return true
}

// statDir returns what is at path if it is a directory, else nil.
func statDir(path string) os.FileInfo {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return nil
	}
	return st
}

// markDir marks every target watched through dir.
func (w *Watcher) markDir(dir string) bool {
	marked := false
	for i := range w.targets {
		if t := &w.targets[i]; t.dir == dir {
			t.pending, marked = true, true
		}
	}
	return marked
}

func (w *Watcher) markAll() bool {
	for i := range w.targets {
		w.targets[i].pending = true
	}
	return len(w.targets) > 0
}

// fire calls back every marked target, in the order given to New,
// stopping early if Close was called.
func (w *Watcher) fire() {
	for i := range w.targets {
		select {
		case <-w.done:
			return
		default:
		}
		if t := &w.targets[i]; t.pending {
			t.pending = false
			t.OnChange()
		}
	}
}
