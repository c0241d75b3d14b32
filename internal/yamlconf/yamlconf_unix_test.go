//go:build unix

package yamlconf_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/yamlconf"
)

// ReadFile is internal/regularfile's Read (tested there: pipes, devices,
// directories, the cap) with the loader's name before its errors.
func TestReadFileRefusesWhatIsNoRegularFile(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero.yaml")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	_, err := yamlconf.ReadFile("policies", zero, 1<<20)
	assert.EqualError(t, err, "policies: "+zero+" is a character device, not a regular file")
	_, err = yamlconf.ReadFile("policies", dir, 1<<20)
	assert.EqualError(t, err, "policies: "+dir+" is a directory, not a regular file")

	ok := filepath.Join(dir, "ok.yaml")
	require.NoError(t, os.WriteFile(ok, []byte("a: 1\n"), 0o600))
	data, err := yamlconf.ReadFile("policies", ok, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(data))
	_, err = yamlconf.ReadFile("policies", ok, 4)
	assert.EqualError(t, err, "policies: "+ok+" is larger than 4 bytes")
}
