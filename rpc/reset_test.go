package rpc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/peerrpc"
	"github.com/peerlimit/peerlimit/policy"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

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

func TestPeerResetDropsLocalStateWhateverTheRing(t *testing.T) {
	e := newEnv(t)
	exhaustVia(t, e, logReq("k", 1, 1000))
	exhaustVia(t, e, &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 5000})
	peerSrv := peerrpc.NewServer(e.svc.Peer)
	got, err := peerSrv.Reset(context.Background(), &pb.PeerResetRequest{Origin: "n2", Key: "k", WindowMs: 1000, Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
	require.NoError(t, err)
	assert.EqualValues(t, 1, got.GetCleared())
	got, err = peerSrv.Reset(context.Background(), &pb.PeerResetRequest{Origin: "n2", Key: "k", AllWindows: true})
	require.NoError(t, err)
	assert.EqualValues(t, 1, got.GetCleared())
	_, err = peerSrv.Reset(context.Background(), &pb.PeerResetRequest{Origin: "n2", Key: "", AllWindows: true})
	requireInvalid(t, err, "key")
}

func TestResetOverGRPC(t *testing.T) {
	set, err := policy.Parse("p.yaml", []byte(testPolicies), nil)
	require.NoError(t, err)
	e := newEnv(t, func(o *envOpts) { o.rpc = func(c *svcConfig) { c.Policies = set } })
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
