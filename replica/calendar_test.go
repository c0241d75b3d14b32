package replica_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
)

// A calendar quota is replicated with its calendar, and its heir promotes
// it when the owner is cut off: the month's count goes on from the
// owner's, and the key's other limits (a month in another zone) stay
// apart. The backup drops its copy once the month is over.
func TestCalendarReplicaIsPromotedAndExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, "n1", "n2", "n3")
		paris, err := limiter.NewCalendar(limiter.CalendarMonth, "Europe/Paris")
		require.NoError(t, err)
		utc, err := limiter.NewCalendar(limiter.CalendarMonth, "")
		require.NoError(t, err)
		key := c.keyWith(t, "n1", "n2", "tenant")
		monthly := limiter.Request{Key: key, Limit: 5, Calendar: paris, Hits: 1}
		inUTC := limiter.Request{Key: key, Limit: 5, Calendar: utc, Hits: 1}
		owner, heir := c.members["n1"], c.members["n2"]
		require.Equal(t, 3, admit(t, owner, monthly, 3))
		require.Equal(t, 1, admit(t, owner, inUTC, 1))
		require.Zero(t, owner.sender.Round(context.Background()))
		require.Equal(t, 2, heir.replicas.Len(), "one replica per limit")

		// The month ends when the backup's clock says so, not before.
		end, _ := paris.Period(c.clk.Now().UnixMilli())
		_, end = paris.Period(end)
		assert.Zero(t, heir.replicas.Sweep(time.UnixMilli(end-1)))
		require.Equal(t, 2, heir.replicas.Len())

		c.net.Partition([]string{"n1"}, []string{"n2", "n3"})
		allowed := admit(t, heir, monthly, 3)
		assert.Equal(t, 2, allowed, "the 2 left of the owner's month, not a new quota")
		assert.EqualValues(t, 5, held(t, c, heir, monthly))
		assert.EqualValues(t, 1, held(t, c, heir, inUTC), "the UTC month, apart")

		c.net.Heal()
		require.Equal(t, 1, admit(t, owner, limiter.Request{Key: key, Limit: 5, Calendar: paris, Hits: 1}, 1), "the owner's own count: 4 of 5")
		require.Zero(t, owner.sender.Round(context.Background()))
		require.Equal(t, 1, heir.replicas.Len(), "the round sent the changed month")
		assert.Zero(t, heir.replicas.Sweep(time.UnixMilli(end-1)))
		assert.Equal(t, 1, heir.replicas.Sweep(time.UnixMilli(end)), "over at midnight in Paris")
		assert.Zero(t, heir.replicas.Len())
	})
}
