package route_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

// An inspection through any member reads the key on its owner, every
// limit of it, and consumes nothing.
func TestInspectReadsTheOwnerAndConsumesNothing(t *testing.T) {
	c := newCluster(t, three)
	req := logReq(c.key(t, "n2", "k"), 5, time.Minute)
	for range 3 {
		require.True(t, c.members["n1"].svc.Check(bg, req).Decision.Allowed)
	}
	hits := int64(1)
	for range 2 { // asking twice changes nothing
		res, err := c.members["n3"].svc.Queries.Inspect(bg, route.InspectRequest{Key: req.Key, Limit: 5, Hits: &hits})
		require.NoError(t, err)
		assert.Equal(t, "n2", res.Owner)
		assert.Equal(t, c.ring.Partition(req.Key), res.Partition)
		require.Len(t, res.Limits, 1)
		assert.EqualValues(t, 3, res.Limits[0].Count)
		assert.Len(t, res.Limits[0].Entries, 3)
	}
	assert.EqualValues(t, 3, c.members["n2"].held(t, c.clock.Now(), req))
}

// An inspection whose owner cannot be asked fails UNAVAILABLE: it never
// guesses from a copy. One the owner refuses names the field.
func TestInspectNeverGuesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, three)
		key := c.key(t, "n2", "k")
		c.net.Cut("n1", "n2")
		_, err := c.members["n1"].svc.Queries.Inspect(bg, route.InspectRequest{Key: key})
		require.ErrorIs(t, err, peer.ErrOwnerUnreachable)
		assert.Equal(t, peer.Unavailable, peer.CodeOf(err))

		hits := int64(-1)
		_, err = c.members["n3"].svc.Queries.Inspect(bg, route.InspectRequest{Key: key, Limit: 5, Hits: &hits})
		assert.Equal(t, "hits", peer.FieldOf(err))
	})
}
