package persist

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// FS is the filesystem a Log is kept on: the machine's (OS), or, in
// tests, one that loses what was not synced when it crashes and fails the
// writes it is told to (internal/testkit/crashfs). Names are relative to
// the data directory. Safe for concurrent use on different files.
type FS interface {
	// Create makes name empty and opens it for appending.
	Create(name string) (File, error)
	// Open opens name for reading.
	Open(name string) (io.ReadCloser, error)
	// Rename moves old to new, replacing new: atomic on the filesystems
	// a data directory belongs on.
	Rename(old, new string) error
	// Remove deletes name.
	Remove(name string) error
	// List returns the names in the directory, sorted.
	List() ([]string, error)
	// SyncDir makes the directory's entries (creations, renames,
	// removals) durable.
	SyncDir() error
	// Lock takes the directory for this process alone, until the Closer
	// is closed; it fails at once if another holds it.
	Lock() (io.Closer, error)
}

// File is a file open for appending.
type File interface {
	io.Writer
	// Sync makes what was written durable.
	Sync() error
	Close() error
}

// OS is the machine's filesystem, rooted at a directory that exists.
type OS struct{ Dir string }

var _ FS = OS{}

// Create implements FS.
func (o OS) Create(name string) (File, error) {
	return os.OpenFile(filepath.Join(o.Dir, name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
}

// Open implements FS.
func (o OS) Open(name string) (io.ReadCloser, error) { return os.Open(filepath.Join(o.Dir, name)) }

// Rename implements FS.
func (o OS) Rename(old, new string) error {
	return os.Rename(filepath.Join(o.Dir, old), filepath.Join(o.Dir, new))
}

// Remove implements FS.
func (o OS) Remove(name string) error { return os.Remove(filepath.Join(o.Dir, name)) }

// List implements FS.
func (o OS) List() ([]string, error) {
	entries, err := os.ReadDir(o.Dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

// SyncDir implements FS.
func (o OS) SyncDir() error {
	d, err := os.Open(o.Dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Lock implements FS: an exclusive flock(2) on the directory's LOCK file,
// released by the kernel if the process dies.
func (o OS) Lock() (io.Closer, error) {
	f, err := os.OpenFile(filepath.Join(o.Dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by another process: %w", o.Dir, err)
		}
		return nil, err
	}
	return f, nil
}

// lockName is the file Lock takes.
const lockName = "LOCK"

// IsNoSpace reports whether err is the disk being full (or over quota):
// the Log keeps serving from memory and tries again, rather than fail.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
