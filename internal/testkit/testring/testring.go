// Package testring builds the fixed rings tests route by: a cluster of
// route.Services on memnet, or one node forwarding to one owner.
package testring

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
)

// New returns a ring of members ids, each at "<id>:9090", with the
// default partition count and ring settings.
func New(t testing.TB, ids ...string) *ring.Ring {
	t.Helper()
	ms := make([]ring.Member, len(ids))
	for i, id := range ids {
		ms[i] = ring.Member{ID: id, Addr: id + ":9090"}
	}
	return Of(t, ms...)
}

// Of returns a ring of members, with the default partition count and
// ring settings.
func Of(t testing.TB, members ...ring.Member) *ring.Ring {
	t.Helper()
	r, err := ring.New(ring.DefaultConfig(), partition.DefaultCount, members)
	require.NoError(t, err)
	return r
}

// OwnedBy is a route.Cluster in which one member, which need not be the
// node asking, owns every key: a node that forwards everything to it.
func OwnedBy(t testing.TB, owner ring.Member) route.Cluster {
	t.Helper()
	return route.FixedCluster(Of(t, owner))
}
