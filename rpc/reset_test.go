package rpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/policy"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/rpc"
)

// deadAddr is a loopback address nothing listens on: calls to it are
// refused at once.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func exhaustVia(t *testing.T, e *env, req *pb.CheckRequest) {
	t.Helper()
	for {
		got, err := e.srv.Check(context.Background(), req)
		require.NoError(t, err)
		if !got.Allowed {
			return
		}
	}
}

func TestResetOnTheOwner(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	ctx := context.Background()
	blocked := logReq("user:1", 2, 1000)
	exhaustVia(t, e, blocked)
	exhaustVia(t, e, &pb.CheckRequest{Key: "user:1", Limit: 3, WindowMs: 60_000}) // another limit of the key

	got, err := e.srv.Reset(ctx, &pb.ResetRequest{Key: "user:1", WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
	require.NoError(t, err)
	assertProtoEqual(t, &pb.ResetResponse{Owner: "n1", Existed: true, Cleared: 1}, got)
	c, err := e.srv.Check(ctx, blocked)
	require.NoError(t, err)
	assert.True(t, c.Allowed, "the block is lifted")
	assert.Zero(t, c.CurrentCount)
	c, err = e.srv.Check(ctx, &pb.CheckRequest{Key: "user:1", Limit: 3, WindowMs: 60_000})
	require.NoError(t, err)
	assert.False(t, c.Allowed, "the key's other limit is untouched")

	// By policy: login is the 2/1s log above.
	got, err = e.srv.Reset(ctx, &pb.ResetRequest{Key: "user:1", Policy: "login"})
	require.NoError(t, err)
	assertProtoEqual(t, &pb.ResetResponse{Owner: "n1", Existed: true, Cleared: 1}, got)
	got, err = e.srv.Reset(ctx, &pb.ResetRequest{Key: "user:1", Policy: "login"})
	require.NoError(t, err)
	assertProtoEqual(t, &pb.ResetResponse{Owner: "n1"}, got, "nothing left: existed is false, not an error")

	// Every limit of the key at once.
	exhaustVia(t, e, blocked)
	got, err = e.srv.Reset(ctx, &pb.ResetRequest{Key: "user:1", AllWindows: true})
	require.NoError(t, err)
	assertProtoEqual(t, &pb.ResetResponse{Owner: "n1", Existed: true, Cleared: 2}, got)
	st := e.store.Stats()
	assert.Zero(t, st.CounterKeys+st.LogKeys)
}

func TestResetInvalidArguments(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	for _, c := range []struct {
		name  string
		req   *pb.ResetRequest
		field string
	}{
		{"no key", &pb.ResetRequest{WindowMs: 1000}, "key"},
		{"no window", &pb.ResetRequest{Key: "k"}, "window_ms"},
		{"negative window", &pb.ResetRequest{Key: "k", WindowMs: -5}, "window_ms"},
		{"huge window", &pb.ResetRequest{Key: "k", WindowMs: 1 << 62}, "window_ms"},
		{"unknown algorithm", &pb.ResetRequest{Key: "k", WindowMs: 1000, Algorithm: 5}, "algorithm"},
		{"unknown policy", &pb.ResetRequest{Key: "k", Policy: "nope"}, "policy"},
		{"policy and window", &pb.ResetRequest{Key: "k", Policy: "login", WindowMs: 1000}, "window_ms"},
		{"policy and algorithm", &pb.ResetRequest{Key: "k", Policy: "login", Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG}, "algorithm"},
		{"all and window", &pb.ResetRequest{Key: "k", AllWindows: true, WindowMs: 1000}, "window_ms"},
		{"all and policy", &pb.ResetRequest{Key: "k", AllWindows: true, Policy: "login"}, "policy"},
		{"all and no key", &pb.ResetRequest{AllWindows: true}, "key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.srv.Reset(context.Background(), c.req)
			requireInvalid(t, err, c.field)
		})
	}
}

// With the owner unreachable a reset fails UNAVAILABLE and clears
// nothing, not even this node's own copy: the caller must retry, and the
// state stays consistent with what it is told.
func TestResetOwnerUnreachableIsUnavailable(t *testing.T) {
	peers := rpc.NewPeers(rpc.PeersConfig{SelfID: "n1", Timeout: 2 * time.Second})
	t.Cleanup(peers.Close)
	owner := rpc.Route{ID: "n2", Addr: deadAddr(t)}
	e := newEnv(t, func(o *envOpts) {
		o.rpc = func(c *rpc.Config) {
			c.Owner = func(string) rpc.Route { return owner }
			c.Peers = peers
			c.Fallback = rpc.FallbackLocal
		}
	})
	ctx := context.Background()
	// The fallback decides here while n2 is unreachable: a local copy.
	exhaustVia(t, e, logReq("user:1", 2, 1000))

	_, err := e.srv.Reset(ctx, &pb.ResetRequest{Key: "user:1", WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "owner n2")
	assert.ErrorContains(t, err, "owner unreachable")
	assert.Equal(t, 1, e.store.Stats().LogKeys, "nothing cleared")
}

// The owner clears; every other member is asked for its copy, and one
// that does not answer is counted, not fatal.
func TestResetAsksEveryOtherMember(t *testing.T) {
	peers := rpc.NewPeers(rpc.PeersConfig{SelfID: "n1", Timeout: 2 * time.Second})
	t.Cleanup(peers.Close)
	e := newEnv(t, func(o *envOpts) {
		o.rpc = func(c *rpc.Config) {
			c.Peers = peers
			c.Members = func() []rpc.Route {
				return []rpc.Route{{ID: "n1", Addr: "self, never called"}, {ID: "n3", Addr: deadAddr(t)}}
			}
		}
	})
	exhaustVia(t, e, &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1000})
	got, err := e.srv.Reset(context.Background(), &pb.ResetRequest{Key: "k", WindowMs: 1000})
	require.NoError(t, err)
	assertProtoEqual(t, &pb.ResetResponse{Owner: "n1", Existed: true, Cleared: 1, MembersAsked: 1}, got)
}

func TestPeerResetDropsLocalStateWhateverTheRing(t *testing.T) {
	e := newEnv(t)
	exhaustVia(t, e, logReq("k", 1, 1000))
	exhaustVia(t, e, &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 5000})
	peer := rpc.NewPeerServer(e.svc)
	got, err := peer.Reset(context.Background(), &pb.PeerResetRequest{Origin: "n2", Key: "k", WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
	require.NoError(t, err)
	assert.EqualValues(t, 1, got.GetCleared())
	got, err = peer.Reset(context.Background(), &pb.PeerResetRequest{Origin: "n2", Key: "k", AllWindows: true})
	require.NoError(t, err)
	assert.EqualValues(t, 1, got.GetCleared())
	_, err = peer.Reset(context.Background(), &pb.PeerResetRequest{Origin: "n2", Key: "", AllWindows: true})
	requireInvalid(t, err, "key")
}

func TestResetOverGRPC(t *testing.T) {
	set, err := policy.Parse("p.yaml", []byte(testPolicies), nil)
	require.NoError(t, err)
	e := newEnv(t, func(o *envOpts) { o.rpc = func(c *rpc.Config) { c.Policies = set } })
	c := pb.NewRateLimiterClient(e.serveGRPC(t))
	ctx := context.Background()
	_, err = c.Check(ctx, &pb.CheckRequest{Key: "g", Policy: "search"})
	require.NoError(t, err)
	got, err := c.Reset(ctx, &pb.ResetRequest{Key: "g", Policy: "search"})
	require.NoError(t, err)
	assertProtoEqual(t, &pb.ResetResponse{Owner: "n1", Existed: true, Cleared: 1}, got)
	_, err = c.Reset(ctx, &pb.ResetRequest{Key: "g"})
	requireInvalid(t, err, "window_ms")
}
