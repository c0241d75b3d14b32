package rpc

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/logging"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/security"
	"github.com/peerlimit/peerlimit/security/scope"
)

// Full method names start with these.
var (
	rateLimiterPrefix = "/" + pb.RateLimiter_ServiceDesc.ServiceName + "/"
	peerPrefix        = "/" + pb.Peer_ServiceDesc.ServiceName + "/"
)

// EnvoyRLSPrefix starts the methods of Envoy's rate limit service
// (package envoyrls), which decides checks like RateLimiter and is guarded
// like it. Spelled out rather than imported, so that this package does not
// depend on Envoy's protos; envoyrls's tests check it.
const EnvoyRLSPrefix = "/envoy.service.ratelimit.v3.RateLimitService/"

// Guard is the gRPC server's access control. The public services
// (peerlimit.v1.RateLimiter, and Envoy's rate limit service when a node
// serves it) answer only calls Client accepts; the
// node-to-node service (peerlimit.v1.Peer) only calls Peer accepts, from
// the origin the request names. Health and reflection stay open: they
// reveal nothing a port scan does not, and probes need them. A nil rule
// leaves its service open.
//
// Refusals are Unauthenticated (missing or wrong credentials) or
// PermissionDenied (a peer with good credentials that is not a member),
// counted and logged by Rejections. Install Unary after the codec's check
// (StrictCodec.ServerOptions), so that a refused call still clears what
// the codec recorded for its message.
type Guard struct {
	Client     *security.ClientAuth
	Peer       *security.PeerAuth
	Rejections *security.Rejections
}

// origin is what both Peer requests say about their sender.
type origin interface{ GetOrigin() string }

// Unary is the unary server interceptor. A public call goes on with the
// caller's scopes in its context (scope.FromContext), for the ops it asks.
func (g *Guard) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	s, err := g.check(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	if s != scope.All { // All is what a context without scopes means
		ctx = scope.WithContext(ctx, s)
	}
	return h(ctx, req)
}

// Stream is the stream server interceptor, guarding a stream when it
// opens like a unary call. A Peer stream names its origin in its metadata
// (grpcapi.OriginKey), since its messages come only after the check; the
// Peer server checks each batch again (PeerServer.Admit, AdmitPeer).
func (g *Guard) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	origin := originOf(grpcapi.FirstValue(ss.Context(), grpcapi.OriginKey))
	s, err := g.check(ss.Context(), info.FullMethod, origin)
	if err != nil {
		return err
	}
	if s != scope.All {
		ss = scopedStream{ss, scope.WithContext(ss.Context(), s)}
	}
	return h(srv, ss)
}

// scopedStream is a stream whose context carries its caller's scopes.
type scopedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s scopedStream) Context() context.Context { return s.ctx }

// originOf is the origin a stream names in its metadata, as a request
// would in its message.
type originOf string

func (o originOf) GetOrigin() string { return string(o) }

// AdmitPeer checks one batch of a Peer stream (ctx is the stream's) from
// origin as a Peer call is checked: its credentials, and that origin is a
// member now.
func (g *Guard) AdmitPeer(ctx context.Context, origin string) error {
	_, err := g.check(ctx, peerPrefix+"ForwardStream", originOf(origin))
	return err
}

// methodScopes are the public methods that need a scope whatever they
// ask: Check, CheckBatch and CheckStream need one per op, which the
// server asks (Server.request); Members needs none beyond a valid token.
// Envoy's calls only check.
var methodScopes = map[string]methodScope{
	rateLimiterPrefix + "Reset":   {scope.Reset, "Reset"},
	rateLimiterPrefix + "Top":     {scope.Inspect, "Top"},
	rateLimiterPrefix + "Inspect": {scope.Inspect, "Inspect"},
}

var envoyScope = methodScope{scope.Check, "Envoy's ShouldRateLimit"}

// methodScope is what a method needs, and how a refusal names it.
type methodScope struct {
	need scope.Set
	what string
}

// check admits a call, or refuses it with the status to answer. A public
// call admitted comes with its caller's scopes; any other with scope.All.
func (g *Guard) check(ctx context.Context, method string, req any) (scope.Set, error) {
	switch {
	case g.Client != nil && (strings.HasPrefix(method, rateLimiterPrefix) || strings.HasPrefix(method, EnvoyRLSPrefix)):
		auth := ""
		if g.Client.NeedsToken() {
			auth = grpcapi.FirstValue(ctx, "authorization")
		}
		ai, p := authInfo(ctx)
		s, r := g.Client.CheckScopes(auth, ai.ClientCert)
		if r != security.OK {
			g.Rejections.Reject(security.APIGRPC, r, "method", method, "remote", remote(p))
			return 0, status.Error(codes.Unauthenticated, "peerlimit: "+r.Message())
		}
		need, ok := methodScopes[method]
		if strings.HasPrefix(method, EnvoyRLSPrefix) {
			need, ok = envoyScope, true
		}
		if ok {
			if err := s.Need(need.need, need.what, ""); err != nil {
				return 0, grpcapi.Status(err).Err()
			}
		}
		return s, nil
	case g.Peer != nil && strings.HasPrefix(method, peerPrefix):
		from := ""
		if o, ok := req.(origin); ok {
			from = o.GetOrigin()
		}
		ai, p := authInfo(ctx)
		if r := g.Peer.Check(from, grpcapi.FirstValue(ctx, security.PeerTokenKey), ai.PeerCert); r != security.OK {
			// The origin is the caller's text: clipped before it is logged
			// or echoed, so a huge one costs nothing downstream.
			shown := logging.Clip(from)
			g.Rejections.Reject(security.APIPeer, r, "method", method, "origin", shown, "remote", remote(p))
			code := codes.Unauthenticated
			if r.Authenticated() {
				code = codes.PermissionDenied
			}
			return 0, status.Errorf(code, "peerlimit: %s (origin %q)", r.Message(), shown)
		}
	}
	return scope.All, nil
}

func authInfo(ctx context.Context) (security.AuthInfo, *grpcpeer.Peer) {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return security.AuthInfo{}, nil
	}
	ai, _ := p.AuthInfo.(security.AuthInfo)
	return ai, p
}

func remote(p *grpcpeer.Peer) string {
	if p == nil || p.Addr == nil {
		return ""
	}
	return p.Addr.String()
}
