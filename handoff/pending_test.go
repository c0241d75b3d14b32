package handoff_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/handoff"
	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
)

func receiver(t *testing.T, self string, maxWait time.Duration) *handoff.Receiver {
	t.Helper()
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	r, err := handoff.NewReceiver(handoff.ReceiverDeps{Self: self, MaxWait: maxWait, Store: store, Now: fakeclock.AtMilli(0).Now})
	require.NoError(t, err)
	return r
}

func owned(t *testing.T, self string, ids ...string) (parts []int) {
	r := testring.New(t, ids...)
	for p := range r.PartitionCount() {
		if r.PartitionOwner(p).ID == self {
			parts = append(parts, p)
		}
	}
	return parts
}

// A node back in a ring (restarted, or healed from a partition) waits for
// every member added to say it has handed over what it decided of this
// node's partitions; until then their answers are degraded.
func TestAnAddedMemberIsWaitedForUntilItSaysDone(t *testing.T) {
	r := receiver(t, "n2", time.Minute)
	ring := testring.New(t, "n1", "n2", "n3")
	mine := owned(t, "n2", "n1", "n2", "n3")
	require.NotEmpty(t, mine)

	r.Expect(ring, nil, []string{"n1", "n3"}, nil)
	assert.Equal(t, len(mine), r.Waiting())
	assert.True(t, r.Pending(mine[0]))

	r.Done("n1", mine)
	assert.True(t, r.Pending(mine[0]), "n3 has not said so yet")
	r.Done("n3", mine[1:])
	assert.True(t, r.Pending(mine[0]), "n3 did not name this one")
	assert.False(t, r.Pending(mine[1]))
	r.Done("n3", mine)
	assert.Zero(t, r.Waiting())
	assert.False(t, r.Pending(mine[0]))
}

// A done that arrives before this node's own ring change counts; a member
// that leaves the ring is not waited for; nothing waits past MaxWait.
func TestWaitingEndsOnDoneLeaveOrMaxWait(t *testing.T) {
	ring := testring.New(t, "n1", "n2", "n3")
	mine := owned(t, "n2", "n1", "n2", "n3")

	early := receiver(t, "n2", time.Minute)
	early.Done("n1", mine)
	early.Expect(ring, mine, nil, nil)
	early.Done("n3", mine)
	assert.Zero(t, early.Waiting(), "n1 said so before the ring change")

	left := receiver(t, "n2", time.Minute)
	left.Expect(ring, mine, nil, nil)
	left.Done("n1", mine)
	left.Expect(testring.New(t, "n1", "n2"), nil, nil, nil)
	for _, p := range owned(t, "n2", "n1", "n2") {
		assert.False(t, left.Pending(p), "n3 left: nobody else to wait for")
	}

	synctest.Test(t, func(t *testing.T) { // MaxWait runs on the monotonic clock: the bubble's
		slow := receiver(t, "n2", time.Second)
		slow.Expect(ring, mine, nil, nil)
		time.Sleep(999 * time.Millisecond)
		assert.True(t, slow.Pending(mine[0]))
		time.Sleep(time.Millisecond)
		assert.False(t, slow.Pending(mine[0]))
		assert.Zero(t, slow.Waiting())
	})
}

// The partitions a member hands off as it leaves gracefully wait for its
// word too, although it is no longer in the ring.
func TestALeaverIsWaitedForOnWhatItHandsOff(t *testing.T) {
	r := receiver(t, "n2", time.Minute)
	after := testring.New(t, "n2", "n3")
	gained := owned(t, "n2", "n2", "n3")
	r.Expect(after, gained, nil, []string{"n1"})
	r.Done("n3", gained)
	assert.True(t, r.Pending(gained[0]), "n1 has not said it handed them over")
	r.Done("n1", gained)
	assert.Zero(t, r.Waiting())
}

// A member's word from before it dropped out of the ring (a partition)
// does not count when it is back: it has decided this node's keys since.
func TestAWordFromBeforeAPartitionIsStale(t *testing.T) {
	r := receiver(t, "n2", time.Minute)
	all := testring.New(t, "n1", "n2", "n3")
	mine := owned(t, "n2", "n1", "n2", "n3")
	r.Done("n1", mine)                                   // every round while the cluster was whole
	r.Expect(testring.New(t, "n2", "n3"), nil, nil, nil) // n1 cut off
	r.Expect(all, nil, []string{"n1"}, nil)              // healed
	assert.True(t, r.Pending(mine[0]), "n1 has not said so since it came back")
	r.Done("n1", mine)
	assert.Zero(t, r.Waiting())
}
