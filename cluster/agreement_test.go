package cluster

import (
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// declareDead makes c's failure detector declare m dead, as memberlist
// does when m's suspicion times out here with no refutation in time:
// the event delegate's NotifyLeave with m's last metadata, not leaving.
// It is what a bridge produces (this member cannot reach m, a third can)
// when m's refutation, which travels through the third, arrives late.
func declareDead(t *testing.T, c *Cluster, m *Cluster) {
	t.Helper()
	host, port, err := net.SplitHostPort(m.GossipAddr())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	meta, err := json.Marshal(meta{GRPC: "127.0.0.1:1"})
	require.NoError(t, err)
	(&events{c}).NotifyLeave(&memberlist.Node{Name: m.LocalID(), Addr: net.ParseIP(host), Port: uint16(p), Meta: meta})
}

func ids(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func stateOf(c *Cluster, id string) (Member, bool) {
	for _, m := range c.View() {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// A leave is a leave though the leaver's dead message reached a member
// before its "leaving" metadata did: memberlist sends them as separate
// gossip, the dead message cancels what is left of the other's
// retransmissions, and the Node it hands NotifyLeave never says "left"
// (its State field is never set). That member doubts the leaver; its
// agreement round asks the leaver itself, which is still handing off and
// answers that it is leaving, so it leaves the ring at once instead of
// staying there, doubted, for a confirm interval while the others have
// taken its keys (jepsen-lite scale: two deciders, up to 1.5×).
func TestALeaverWhoseLeaveLooksLikeAFailureSaysSo(t *testing.T) {
	n1, _ := start(t, "node-1", "127.0.0.1:0")
	n2, r2 := start(t, "node-2", "127.0.0.1:0", n1.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return r2.ids() == "node-1,node-2" }, "node-2 sees %s", r2.ids)
	n1.setMeta(func(m *meta) { m.Leaving = true }) // leaving, not yet announced
	declareDead(t, n2, n1)                         // the dead message, first
	eventually(t, 3*time.Second, func() bool {
		m, ok := stateOf(n2, "node-1")
		return ok && m.State == StateLeft
	}, "node-2 lists node-1 as %v", func() string { m, _ := stateOf(n2, "node-1"); return string(m.State) })
	assert.NotContains(t, ids(n2.Members()), "node-1", "out of the ring: the others took its keys")
}

// One member's failure detector alone declares a live member dead (the
// bridge of issue 28: node-3 cannot reach node-1, node-2 still can).
// node-3 must not take node-1's keys: node-2 reaches node-1, so node-1
// stays in node-3's ring, shown as unreachable. Before agreement, the
// declaration removed it at once, every time.
func TestOneMemberAloneCannotDeclareAnotherDead(t *testing.T) {
	n1, _ := start(t, "node-1", "127.0.0.1:0")
	_, r2 := start(t, "node-2", "127.0.0.1:0", n1.GossipAddr())
	n3, r3 := start(t, "node-3", "127.0.0.1:0", n1.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return r3.ids() == "node-1,node-2,node-3" && r2.ids() == r3.ids() },
		"node-2 sees %s, node-3 %s", r2.ids, r3.ids)

	declareDead(t, n3, n1)
	// The round lasts until node-2 answers (or ConfirmTimeout, 1 s): watch
	// past it that node-1 never leaves node-3's ring.
	deadline := time.Now().Add(n3.cfg.ConfirmTimeout + n3.cfg.ConfirmInterval)
	for time.Now().Before(deadline) {
		require.Contains(t, ids(n3.Members()), "node-1", "node-3 took node-1 out on its own word")
		time.Sleep(20 * time.Millisecond)
	}
	m, ok := stateOf(n3, "node-1")
	require.True(t, ok)
	assert.Equal(t, StateUnreachable, m.State, "shown as unreachable from here")
	assert.Equal(t, "node-1,node-2,node-3", r3.ids(), "the ring node-3 builds keeps node-1")
}

// A member that really crashed is taken out once another member confirms
// that it cannot reach it either: not unconfirmed, so nothing is marked
// degraded.
func TestACrashIsConfirmedByTheOthers(t *testing.T) {
	n1, _ := start(t, "node-1", "127.0.0.1:0")
	_, r2 := start(t, "node-2", "127.0.0.1:0", n1.GossipAddr())
	n3, r3 := start(t, "node-3", "127.0.0.1:0", n1.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return r3.ids() == "node-1,node-2,node-3" && r2.ids() == r3.ids() }, "node-3 sees %s", r3.ids)

	require.NoError(t, n1.Shutdown()) // no Leave: a crash
	eventually(t, 10*time.Second, func() bool { return r3.ids() == "node-2,node-3" && r2.ids() == "node-2,node-3" },
		"node-2 sees %s, node-3 %s", r2.ids, r3.ids)
	m, ok := stateOf(n3, "node-1")
	require.True(t, ok)
	assert.Equal(t, StateFailed, m.State)
	assert.False(t, m.Unconfirmed, "node-2 confirmed it")
}

// With nobody to ask (a ring of two, or the minority side of a
// partition), a member goes on its own evidence, unconfirmed; it is
// confirmed as soon as another member can say so.
func TestWithNobodyToAskAFailureIsUnconfirmed(t *testing.T) {
	n1, _ := start(t, "node-1", "127.0.0.1:0")
	n2, r2 := start(t, "node-2", "127.0.0.1:0", n1.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return r2.ids() == "node-1,node-2" }, "node-2 sees %s", r2.ids)

	require.NoError(t, n1.Shutdown())
	eventually(t, 10*time.Second, func() bool { return r2.ids() == "node-2" }, "node-2 sees %s", r2.ids)
	m, ok := stateOf(n2, "node-1")
	require.True(t, ok)
	assert.True(t, m.Unconfirmed, "nobody could be asked")

	_, r3 := start(t, "node-3", "127.0.0.1:0", n2.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return r3.ids() == "node-2,node-3" }, "node-3 sees %s", r3.ids)
	eventually(t, 10*time.Second, func() bool { m, _ := stateOf(n2, "node-1"); return !m.Unconfirmed },
		"node-3 confirms node-1 gone")
	assert.True(t, slices.Equal([]string{"node-2", "node-3"}, ids(n2.Members())))
}

// A member that says it is leaving is out of the others' rings at once,
// before memberlist's leave, which may never reach them (its
// retransmissions are few, and end when the leaver stops: jepsen-lite
// scale saw a member keep the leaver, forwarding to it after it stopped,
// until memberlist suspected it a second later).
func TestAMemberSayingItLeavesIsOutAtOnce(t *testing.T) {
	n1, _ := start(t, "node-1", "127.0.0.1:0")
	n2, r2 := start(t, "node-2", "127.0.0.1:0", n1.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return r2.ids() == "node-1,node-2" }, "node-2 sees %s", r2.ids)
	n1.setMeta(func(m *meta) { m.Leaving = true }) // Leave's first step, without memberlist's leave after it
	require.NoError(t, n1.ml.UpdateNode(time.Second))
	eventually(t, 3*time.Second, func() bool { return r2.ids() == "node-2" }, "node-2's ring is %s", r2.ids)
	m, ok := stateOf(n2, "node-1")
	require.True(t, ok)
	assert.Equal(t, StateLeft, m.State)
}
