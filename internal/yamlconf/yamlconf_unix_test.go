//go:build unix

package yamlconf_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/yamlconf"
)

// A config path that is not a regular file, after symlinks, is refused
// at once, naming it: a named pipe would block the open until a writer
// came, /dev/zero would never end.
func TestReadFileRefusesWhatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	toFifo := filepath.Join(dir, "to-fifo.yaml")
	require.NoError(t, os.Symlink(fifo, toFifo))
	zero := filepath.Join(dir, "zero.yaml")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	for path, kind := range map[string]string{
		fifo: "a named pipe (FIFO)", toFifo: "a named pipe (FIFO)", zero: "a character device", dir: "a directory",
	} {
		done := make(chan error, 1)
		go func() {
			_, err := yamlconf.ReadFile("policies", path, 1<<20)
			done <- err
		}()
		select {
		case err := <-done:
			require.Error(t, err, path)
			assert.Equal(t, "policies: "+path+" is "+kind+", not a regular file", err.Error())
		case <-time.After(10 * time.Second): // a deadline for the failure, not a wait for success
			f, _ := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0) // unblock the reader
			if f != nil {
				f.Close()
			}
			t.Fatalf("ReadFile(%s) blocked", path)
		}
	}
	ok := filepath.Join(dir, "ok.yaml")
	require.NoError(t, os.WriteFile(ok, []byte("a: 1\n"), 0o600))
	data, err := yamlconf.ReadFile("policies", ok, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(data))
}
