package node

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/ring"
)

// A node serves before it joins: until the join's ring is in place,
// every key is settling (a forwarded check waits for the join) and
// contested (decided without it, it is marked degraded), since the ring
// of itself alone would have it decide keys whose state the members
// hold. Found by jepsen-lite's scale scenario: a node added under load
// admitted 12 of 10, silently, in 4 runs of 12.
func TestAJoiningNodeDecidesNothingSilently(t *testing.T) {
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	self, err := ring.New(ring.DefaultConfig(), partition.DefaultCount, []ring.Member{{ID: "n4", Addr: "127.0.0.1:1"}})
	require.NoError(t, err)
	var v view
	v.init(self, "n4", store)

	ch := v.Settling("user:1")
	require.NotNil(t, ch, "joining: every key waits for the join")
	assert.True(t, v.Contested("user:1"), "joining: an answer not waited for is degraded")
	select {
	case <-ch:
		t.Fatal("the join's channel is closed before the join")
	default:
	}

	v.markJoined()
	<-ch
	assert.Nil(t, v.Settling("user:1"), "joined, with no handoff pending: nothing to wait for")
	assert.False(t, v.Contested("user:1"))
}
