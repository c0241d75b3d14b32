package console_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

// The cluster's top keys, asked of one member, merge every member's hot
// keys (each key counted by its owner); a member that cannot be asked is
// counted as asked and not answered, never silently left out.
func TestTopMergesEveryMembersHotKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ids := []string{"n1", "n2", "n3"}
		r := testring.New(t, ids...)
		clk := fakeclock.AtMilli(1_700_000_000_000)
		net := memnet.New(1, 500*time.Millisecond)
		defer net.Close()
		views := map[string]*console.Cluster{}
		svcs := map[string]*route.Service{}
		for _, id := range ids {
			store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
			require.NoError(t, err)
			peers := net.Join(id)
			svc, err := route.NewService(route.DefaultConfig(), route.Deps{NodeID: id, Store: store, Now: clk.Now,
				Cluster: route.FixedCluster(r), Peers: peers})
			require.NoError(t, err)
			peers.Serve(svc.Peer)
			svcs[id] = svc
			views[id] = console.NewCluster(id, route.FixedCluster(r), peers, svc.Peer, clk.Now)
		}
		// key i is checked i times, through n1; each is decided by its owner.
		for i := 1; i <= 5; i++ {
			key := fmt.Sprintf("hot:%d", i)
			for range i {
				require.NoError(t, svcs["n1"].Check(context.Background(), limiter.Request{Key: key, Limit: 100, Window: time.Minute, Hits: 1}).Err)
			}
		}
		top, err := views["n3"].Top(context.Background(), 3)
		require.NoError(t, err)
		assert.Equal(t, 3, top.MembersAsked)
		assert.Equal(t, 3, top.MembersAnswered)
		require.Len(t, top.Checks, 3)
		for j, want := range []string{"hot:5", "hot:4", "hot:3"} {
			assert.Equal(t, want, top.Checks[j].Key)
			assert.EqualValues(t, 5-j, top.Checks[j].Count)
		}

		net.Cut("n3", "n1")
		top, err = views["n3"].Top(context.Background(), 3)
		require.NoError(t, err)
		assert.Equal(t, 3, top.MembersAsked)
		assert.Equal(t, 2, top.MembersAnswered, "n1 could not be asked")

		_, err = views["n3"].Top(context.Background(), peer.MaxTop+1)
		assert.Equal(t, "n", peer.FieldOf(err))
	})
}
