// Package configmap keeps a directory the way kubelet keeps a Kubernetes
// ConfigMap volume (k8s.io/kubernetes/pkg/volume/util, AtomicWriter), for
// tests of what watches one: each version's files in a hidden
// timestamped directory, ..data a symlink to it, and the visible names
// symlinks through ..data, so that an update changes hidden entries only.
package configmap

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Volume is a ConfigMap volume mounted at Dir.
type Volume struct {
	t       testing.TB
	dir     string
	current string          // the timestamped directory ..data points at
	names   map[string]bool // the visible names
}

// New makes a volume at dir, which must exist, holding nothing yet.
func New(t testing.TB, dir string) *Volume { return &Volume{t: t, dir: dir} }

// Dir is the mount point.
func (v *Volume) Dir() string { return v.dir }

// Path is where a file of the ConfigMap appears.
func (v *Volume) Path(name string) string { return filepath.Join(v.dir, name) }

// Update publishes files (name → contents) as kubelet does: a new
// timestamped directory written whole, a symlink ..data_tmp to it
// renamed over ..data (the one step the change takes effect in), the
// visible symlinks made for names new to the volume and removed for names
// it no longer has, the old directory removed.
func (v *Volume) Update(files map[string]string) {
	v.t.Helper()
	ts, err := os.MkdirTemp(v.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	v.must(err)
	v.must(os.Chmod(ts, 0o755))
	for name, data := range files {
		v.must(os.WriteFile(filepath.Join(ts, name), []byte(data), 0o644))
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	v.must(os.Symlink(filepath.Base(ts), tmp))
	v.must(os.Rename(tmp, filepath.Join(v.dir, "..data")))
	for name := range files {
		if !v.names[name] {
			v.must(os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)))
		}
	}
	for name := range v.names {
		if _, ok := files[name]; !ok {
			v.must(os.Remove(filepath.Join(v.dir, name)))
		}
	}
	v.names = map[string]bool{}
	for name := range files {
		v.names[name] = true
	}
	if v.current != "" {
		v.must(os.RemoveAll(v.current))
	}
	v.current = ts
}

func (v *Volume) must(err error) {
	v.t.Helper()
	if err != nil {
		v.t.Fatalf("configmap: %v", err)
	}
}
