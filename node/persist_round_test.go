package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/crashfs"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/persist"
	"github.com/peerlimit/peerlimit/replica"
	"github.com/peerlimit/peerlimit/ring"
)

// stalledBackup is a backup whose Replicate calls wait until released:
// a slow or dead member, up to its call's timeout. Only Replicate is
// called here.
type stalledBackup struct {
	peer.Peers
	entered, release chan struct{}
}

func (b stalledBackup) Replicate(ctx context.Context, _ peer.Route, _ peer.Replication) (peer.Replicated, error) {
	select {
	case b.entered <- struct{}{}: // the first call's; entered holds one
	default:
	}
	<-b.release
	return peer.Replicated{}, nil
}

// A round writes its changes to the disk before it sends them: a node
// killed while a backup stalls its round has the round on its disk. The
// kill -9 bound (one interval plus the write) does not wait on the
// network.
func TestARoundIsOnTheDiskBeforeItsReplicationIsSent(t *testing.T) {
	lc := limiter.DefaultConfig()
	lc.TrackChanges = true
	store, err := limiter.New(lc, partition.DefaultCount)
	require.NoError(t, err)
	fs := crashfs.New()
	pc := persist.DefaultConfig()
	pc.Dir = "/data"
	id := persist.Identity{Cluster: "c", Node: "n1"}
	disk, _, err := persist.Open(pc, id, persist.Deps{FS: fs})
	require.NoError(t, err)
	backup := stalledBackup{entered: make(chan struct{}, 1), release: make(chan struct{})}
	rg := testring.New(t, "n1", "n2")
	repl, err := replica.NewReplicator(replica.Deps{Self: "n1", Store: store, Peers: backup,
		Ring: func() *ring.Ring { return rg }, Now: time.Now})
	require.NoError(t, err)
	c := &changes{store: store, repl: repl, disk: disk, now: time.Now}

	now := time.Now()
	_, err = store.Check(now, limiter.Request{Key: "k", Limit: 10, Window: time.Hour, Hits: 3})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { c.round(); close(done) }()
	<-backup.entered // the round waits on its backup

	killed := fs.Kill() // kill -9 now: the page cache stays
	after, restored, err := persist.Open(pc, id, persist.Deps{FS: killed})
	require.NoError(t, err)
	require.Len(t, restored.Own, 1, "the round is on the disk")
	assert.Equal(t, "k", restored.Own[0].Key)
	assert.EqualValues(t, 3, restored.Own[0].Curr)
	require.NoError(t, after.Close())

	close(backup.release)
	<-done
	require.NoError(t, disk.Close())
}
