// Package crashfs is an in-memory filesystem for persist.Log's tests
// that crashes as a machine does: what was not synced is lost, file data
// past its last Sync and directory entries past the last SyncDir (the
// strictest reading of POSIX, as pebble's crashable memory filesystem
// has it). Faults are injected per operation (Inject): a failed write,
// a torn one, a full disk.
package crashfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"

	"github.com/peerlimit/peerlimit/persist"
)

// FS is the filesystem. Safe for concurrent use.
type FS struct {
	mu      sync.Mutex
	locked  bool
	entries map[string]*file // the directory now
	durable map[string]*file // the directory as of the last SyncDir
	inject  func(Op) error
}

type file struct {
	data   []byte
	synced int // how much of data a crash keeps
}

var _ persist.FS = (*FS)(nil)

// New returns an empty filesystem.
func New() *FS { return &FS{entries: map[string]*file{}, durable: map[string]*file{}} }

// Op is one operation, for Inject: Kind is "create", "write", "sync",
// "rename", "remove" or "syncdir"; Name the file (the old name of a
// rename); Len a write's length.
type Op struct {
	Kind, Name string
	Len        int
}

// Torn is what an injected fault returns to make a write keep only its
// first Keep bytes, then fail.
type Torn struct{ Keep int }

func (t Torn) Error() string { return fmt.Sprintf("torn write: %d bytes kept", t.Keep) }

// Inject calls f before every operation from now on; an error it returns
// fails the operation (nil f: none). A write failed with Torn keeps a
// prefix.
func (f *FS) Inject(fn func(Op) error) {
	f.mu.Lock()
	f.inject = fn
	f.mu.Unlock()
}

// Crash returns the filesystem as a machine would find it after losing
// power now: the directory as of its last SyncDir, each file as of its
// last Sync. f is unchanged (a process still running on it is gone).
func (f *FS) Crash() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := New()
	for name, fl := range f.durable {
		c := &file{data: bytes.Clone(fl.data[:fl.synced]), synced: fl.synced}
		out.entries[name], out.durable[name] = c, c
	}
	return out
}

// Kill returns the filesystem as a process killed now leaves it: every
// write reached the page cache and stays, synced or not.
func (f *FS) Kill() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := New()
	for name, fl := range f.entries {
		c := &file{data: bytes.Clone(fl.data), synced: len(fl.data)}
		out.entries[name], out.durable[name] = c, c
	}
	return out
}

// Bytes returns name's contents now, for tests that corrupt them.
func (f *FS) Bytes(name string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.entries[name]; ok {
		return bytes.Clone(fl.data)
	}
	return nil
}

// SetBytes replaces name's contents, durably, as a disk that flipped bits
// or lost a tail would.
func (f *FS) SetBytes(name string, b []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := &file{data: bytes.Clone(b), synced: len(b)}
	f.entries[name], f.durable[name] = fl, fl
}

func (f *FS) check(op Op) error {
	if f.inject == nil {
		return nil
	}
	return f.inject(op)
}

// Create implements persist.FS.
func (f *FS) Create(name string) (persist.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(Op{Kind: "create", Name: name}); err != nil {
		return nil, err
	}
	fl := &file{}
	f.entries[name] = fl
	return &handle{fs: f, name: name, f: fl}, nil
}

// Open implements persist.FS.
func (f *FS) Open(name string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl, ok := f.entries[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return io.NopCloser(bytes.NewReader(bytes.Clone(fl.data))), nil
}

// Rename implements persist.FS.
func (f *FS) Rename(old, new string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(Op{Kind: "rename", Name: old}); err != nil {
		return err
	}
	fl, ok := f.entries[old]
	if !ok {
		return &fs.PathError{Op: "rename", Path: old, Err: fs.ErrNotExist}
	}
	delete(f.entries, old)
	f.entries[new] = fl
	return nil
}

// Remove implements persist.FS.
func (f *FS) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(Op{Kind: "remove", Name: name}); err != nil {
		return err
	}
	if _, ok := f.entries[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(f.entries, name)
	return nil
}

// List implements persist.FS.
func (f *FS) List() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.entries))
	for n := range f.entries {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

// SyncDir implements persist.FS.
func (f *FS) SyncDir() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.check(Op{Kind: "syncdir"}); err != nil {
		return err
	}
	f.durable = map[string]*file{}
	for n, fl := range f.entries {
		f.durable[n] = fl
	}
	return nil
}

// Lock implements persist.FS: one holder at a time.
func (f *FS) Lock() (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.locked {
		return nil, errors.New("crashfs: the directory is locked")
	}
	f.locked = true
	return closer(func() error { f.mu.Lock(); f.locked = false; f.mu.Unlock(); return nil }), nil
}

type closer func() error

func (c closer) Close() error { return c() }

// handle is a file open for appending.
type handle struct {
	fs     *FS
	name   string
	f      *file
	closed bool
}

func (h *handle) Write(p []byte) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return 0, errors.New("crashfs: write to a closed file")
	}
	if err := h.fs.check(Op{Kind: "write", Name: h.name, Len: len(p)}); err != nil {
		var torn Torn
		if errors.As(err, &torn) {
			n := min(torn.Keep, len(p))
			h.f.data = append(h.f.data, p[:n]...)
			return n, err
		}
		return 0, err
	}
	h.f.data = append(h.f.data, p...)
	return len(p), nil
}

func (h *handle) Sync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.fs.check(Op{Kind: "sync", Name: h.name}); err != nil {
		return err
	}
	h.f.synced = len(h.f.data)
	return nil
}

func (h *handle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.closed = true
	return nil
}
