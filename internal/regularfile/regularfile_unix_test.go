//go:build unix

package regularfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// readWithin reads path, failing the test if the read blocks: a deadline
// for the failure, not a wait for success. It unblocks a reader stuck on
// the named pipe fifo before failing.
func readWithin(t *testing.T, path, fifo string, limit int) ([]byte, error) {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := regularfile.Read(path, limit)
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(10 * time.Second):
		if f, _ := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); f != nil {
			f.Close()
		}
		t.Fatalf("Read(%s) blocked", path)
		return nil, nil
	}
}

// A path that is not a regular file, after symlinks, is refused at once,
// naming it and what it is: a named pipe would block the open until a
// writer came, /dev/zero would never end.
func TestReadRefusesWhatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	toFifo := filepath.Join(dir, "to-fifo")
	require.NoError(t, os.Symlink(fifo, toFifo))
	zero := filepath.Join(dir, "zero")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	for path, kind := range map[string]string{
		fifo: "a named pipe (FIFO)", toFifo: "a named pipe (FIFO)", zero: "a character device", dir: "a directory",
	} {
		_, err := readWithin(t, path, fifo, 1<<20)
		require.Error(t, err, path)
		assert.Equal(t, path+" is "+kind+", not a regular file", err.Error())
	}
	_, err := regularfile.Read(filepath.Join(dir, "missing"), 1<<20)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorContains(t, err, filepath.Join(dir, "missing"))
}

// A regular file is read whole up to the limit, and refused past it,
// naming it: a mistaken path (a log file) is not read whole.
func TestReadCapsTheSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("x", 100)), 0o600))
	data, err := regularfile.Read(path, 100)
	require.NoError(t, err)
	assert.Len(t, data, 100)
	_, err = regularfile.Read(path, 99)
	assert.EqualError(t, err, path+" is larger than 99 bytes")
}
