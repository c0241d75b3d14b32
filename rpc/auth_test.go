package rpc_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/internal/testkit/testring"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/partition"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/ring"
	"github.com/peerlimit/peerlimit/route"
	"github.com/peerlimit/peerlimit/rpc"
	"github.com/peerlimit/peerlimit/security"
)

const (
	apiToken = "api-token-0123456789"
	// appToken and opsToken have scopes (package scope); apiToken, none:
	// every scope, as a token file before scopes gave.
	appToken = "app-token-0123456789"
	opsToken = "ops-token-0123456789"
)

var (
	clusterSecret = []byte("cluster-secret-0123456789")
	otherSecret   = []byte("another-clusters-secret-0123")
)

// guarded is node n1 serving both services behind a Guard.
type guarded struct {
	*env
	peerAuth *security.PeerAuth
	reg      *prometheus.Registry
	addr     string
	conn     *grpc.ClientConn
}

func newGuarded(t *testing.T, members ...string) *guarded {
	t.Helper()
	g := &guarded{env: newEnv(t), reg: prometheus.NewRegistry()}
	parsed, err := security.ParseTokenLines([]string{apiToken, appToken + " check,reserve", opsToken + " operator"})
	require.NoError(t, err)
	toks, err := security.NewScopedTokens(parsed)
	require.NoError(t, err)
	g.peerAuth, err = security.NewPeerAuth(security.PeerAuthConfig{SelfID: "n1", Secrets: [][]byte{clusterSecret}})
	require.NoError(t, err)
	g.peerAuth.SetMembers(members)
	rej, err := security.NewRejections(g.reg, slog.New(slog.NewTextHandler(testlog.New(t), nil)))
	require.NoError(t, err)
	guard := &rpc.Guard{Client: security.NewClientAuth(toks, false), Peer: g.peerAuth, Rejections: rej}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(append(rpc.NewStrictCodec().ServerOptions(guard.Unary), grpc.ChainStreamInterceptor(guard.Stream))...)
	pb.RegisterRateLimiterServer(gs, g.srv)
	peerSrv := peerrpc.NewServer(g.svc.Peer)
	peerSrv.Admit = guard.AdmitPeer
	pb.RegisterPeerServer(gs, peerSrv)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	g.addr = lis.Addr().String()
	g.conn, err = grpc.NewClient(g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.conn.Close() })
	return g
}

func (g *guarded) failures(api, reason string) float64 { return authFailures(g.reg, api, reason) }

// authFailures reads one series of peerlimit_auth_failures_total.
func authFailures(reg *prometheus.Registry, api, reason string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "peerlimit_auth_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["api"] == api && l["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func ctxWith(kv ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	return metadata.AppendToOutgoingContext(ctx, kv...), cancel
}

func TestGuardBearerTokenOnThePublicService(t *testing.T) {
	g := newGuarded(t, "n1")
	api := pb.NewRateLimiterClient(g.conn)
	req := &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000}

	for _, c := range []struct {
		name   string
		md     []string
		want   codes.Code
		reason string
	}{
		{"no token", nil, codes.Unauthenticated, "missing_token"},
		{"wrong token", []string{"authorization", "Bearer not-the-token-at-all"}, codes.Unauthenticated, "bad_token"},
		{"not bearer", []string{"authorization", "Basic " + apiToken}, codes.Unauthenticated, "missing_token"},
		{"right token", []string{"authorization", "Bearer " + apiToken}, codes.OK, ""},
	} {
		ctx, cancel := ctxWith(c.md...)
		_, err := api.Check(ctx, req)
		cancel()
		assert.Equal(t, c.want, status.Code(err), "%s: %v", c.name, err)
		if c.reason != "" {
			assert.Contains(t, err.Error(), "token", c.name)
			assert.NotContains(t, err.Error(), apiToken, "a refusal never echoes a credential")
		}
	}
	assert.Equal(t, 2.0, g.failures("grpc", "missing_token"))
	assert.Equal(t, 1.0, g.failures("grpc", "bad_token"))
	d, err := g.store.Check(time.UnixMilli(t0), limiter.Request{Key: "k", Limit: 10, Window: time.Second, Hits: 0})
	require.NoError(t, err)
	assert.EqualValues(t, 1, d.CurrentCount, "only the authorised call counted")

	ctx, cancel := ctxWith()
	defer cancel()
	_, err = api.Members(ctx, &pb.MembersRequest{})
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "every RateLimiter method is guarded")
	_, err = healthpb.NewHealthClient(g.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	assert.NoError(t, err, "health needs no token: probes must work")
}

func TestGuardPeerServiceAdmitsOnlyMembersWithTheSecret(t *testing.T) {
	g := newGuarded(t, "n1", "n2")
	peerClient := pb.NewPeerClient(g.conn)
	fwd := func(origin string, md ...string) error {
		ctx, cancel := ctxWith(md...)
		defer cancel()
		_, err := peerClient.Forward(ctx, &pb.ForwardRequest{Origin: origin, Checks: []*pb.CheckRequest{{Key: "k", Limit: 10, WindowMs: 1000}}})
		return err
	}
	tok := func(secret []byte, id string) []string {
		return []string{security.PeerTokenKey, security.PeerToken(secret, id)}
	}
	count := func() int64 {
		d, err := g.store.Check(time.UnixMilli(t0), limiter.Request{Key: "k", Limit: 10, Window: time.Second, Hits: 0})
		require.NoError(t, err)
		return d.CurrentCount
	}

	for _, c := range []struct {
		name   string
		err    error
		want   codes.Code
		reason string
	}{
		{"no credential", fwd("n2"), codes.Unauthenticated, "missing_peer_token"},
		{"a client's bearer token", fwd("n2", "authorization", "Bearer "+apiToken), codes.Unauthenticated, "missing_peer_token"},
		{"another cluster's secret", fwd("n2", tok(otherSecret, "n2")...), codes.Unauthenticated, "bad_peer_token"},
		{"a member's token, another origin", fwd("n1", tok(clusterSecret, "n2")...), codes.Unauthenticated, "bad_peer_token"},
		{"the secret, not a member", fwd("n3", tok(clusterSecret, "n3")...), codes.PermissionDenied, "not_member"},
	} {
		assert.Equal(t, c.want, status.Code(c.err), "%s: %v", c.name, c.err)
		assert.Positive(t, g.failures("peer", c.reason), c.name)
	}
	assert.Equal(t, 2.0, g.failures("peer", "missing_peer_token"))
	assert.Equal(t, 2.0, g.failures("peer", "bad_peer_token"))
	assert.Equal(t, 1.0, g.failures("peer", "not_member"))
	assert.Zero(t, count(), "no refused forward touched the store")
	long := fwd(strings.Repeat("x", 100_000), tok(clusterSecret, "n2")...)
	assert.Equal(t, codes.Unauthenticated, status.Code(long))
	assert.Less(t, len(status.Convert(long).Message()), 300, "a huge origin is not echoed")
	assert.Equal(t, 3.0, g.failures("peer", "bad_peer_token"))
	require.NoError(t, fwd("n2", tok(clusterSecret, "n2")...))
	assert.EqualValues(t, 1, count())

	// Handoff: state from a stranger is refused and changes nothing.
	handoff := func(origin string) (*pb.HandoffResponse, error) {
		ctx, cancel := ctxWith(tok(clusterSecret, origin)...)
		defer cancel()
		return peerClient.Handoff(ctx, &pb.HandoffRequest{Origin: origin, States: []*pb.KeyState{
			protoconv.ToProtoKeyState(limiter.KeyState{Key: "k", Algorithm: limiter.SlidingWindowCounter,
				Window: time.Second, WindowID: t0 / 1000, Curr: 2}),
		}})
	}
	_, err := handoff("n3")
	assert.Equal(t, codes.PermissionDenied, status.Code(err))
	assert.EqualValues(t, 1, count(), "a refused handoff merged nothing")
	resp, err := handoff("n2")
	require.NoError(t, err)
	assert.EqualValues(t, 1, resp.GetMerged())
	assert.EqualValues(t, 3, count(), "a member's handoff merged")
}

// A forward the owner refuses (here: it does not know the sender yet, as
// when gossip has not reached it) is answered by the sender's fallback,
// marked degraded: never lost, never silently wrong. Once the owner knows
// the sender, forwards go through.
func TestRefusedForwardFallsBackUntilTheOwnerKnowsTheSender(t *testing.T) {
	owner := newGuarded(t, "n1") // does not know n2 yet
	pa, err := security.NewPeerAuth(security.PeerAuthConfig{SelfID: "n2", Secrets: [][]byte{clusterSecret}})
	require.NoError(t, err)
	peers, err := peerrpc.NewPeers(peerrpc.DefaultConfig(), "n2", nil, grpc.WithPerRPCCredentials(pa.Credentials()))
	require.NoError(t, err)
	t.Cleanup(peers.Close)
	store, err := limiter.New(limiter.DefaultConfig(), partition.DefaultCount)
	require.NoError(t, err)
	ingress, err := route.NewService(route.DefaultConfig(), route.Deps{NodeID: "n2", Store: store, Now: time.Now, Peers: peers,
		Cluster: testring.OwnedBy(t, ring.Member{ID: "n1", Addr: owner.addr}),
		Logger:  slog.New(slog.NewTextHandler(testlog.New(t), nil))})
	require.NoError(t, err)
	req := limiter.Request{Key: "k", Limit: 10, Window: time.Minute, Hits: 1}

	res := ingress.Check(context.Background(), req)
	require.NoError(t, res.Err)
	assert.True(t, res.Degraded)
	assert.Equal(t, "n2", res.Owner, "decided by the fallback on the sender")
	assert.Equal(t, 1.0, owner.failures("peer", "not_member"))

	owner.peerAuth.SetMembers([]string{"n1", "n2"})
	res = ingress.Check(context.Background(), req)
	require.NoError(t, res.Err)
	assert.False(t, res.Degraded)
	assert.Equal(t, "n1", res.Owner)
}

// A ForwardStream is guarded when it opens, by the origin its metadata
// names, and each batch again: a member removed from the membership while
// its stream is open is refused at its next batch, PERMISSION_DENIED, and
// its batch decides nothing.
func TestGuardPeerStreamOnOpenAndEveryBatch(t *testing.T) {
	g := newGuarded(t, "n1", "n2")
	peerClient := pb.NewPeerClient(g.conn)
	batch := func(seq uint64) *pb.ForwardRequest {
		return &pb.ForwardRequest{Origin: "n2", Seq: seq, Checks: []*pb.CheckRequest{{Key: "s", Limit: 10, WindowMs: 60_000}}}
	}
	open := func(md ...string) pb.Peer_ForwardStreamClient {
		ctx, cancel := ctxWith(md...)
		t.Cleanup(cancel)
		s, err := peerClient.ForwardStream(ctx)
		require.NoError(t, err)
		return s
	}

	// No token: refused when the stream opens. Send may find the stream
	// ended already (io.EOF, as grpc-go says); Recv has the status.
	s := open(grpcapi.OriginKey, "n2")
	_ = s.Send(batch(1))
	_, err := s.Recv()
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	// A member with the secret: answered, until it is no longer a member.
	s = open(grpcapi.OriginKey, "n2", security.PeerTokenKey, security.PeerToken(clusterSecret, "n2"))
	require.NoError(t, s.Send(batch(1)))
	resp, err := s.Recv()
	require.NoError(t, err)
	assert.True(t, resp.GetResults()[0].GetResponse().GetAllowed())
	g.peerAuth.SetMembers([]string{"n1"}) // n2 left (this PeerAuth has no grace)
	require.NoError(t, s.Send(batch(2)))
	_, err = s.Recv()
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	d, err := g.store.Check(g.clock.Now(), limiter.Request{Key: "s", Limit: 10, Window: time.Minute})
	require.NoError(t, err)
	assert.EqualValues(t, 1, d.CurrentCount, "only the first batch was decided")
}

// TestGuardTokenScopes: over gRPC as over HTTP, an application's token
// may check and reserve, not refund, charge, reset or inspect, each
// refusal PermissionDenied naming the op or the method (issue 38,
// item 4); an operator's token the other way round.
func TestGuardTokenScopes(t *testing.T) {
	g := newGuarded(t, "n1")
	api := pb.NewRateLimiterClient(g.conn)
	check := &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000}
	refund := &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Op: pb.Op_REFUND, Hits: proto.Int64(1)}
	reserve := &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Op: pb.Op_RESERVE}
	as := func(token string) (context.Context, context.CancelFunc) {
		return ctxWith("authorization", "Bearer "+token)
	}
	denied := func(err error, what string) {
		t.Helper()
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", what, err)
		assert.Contains(t, err.Error(), "needs the token scope", what)
	}

	ctx, cancel := as(appToken)
	defer cancel()
	_, err := api.Check(ctx, check)
	require.NoError(t, err)
	_, err = api.Check(ctx, reserve)
	require.NoError(t, err)
	_, err = api.Check(ctx, refund)
	denied(err, "REFUND")
	assert.Equal(t, "op", grpcapi.Field(status.Convert(err)))
	_, err = api.Reset(ctx, &pb.ResetRequest{Key: "k", WindowMs: 1000})
	denied(err, "Reset")
	_, err = api.Inspect(ctx, &pb.InspectRequest{Key: "k"})
	denied(err, "Inspect")
	_, err = api.Top(ctx, &pb.TopRequest{})
	denied(err, "Top")
	_, err = api.Members(ctx, &pb.MembersRequest{})
	assert.NotEqual(t, codes.PermissionDenied, status.Code(err), "Members needs no scope: clients learn the cluster from it")
	_, err = api.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{check, refund}, AllOrNothing: true})
	denied(err, "an all-or-nothing batch holding a REFUND")
	batch, err := api.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: []*pb.CheckRequest{check, refund}})
	require.NoError(t, err)
	require.NotNil(t, batch.Results[0].GetResponse())
	assert.EqualValues(t, codes.PermissionDenied, batch.Results[1].GetError().GetCode())
	assert.Equal(t, "op", batch.Results[1].GetError().GetField())

	stream, err := api.CheckStream(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&pb.CheckStreamRequest{Seq: 1, Checks: []*pb.CheckRequest{check, refund}}))
	got, err := stream.Recv()
	require.NoError(t, err)
	require.NotNil(t, got.Results[0].GetResponse())
	assert.EqualValues(t, codes.PermissionDenied, got.Results[1].GetError().GetCode(), "a stream keeps its caller's scopes")
	require.NoError(t, stream.CloseSend())

	ctx, cancel = as(opsToken)
	defer cancel()
	_, err = api.Check(ctx, check)
	denied(err, "an operator's CHECK")
	_, err = api.Check(ctx, refund)
	require.NoError(t, err)
	_, err = api.Reset(ctx, &pb.ResetRequest{Key: "k", WindowMs: 1000})
	require.NoError(t, err)

	ctx, cancel = as(apiToken)
	defer cancel()
	_, err = api.Check(ctx, refund)
	require.NoError(t, err, "a token without scopes has them all")
}

// Envoy's rate limit service only checks: a token needs the check scope
// for it, and an operator's token without it is refused.
func TestGuardEnvoyRLSNeedsTheCheckScope(t *testing.T) {
	parsed, err := security.ParseTokenLines([]string{appToken + " check", opsToken + " operator"})
	require.NoError(t, err)
	toks, err := security.NewScopedTokens(parsed)
	require.NoError(t, err)
	rej, err := security.NewRejections(prometheus.NewRegistry(), slog.New(slog.NewTextHandler(testlog.New(t), nil)))
	require.NoError(t, err)
	guard := &rpc.Guard{Client: security.NewClientAuth(toks, false), Rejections: rej}
	info := &grpc.UnaryServerInfo{FullMethod: rpc.EnvoyRLSPrefix + "ShouldRateLimit"}
	called := 0
	handler := func(context.Context, any) (any, error) { called++; return nil, nil }
	call := func(token string) error {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
		_, err := guard.Unary(ctx, nil, info, handler)
		return err
	}
	require.NoError(t, call(appToken))
	err = call(opsToken)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "Envoy's ShouldRateLimit needs the token scope check")
	assert.Equal(t, 1, called)
}
