package persist

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// manifestName is the file that says whose a data directory is and in
// which format: written once, when the directory is first used.
const manifestName = "MANIFEST"

// formatVersion is the layout of the files: a node refuses a directory
// of another, rather than misread it.
const formatVersion = 1

// Identity is whose a data directory is: a node refuses one that is
// another node's, or another cluster's, rather than start from counts
// that are not its own.
type Identity struct {
	// Cluster names the cluster (--cluster-name); may be empty.
	Cluster string `json:"cluster"`
	// Node is the node's id. Required.
	Node string `json:"node"`
}

type manifest struct {
	Format int `json:"format"`
	Identity
}

// ErrNotOurs is returned, wrapped, for a data directory that belongs to
// another node or cluster, or is in another format.
var ErrNotOurs = errors.New("the data directory is not this node's")

// checkManifest reads the directory's manifest and refuses it if it is
// not id's in this format; with none, and no log files either, it writes
// one (a new directory). dir names the directory in errors.
func checkManifest(f FS, dir string, id Identity, names []string) error {
	m, err := readManifest(f)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if logFiles(names) {
			return fmt.Errorf("%w: %s holds log files but no %s; move them away or point --data-dir elsewhere", ErrNotOurs, dir, manifestName)
		}
		return writeManifest(f, manifest{Format: formatVersion, Identity: id})
	case err != nil:
		return fmt.Errorf("%w: %s/%s: %w", ErrNotOurs, dir, manifestName, err)
	case m.Format != formatVersion:
		return fmt.Errorf("%w: %s is in format %d, this version reads %d", ErrNotOurs, dir, m.Format, formatVersion)
	case m.Node != id.Node:
		return fmt.Errorf("%w: %s belongs to node %q, this node is %q; give each node its own --data-dir", ErrNotOurs, dir, m.Node, id.Node)
	case m.Cluster != id.Cluster:
		return fmt.Errorf("%w: %s belongs to cluster %q, this node's is %q (--cluster-name)", ErrNotOurs, dir, m.Cluster, id.Cluster)
	}
	return nil
}

func readManifest(f FS) (manifest, error) {
	var m manifest
	r, err := f.Open(manifestName)
	if err != nil {
		return m, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("unreadable: %w", err)
	}
	return m, nil
}

// writeManifest writes m by a new file and a rename, so that a crash
// leaves either none or all of it.
func writeManifest(f FS, m manifest) error {
	b, _ := json.Marshal(m)
	tmp := manifestName + ".tmp"
	w, err := f.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		w.Close()
		return err
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Rename(tmp, manifestName); err != nil {
		return err
	}
	return f.SyncDir()
}

// logFiles reports whether names hold any of the log's files.
func logFiles(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, segmentPrefix) || strings.HasPrefix(n, snapshotPrefix) {
			return true
		}
	}
	return false
}
