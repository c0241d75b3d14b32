// Package regularfile reads a file that an operator named, by a flag or
// an environment variable, so that a mistaken path cannot hold the
// process up: a named pipe would block the open until a writer came (and
// the start, or a reload and whatever waits for it, with it), and a
// device such as /dev/zero never ends. Every such file is read here: the
// configuration loaders (through internal/yamlconf), the credential
// files, the TLS material and the ratelimit mode's mapping file.
package regularfile

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// Read reads path, which must be a regular file after symlinks and at
// most limit bytes long. It is checked before the open, and again on what
// was opened, opened without blocking, since the path may be replaced in
// between. Errors name path: "/etc/x is a named pipe (FIFO), not a
// regular file"; the caller adds whose file it is.
func Read(path string, limit int) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regular(path, st); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := regular(path, st); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// regular refuses st, path's, unless it is a regular file, saying what it
// is instead.
func regular(path string, st os.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%s is %s, not a regular file", path, Kind(st.Mode()))
}

// Kind names what a file of mode m is, for an error or a log line.
func Kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSymlink != 0:
		return "a symlink"
	case m.IsRegular():
		return "a regular file"
	}
	return "an irregular file"
}
