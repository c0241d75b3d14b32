package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

// The fallback test cuts node-b's gRPC off while its gossip lives on: a
// still sees b as a member and owner of its keys, but cannot ask it. Every
// check a receives for one of b's keys is then answered by a's fallback
// policy, deterministically (no race with failure detection: the ring
// never changes). It is the end-to-end check, over real gRPC, HTTP and
// gossip, of what package route tests for every policy on the in-memory
// network (route/fallback_test.go), and package handoff for the handoff
// that runs meanwhile.

// fbNow is the time on both nodes' clocks, which stand still.
var fbNow = time.UnixMilli(1_700_000_000_000)

// fbEnv is node-a and node-b, converged, with b's gRPC stopped.
type fbEnv struct {
	a, b   *Node
	client pb.RateLimiterClient // a's public gRPC API
	bKey   string               // owned by b, never asked before b's gRPC stopped
	aKey   string               // owned by a
}

// fbStart starts node-a and node-b (joined through a) with the given
// fallback, waits until both see both and agree on the ring, checks that
// forwarding to b works, then stops b's gRPC server.
func fbStart(t *testing.T, policy route.FallbackPolicy, edit func(*Config)) *fbEnv {
	t.Helper()
	logs := testlog.New(t) // first: its cleanup must run after the nodes'
	start := func(id string, join []string) *Node {
		cfg := DefaultLocalConfig(id)
		cfg.Join = join
		cfg.Route.Fallback = policy
		// The policies themselves: with replication on, a is b's heir
		// and answers from b's replica before any policy does
		// (TestHeirAnswersFromTheReplica).
		cfg.Replication.Factor = 0
		// The tests call handOff themselves. The periodic one would take
		// b's partition out of a's store (to send it) while a decides on
		// it, at a moment of its choosing.
		cfg.HandoffInterval = time.Hour
		// A stopped clock: no window can roll over between two checks.
		cfg.Now = func() time.Time { return fbNow }
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
		if edit != nil {
			edit(&cfg)
		}
		n, err := Start(cfg)
		require.NoError(t, err)
		t.Cleanup(n.Kill)
		return n
	}
	e := &fbEnv{a: start("node-a", nil)}
	e.b = start("node-b", []string{e.a.GossipAddr()})
	fbEventually(t, 15*time.Second, func() (bool, string) {
		for _, n := range []*Node{e.a, e.b} {
			if got := n.Members(); len(got) != 2 {
				return false, fmt.Sprintf("%s sees %d members", n.ID(), len(got))
			}
			if got := n.Ring().Members(); len(got) != 2 {
				return false, fmt.Sprintf("%s's ring has %d members", n.ID(), len(got))
			}
		}
		if !e.a.Ring().Equal(e.b.Ring()) {
			return false, "the rings differ"
		}
		return true, ""
	})

	conn, err := grpc.NewClient(e.a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	e.client = pb.NewRateLimiterClient(conn)

	probe := fbKeyOwnedBy(t, e.a, "node-b", "probe")
	e.bKey = fbKeyOwnedBy(t, e.a, "node-b", "fallback")
	e.aKey = fbKeyOwnedBy(t, e.a, "node-a", "own")
	resp := e.check(t, probe, 5)
	require.Equal(t, "node-b", resp.Owner, "forwarding works before the cut")
	require.False(t, resp.Degraded)

	e.b.grpcSrv.Stop() // b's gRPC is gone; its gossip is not
	require.Len(t, e.a.Members(), 2, "b is still a member")
	require.Equal(t, "node-b", e.a.Ring().Owner(e.bKey).ID, "and still owns its keys")
	return e
}

// fbKeyOwnedBy returns the first key "<prefix>:<i>" that n's ring gives
// to owner.
func fbKeyOwnedBy(t *testing.T, n *Node, owner, prefix string) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("%s:%d", prefix, i); n.Ring().Owner(k).ID == owner {
			return k
		}
	}
	t.Fatalf("no key of %s's", owner)
	return ""
}

// check asks a, through its gRPC API, for one hit on key (a 60s counter).
func (e *fbEnv) check(t *testing.T, key string, limit int64) *pb.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.client.Check(ctx, &pb.CheckRequest{Key: key, Limit: limit, WindowMs: 60_000})
	require.NoError(t, err)
	return resp
}

// checkHTTP asks a the same through its HTTP API.
func (e *fbEnv) checkHTTP(t *testing.T, key string, limit int64) map[string]any {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q,"limit":%d,"window_ms":60000}`, key, limit)
	resp, err := http.Post("http://"+e.a.HTTPAddr()+"/v1/check", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return out
}

// fbMetric reads one series (name and labels, as exposed) from n's
// GET /metrics.
func fbMetric(t *testing.T, n *Node, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	t.Fatalf("no series %s in /metrics", series)
	return 0
}

func fbEventually(t *testing.T, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	wait.For(t, within, cond)
}

// assertCommon checks what every policy shares: a key a owns is decided
// by a as usual, and the degraded answers are counted by policy and as
// failed forwards.
func (e *fbEnv) assertCommon(t *testing.T, policy route.FallbackPolicy, degraded int) {
	t.Helper()
	own := e.check(t, e.aKey, 5)
	assert.False(t, own.Degraded, "a key a owns is never degraded")
	assert.True(t, own.Allowed)
	assert.Equal(t, "node-a", own.Owner)

	unreachable := fbMetric(t, e.a, fmt.Sprintf(`peerlimit_owner_unreachable_total{policy=%q}`, policy))
	failed := fbMetric(t, e.a, `peerlimit_forwards_total{result="failed"}`)
	assert.GreaterOrEqual(t, unreachable, float64(degraded), "owner_unreachable_total{policy=%q}", policy)
	assert.GreaterOrEqual(t, failed, float64(degraded), `forwards_total{result="failed"}`)
	for _, other := range []route.FallbackPolicy{route.FallbackLocal, route.FallbackAllow, route.FallbackDeny} {
		if other != policy {
			assert.Zero(t, fbMetric(t, e.a, fmt.Sprintf(`peerlimit_owner_unreachable_total{policy=%q}`, other)), other.String())
		}
	}
}

// Local: a decides b's key on its own store, as if it owned it. The limit
// holds (on a's side), and the state stays on a until b can take it.
func TestFallbackLocalDecidesOnThisNodesStore(t *testing.T) {
	e := fbStart(t, route.FallbackLocal, nil)
	require.Zero(t, e.a.Store().Stats().CounterKeys, "a holds nothing before the fallback")

	degraded := 0
	for i, want := range []bool{true, true, false} {
		resp := e.check(t, e.bKey, 2)
		assert.True(t, resp.Degraded, "check %d", i)
		assert.Equal(t, "node-a", resp.Owner, "check %d", i)
		assert.Equal(t, want, resp.Allowed, "check %d: a's store counts", i)
		assert.EqualValues(t, i, resp.CurrentCount, "check %d: hits before it", i)
		degraded++
	}
	out := e.checkHTTP(t, e.bKey, 2)
	assert.Equal(t, true, out["degraded"])
	assert.Equal(t, false, out["allowed"])
	assert.Equal(t, "node-a", out["owner"])
	degraded++

	assert.Equal(t, 1, e.a.Store().Stats().CounterKeys, "a's store holds b's key")
	assert.Equal(t, 1, e.a.Store().Transfer().PartitionLen(e.a.Store().Transfer().PartitionOf(e.bKey)))
	e.assertCommon(t, route.FallbackLocal, degraded)

	// Handoff while b is unreachable: the state cannot go, so it is put
	// back; nothing admitted is forgotten.
	left := e.a.core.HandOff(context.Background())
	assert.Positive(t, left, "keys left behind")
	assert.GreaterOrEqual(t, fbMetric(t, e.a, `peerlimit_handoffs_total{result="failed"}`), 1.0)
	assert.Equal(t, 1, e.a.Store().Transfer().PartitionLen(e.a.Store().Transfer().PartitionOf(e.bKey)), "a's store still holds b's key")
	resp := e.check(t, e.bKey, 2)
	assert.True(t, resp.Degraded)
	assert.False(t, resp.Allowed, "the count survived the failed handoff")
	assert.EqualValues(t, 2, resp.CurrentCount)
}
