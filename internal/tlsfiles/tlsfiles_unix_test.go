//go:build unix

package tlsfiles

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
)

// A client's CA, certificate or key file that is a named pipe or
// /dev/zero is refused at once, naming it: the Go client, the CLI, the
// load generator and the xDS subscription (at each connect) read their
// files here, and a pipe would have held them up.
func TestClientRefusesAFileThatIsNoFile(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	pair := ca.Issue(t, testcerts.Leaf{Name: "client", Client: true})
	_, err := Client(ca.File, pair.CertFile, pair.KeyFile, "")
	require.NoError(t, err)
	for _, which := range []string{"fifo", "zero"} {
		bad := filepath.Join(t.TempDir(), which)
		if which == "fifo" {
			require.NoError(t, syscall.Mkfifo(bad, 0o600))
		} else {
			require.NoError(t, os.Symlink("/dev/zero", bad))
		}
		kind := map[string]string{"fifo": "a named pipe (FIFO)", "zero": "a character device"}[which]
		for name, args := range map[string][3]string{
			"CA file": {bad, pair.CertFile, pair.KeyFile}, "client certificate": {ca.File, bad, pair.KeyFile},
			"client certificate: key": {ca.File, pair.CertFile, bad},
		} {
			done := make(chan error, 1)
			go func() {
				_, err := Client(args[0], args[1], args[2], "")
				done <- err
			}()
			select {
			case err := <-done:
				assert.EqualError(t, err, name+": "+bad+" is "+kind+", not a regular file")
			case <-time.After(10 * time.Second): // a deadline for the failure, not a wait for success
				if f, _ := os.OpenFile(bad, os.O_WRONLY|syscall.O_NONBLOCK, 0); f != nil {
					f.Close()
				}
				t.Fatalf("%s at a %s: the read blocked", name, which)
			}
		}
	}
}
