package cluster

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"

	"github.com/peerlimit/peerlimit/internal/testkit/wait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist's Shutdown stops its probe ticker but does not wait
		// for a probe in flight: that goroutine waits out its ack timer
		// and, for a silent peer, the TCP fallback ping (up to
		// TCPTimeout, 2 s on the lan profile), then ends by itself. Not
		// a leak of ours, but longer than goleak's retries.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

// recorder keeps the live members of the last snapshot OnChange
// delivered.
type recorder struct {
	mu   sync.Mutex
	last []Member
}

func (r *recorder) onChange(ms []Member) {
	var live []Member
	for _, m := range ms {
		if m.State == StateAlive || m.State == StateUnreachable {
			live = append(live, m)
		}
	}
	r.mu.Lock()
	r.last = live
	r.mu.Unlock()
}
func (r *recorder) ids() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, m := range r.last {
		ids = append(ids, m.ID)
	}
	return strings.Join(ids, ",")
}

func start(t *testing.T, id, bind string, join ...string) (*Cluster, *recorder) {
	t.Helper()
	rec := &recorder{}
	c, err := Start(Config{
		ID: id, BindAddr: bind, GRPCAddr: "127.0.0.1:9" + id[len(id)-1:] + "00", Join: join,
		Profile: ProfileLocal, OnChange: rec.onChange,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown() })
	return c, rec
}

// eventually polls cond until it holds or the deadline passes: never a
// guessed sleep.
func eventually(t *testing.T, within time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	wait.For(t, within, func() (bool, string) {
		// Explanations may name functions (current state): call them now.
		now := make([]any, len(args))
		for k, a := range args {
			if f, isFunc := a.(func() string); isFunc {
				a = f()
			}
			now[k] = a
		}
		return cond(), fmt.Sprintf(what, now...)
	})
}

func TestMembersConvergeAndCarryGRPCAddr(t *testing.T) {
	a, ra := start(t, "node-1", "127.0.0.1:0")
	_, rb := start(t, "node-2", "127.0.0.1:0", a.GossipAddr())
	_, rc := start(t, "node-3", "127.0.0.1:0", a.GossipAddr())
	for _, r := range []*recorder{ra, rb, rc} {
		eventually(t, 5*time.Second, func() bool { return r.ids() == "node-1,node-2,node-3" }, "OnChange saw %s", r.ids)
	}
	for _, m := range a.Members() {
		assert.Equal(t, StateAlive, m.State)
		assert.Equal(t, "127.0.0.1:9"+m.ID[len(m.ID)-1:]+"00", m.GRPCAddr, "metadata carries the gRPC address")
	}
}

func TestGracefulLeaveIsNotAFailure(t *testing.T) {
	a, ra := start(t, "node-1", "127.0.0.1:0")
	b, _ := start(t, "node-2", "127.0.0.1:0", a.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return ra.ids() == "node-1,node-2" }, "join")
	require.NoError(t, b.Leave(t.Context()))
	require.NoError(t, b.Shutdown())
	eventually(t, 5*time.Second, func() bool { return ra.ids() == "node-1" }, "leave seen")
	view := a.View()
	require.Len(t, view, 2)
	assert.Equal(t, StateLeft, view[1].State)
	assert.Empty(t, a.reconnectTargets(time.Now()), "nobody to reconnect to: the seed list is empty")
}

// A member that failed and came back after memberlist stopped gossiping to
// it (GossipToTheDeadTime, 5 s here) is rejoined by the survivor's
// reconnector, although the returning member was given no seed at all:
// this is what heals a partition that outlasted the dead time.
func TestReconnectorHealsAfterGossipToTheDeadTime(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past memberlist's dead-gossip time")
	}
	a, ra := start(t, "node-1", "127.0.0.1:0")
	b, _ := start(t, "node-2", unassignedAddr(t), a.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return ra.ids() == "node-1,node-2" }, "join")
	addr := b.GossipAddr()
	require.NoError(t, b.Shutdown()) // no Leave: a crash
	eventually(t, 5*time.Second, func() bool { return ra.ids() == "node-1" }, "failure detected")
	assert.Equal(t, []string{addr}, a.reconnectTargets(time.Now()))

	// Come back after the dead time, on the same address, with no seeds.
	deadline := time.Now().Add(6 * time.Second)
	eventually(t, 10*time.Second, func() bool { return time.Now().After(deadline) }, "dead time passed")
	b2, rb2 := start(t, "node-2", addr)
	eventually(t, 10*time.Second, func() bool { return ra.ids() == "node-1,node-2" && rb2.ids() == "node-1,node-2" },
		"reconnected: a sees %s, b sees %s", ra.ids, rb2.ids)
	_ = b2
}

// unassignedAddr is a loopback address whose port is free for TCP and UDP
// now and lies below Linux's ephemeral range (32768 and up), so that no
// port-0 listener of a test running in parallel is handed it while a test
// holds it free between a crash and a restart.
func unassignedAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20_000+rand.IntN(12_000))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		return addr
	}
	t.Fatal("no free port in 20000-31999 after 100 tries")
	return ""
}

func TestEncryptedGossipNeedsTheKey(t *testing.T) {
	key := []byte("0123456789abcdef")
	mk := func(id string, k []byte, join ...string) (*Cluster, error) {
		c, err := Start(Config{ID: id, BindAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:1", Join: join, SecretKey: k,
			Profile: ProfileLocal, Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelError}))})
		if err == nil {
			t.Cleanup(func() { _ = c.Shutdown() })
		}
		return c, err
	}
	a, err := mk("node-1", key)
	require.NoError(t, err)
	_, err = mk("node-2", key, a.GossipAddr())
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() bool { return len(a.Members()) == 2 }, "keyed join")
	_, err = mk("node-3", []byte("fedcba9876543210"), a.GossipAddr())
	require.NoError(t, err, "an unreachable seed is not fatal")
	assert.Len(t, a.Members(), 2, "a member with the wrong key cannot join")
}

func TestConfigValidate(t *testing.T) {
	_, err := Start(Config{ID: "", BindAddr: "", SecretKey: []byte("short"), Profile: "wan"})
	require.Error(t, err)
	for _, s := range []string{"ID", "BindAddr", "GRPCAddr", "SecretKey", "Profile"} {
		assert.Contains(t, err.Error(), s)
	}
	_, err = Start(Config{ID: "x", BindAddr: "nohostport", GRPCAddr: "x:1"})
	assert.ErrorContains(t, err, "BindAddr")
	_ = fmt.Sprint()
}

// Sync delivers the current view through the notifier, never beside it:
// views are applied one at a time, each taken when delivered, so a
// caller's view (taken before a change the notifier delivers meanwhile)
// can never be applied after the newer one and stay the last. (The node
// called OnChange with a view of its own after its join; under load that
// view, a member short, came after the notifier's, and one ring stayed a
// member short: jepsen-lite full-stop, not converged.)
func TestSyncDeliversThroughTheNotifier(t *testing.T) {
	var (
		mu             sync.Mutex
		inFlight, most int
		last           []string
		release        = make(chan struct{})
	)
	onChange := func(ms []Member) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		<-release // a slow consumer: every delivery waits here until released
		var ids []string
		for _, m := range ms {
			if m.State == StateAlive {
				ids = append(ids, m.ID)
			}
		}
		mu.Lock()
		inFlight--
		last = ids
		mu.Unlock()
	}
	a, err := Start(Config{ID: "node-1", BindAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:9100", Profile: ProfileLocal,
		OnChange: onChange, Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown() })
	start(t, "node-2", "127.0.0.1:0", a.GossipAddr())
	eventually(t, 5*time.Second, func() bool { return len(a.Members()) == 2 }, "node-2 joined")

	synced := make(chan struct{})
	go func() { a.Sync(); close(synced) }()
	select {
	case <-synced:
		t.Fatal("Sync returned while the notifier's delivery was still under way")
	case <-time.After(100 * time.Millisecond): // it waits on the notifier, which waits on release
	}
	close(release)
	<-synced
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 1, most, "one delivery at a time")
	assert.Equal(t, []string{"node-1", "node-2"}, last, "the last delivered is the current view")
}
