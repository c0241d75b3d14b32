package rpc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peerrpc"
	"github.com/peerlimit/peerlimit/policy"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/route"
)

const testPolicies = "login: {algorithm: SLIDING_WINDOW_LOG, limit: 2, window: 1s}\nsearch: {limit: 100, window: 1m}\n"

func withPolicies(t testing.TB, src string) func(*envOpts) {
	set, err := policy.Parse("policies.yaml", []byte(src), nil)
	require.NoError(t, err)
	return func(o *envOpts) { o.rpc = func(c *svcConfig) { c.Policies = set } }
}

// A check naming a policy is the policy's numbers given inline: same
// answers, same state.
func TestCheckByPolicy(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	ctx := context.Background()
	login := &pb.CheckRequest{Key: "user:1", Policy: "login"}

	got, err := e.srv.Check(ctx, login)
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 2, 1, 0, 0, 1000, 1000), got)
	got, err = e.srv.Check(ctx, logReq("user:1", 2, 1000)) // the same limit, inline
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 2, 0, 1, 0, 1000, 1000), got)
	got, err = e.srv.Check(ctx, login)
	require.NoError(t, err)
	assertProtoEqual(t, resp(false, 2, 0, 2, 1000, 1000, 1000), got)

	// hits travels with the policy: 0 peeks.
	got, err = e.srv.Check(ctx, &pb.CheckRequest{Key: "user:2", Policy: "search", Hits: ptr(int64(0))})
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 100, 100, 0, 0, 0, 40_000), got)
	assert.Equal(t, 1, e.store.Stats().LogKeys+e.store.Stats().CounterKeys, "a peek creates no state")
}

func TestCheckByPolicyRefusesMixesAndUnknownNames(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		req   *pb.CheckRequest
		field string
		text  string
	}{
		{"limit too", &pb.CheckRequest{Key: "k", Policy: "login", Limit: 5}, "limit", `must not be given with policy "login"`},
		{"window too", &pb.CheckRequest{Key: "k", Policy: "login", WindowMs: 1000}, "window_ms", "must not be given"},
		{"algorithm too", &pb.CheckRequest{Key: "k", Policy: "search", Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG}, "algorithm", "must not be given"},
		{"unknown algorithm", &pb.CheckRequest{Key: "k", Policy: "search", Algorithm: 9}, "algorithm", "unknown value 9"},
		{"unknown policy", &pb.CheckRequest{Key: "k", Policy: "logn"}, "policy", `unknown policy "logn"`},
		{"hits over the policy's limit", &pb.CheckRequest{Key: "k", Policy: "login", Hits: ptr(int64(3))}, "hits", "exceeds the limit 2"},
		{"bad key", &pb.CheckRequest{Policy: "login"}, "key", "must not be empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.srv.Check(ctx, c.req)
			requireInvalid(t, err, c.field)
			assert.ErrorContains(t, err, c.text)
		})
	}
	assert.Equal(t, limiter.Stats{}, e.store.Stats(), "nothing was decided")

	none := newEnv(t)
	_, err := none.srv.Check(ctx, &pb.CheckRequest{Key: "k", Policy: "login"})
	requireInvalid(t, err, "policy")
	assert.ErrorContains(t, err, "this node has no policies")
}

func TestCheckBatchByPolicy(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	out, err := e.srv.CheckBatch(context.Background(), &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{
		{Key: "a", Policy: "login"},
		{Key: "a", Policy: "nope"},
		logReq("a", 2, 1000),
		{Key: "a", Policy: "login", Limit: 1},
		{Key: "a", Policy: "login"},
	}})
	require.NoError(t, err)
	require.Len(t, out.Results, 5)
	assertProtoEqual(t, resp(true, 2, 1, 0, 0, 1000, 1000), out.Results[0].GetResponse())
	assert.Equal(t, "policy", out.Results[1].GetError().GetField())
	assertProtoEqual(t, resp(true, 2, 0, 1, 0, 1000, 1000), out.Results[2].GetResponse())
	assert.Equal(t, "limit", out.Results[3].GetError().GetField())
	assertProtoEqual(t, resp(false, 2, 0, 2, 1000, 1000, 1000), out.Results[4].GetResponse())
}

// The owner never resolves a policy: a forwarded check carrying a name is
// refused, item by item, and what the forwarding node sends carries numbers.
func TestForwardedChecksCarryNumbersNotPolicies(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	peerSrv := peerrpc.NewServer(e.svc.Peer)
	out, err := peerSrv.Forward(context.Background(), &pb.ForwardRequest{Origin: "n2", Checks: []*pb.CheckRequest{
		{Key: "a", Policy: "login"},
		logReq("a", 2, 1000),
	}})
	require.NoError(t, err)
	require.Len(t, out.Results, 2)
	assert.Equal(t, uint32(codes.InvalidArgument), out.Results[0].GetError().GetCode())
	assert.Equal(t, "policy", out.Results[0].GetError().GetField())
	assert.True(t, out.Results[1].GetResponse().GetAllowed())

	p, err := e.svc.Policy("login")
	require.NoError(t, err)
	wire := protoconv.ToProtoRequest(p.Request("a", 1))
	assert.Empty(t, wire.GetPolicy())
	assert.EqualValues(t, 2, wire.GetLimit())
	assert.EqualValues(t, 1000, wire.GetWindowMs())
	assert.Equal(t, pb.Algorithm_SLIDING_WINDOW_LOG, wire.GetAlgorithm())
}

func TestCheckByPolicyOverGRPC(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies))
	c := pb.NewRateLimiterClient(e.serveGRPC(t))
	got, err := c.Check(context.Background(), &pb.CheckRequest{Key: "g", Policy: "login"})
	require.NoError(t, err)
	assertProtoEqual(t, resp(true, 2, 1, 0, 0, 1000, 1000), got)
	_, err = c.Check(context.Background(), &pb.CheckRequest{Key: "g", Policy: "absent"})
	requireInvalid(t, err, "policy")
}

func TestInlineField(t *testing.T) {
	assert.Equal(t, "", route.InlineField(0, 0, false))
	assert.Equal(t, "limit", route.InlineField(1, 1, true))
	assert.Equal(t, "window_ms", route.InlineField(0, -1, true))
	assert.Equal(t, "algorithm", route.InlineField(0, 0, true))
}
