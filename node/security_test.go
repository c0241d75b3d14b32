package node_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/protoconv"
	"github.com/peerlimit/peerlimit/internal/testkit/testcerts"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/security"
)

const (
	secToken  = "api-token-0123456789abcdef"
	secSecret = "cluster-secret-0123456789abcdef"
	peerName  = "peerlimit-peer"
)

// hardened is the PKI of a cluster with every protection on: TLS, peer
// mTLS, a cluster secret, client certificates required and an API token.
// Node certificates (server and peer) come from the node CA; applications'
// from the client CA.
type hardened struct {
	nodeCA, clientCA *testcerts.CA
	app              testcerts.Pair // an application's client certificate
}

func newHardened(t *testing.T) *hardened {
	h := &hardened{nodeCA: testcerts.NewCA(t, "nodes"), clientCA: testcerts.NewCA(t, "clients")}
	h.app = h.clientCA.Issue(t, testcerts.Leaf{Name: "app", Client: true})
	return h
}

// edit gives each node its own certificates, issued for its id.
func (h *hardened) edit(t *testing.T) func(*node.Config) {
	return func(c *node.Config) {
		srv := h.nodeCA.Issue(t, testcerts.Leaf{Name: c.ID + "-server", IPs: testcerts.Loopback, Server: true})
		peer := h.nodeCA.Issue(t, testcerts.Leaf{Name: c.ID + "-peer", DNSNames: []string{peerName}})
		s := &c.Security
		s.TLSCertFile, s.TLSKeyFile = srv.CertFile, srv.KeyFile
		s.PeerCAFile, s.PeerCertFile, s.PeerKeyFile = h.nodeCA.File, peer.CertFile, peer.KeyFile
		s.ClientCAFile, s.RequireClientCert = h.clientCA.File, true
		s.ClusterSecrets = [][]byte{[]byte(secSecret)}
		s.APITokens = []string{secToken}
	}
}

// appTLS is an application's TLS: the node CA as root, and its client
// certificate unless withCert is false.
func (h *hardened) appTLS(t *testing.T, withCert bool) *tls.Config {
	t.Helper()
	cert, key := h.app.CertFile, h.app.KeyFile
	if !withCert {
		cert, key = "", ""
	}
	c, err := client.LoadTLS(h.nodeCA.File, cert, key, "")
	require.NoError(t, err)
	return c
}

func dialWith(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func withToken(token string) context.Context {
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return ctx
}

// keyOwnedBy returns a key whose owner, in n's ring, is id.
// peekCount reads key's count straight from n's store.
func peekCount(t *testing.T, n *node.Node, key string, window time.Duration) int64 {
	t.Helper()
	d, err := n.Store().Check(time.Now(), limiter.Request{Key: key, Limit: 1000, Window: window, Hits: 0})
	require.NoError(t, err)
	return d.CurrentCount
}

func TestHardenedCluster(t *testing.T) {
	h := newHardened(t)
	c := testcluster.New(t, 3, h.edit(t))
	nodes := c.Live()

	t.Run("forwarded checks over mTLS are exact", func(t *testing.T) {
		apis := make([]pb.RateLimiterClient, len(nodes))
		for i, n := range nodes {
			apis[i] = pb.NewRateLimiterClient(dialWith(t, n.GRPCAddr(), credentials.NewTLS(h.appTLS(t, true))))
		}
		const limit = 6
		for i, owner := range nodes {
			key := keyOwnedBy(t, nodes[0], owner.ID(), "tls")
			allowed := 0
			for r := range limit + 3 {
				via := (i + 1 + r%2) % len(nodes) // the two others, in turn
				resp, err := apis[via].Check(withToken(secToken), &pb.CheckRequest{Key: key, Limit: limit, WindowMs: hourish.Milliseconds(),
					Algorithm: pb.Algorithm_SLIDING_WINDOW_LOG})
				require.NoError(t, err)
				assert.Equal(t, owner.ID(), resp.Owner, "forwarded to and decided by the owner")
				assert.False(t, resp.Degraded, "the forward over mTLS went through")
				if resp.Allowed {
					allowed++
				}
			}
			assert.Equal(t, limit, allowed, "key %s owned by %s", key, owner.ID())
		}
	})

	t.Run("HTTPS API forwards too", func(t *testing.T) {
		tr := &http.Transport{TLSClientConfig: h.appTLS(t, true)}
		t.Cleanup(tr.CloseIdleConnections)
		hc := &http.Client{Transport: tr}
		key := keyOwnedBy(t, nodes[0], nodes[2].ID(), "https")
		for i := range 4 {
			code, out := doHTTP(t, hc, "https://"+nodes[0].HTTPAddr()+"/v1/check", secToken, fmt.Sprintf(`{"key":%q,"limit":3,"window_ms":60000}`, key))
			require.Equal(t, http.StatusOK, code, "%v", out)
			assert.Equal(t, i < 3, out["allowed"])
			assert.Equal(t, nodes[2].ID(), out["owner"])
			assert.Equal(t, false, out["degraded"])
		}
	})

	t.Run("the Go client over TLS with a token", func(t *testing.T) {
		cl, err := client.New(context.Background(), client.Config{Endpoints: []string{nodes[1].GRPCAddr()},
			TLS: h.appTLS(t, true), Token: secToken})
		require.NoError(t, err)
		defer cl.Close()
		for i := range 4 {
			d, err := cl.Check(context.Background(), "client:tls", client.Limit{Limit: 3, Window: time.Minute})
			require.NoError(t, err)
			assert.Equal(t, i < 3, d.Allowed)
			assert.False(t, d.Degraded)
		}

		bad, err := client.New(context.Background(), client.Config{Endpoints: []string{nodes[1].GRPCAddr()},
			TLS: h.appTLS(t, true), Token: "wrong-token-0123456789abcdef"})
		require.NoError(t, err)
		defer bad.Close()
		_, err = bad.Check(context.Background(), "client:tls", client.Limit{Limit: 3, Window: time.Minute})
		assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	})

	t.Run("bearer token and client certificate over gRPC", func(t *testing.T) {
		withCert := pb.NewRateLimiterClient(dialWith(t, nodes[0].GRPCAddr(), credentials.NewTLS(h.appTLS(t, true))))
		noCert := pb.NewRateLimiterClient(dialWith(t, nodes[0].GRPCAddr(), credentials.NewTLS(h.appTLS(t, false))))
		req := &pb.CheckRequest{Key: "grpc:auth", Limit: 100, WindowMs: 60_000}
		for _, c := range []struct {
			name  string
			api   pb.RateLimiterClient
			token string
			want  codes.Code
		}{
			{"no token", withCert, "", codes.Unauthenticated},
			{"wrong token", withCert, "wrong-token-0123456789abcdef", codes.Unauthenticated},
			{"token but no client certificate", noCert, secToken, codes.Unauthenticated},
			{"token and certificate", withCert, secToken, codes.OK},
		} {
			_, err := c.api.Check(withToken(c.token), req)
			assert.Equal(t, c.want, status.Code(err), "%s: %v", c.name, err)
		}
		// Probes need neither.
		_, err := healthpb.NewHealthClient(dialWith(t, nodes[0].GRPCAddr(), credentials.NewTLS(h.appTLS(t, false)))).
			Check(context.Background(), &healthpb.HealthCheckRequest{})
		assert.NoError(t, err)
	})

	t.Run("bearer token and client certificate over HTTPS", func(t *testing.T) {
		url := "https://" + nodes[1].HTTPAddr()
		body := `{"key":"http:auth","limit":100,"window_ms":60000}`
		withCert := &http.Transport{TLSClientConfig: h.appTLS(t, true)}
		noCert := &http.Transport{TLSClientConfig: h.appTLS(t, false)}
		t.Cleanup(withCert.CloseIdleConnections)
		t.Cleanup(noCert.CloseIdleConnections)
		for _, c := range []struct {
			name, path, token, body string
			tr                      *http.Transport
			want                    int
		}{
			{"no token", "/v1/check", "", body, withCert, http.StatusUnauthorized},
			{"wrong token", "/v1/check", "wrong-token-0123456789abcdef", body, withCert, http.StatusUnauthorized},
			{"no client certificate", "/v1/check", secToken, body, noCert, http.StatusUnauthorized},
			{"members need credentials", "/v1/members", "", "", withCert, http.StatusUnauthorized},
			{"token and certificate", "/v1/check", secToken, body, withCert, http.StatusOK},
			{"healthz is open", "/healthz", "", "", noCert, http.StatusOK},
			{"metrics are open by default", "/metrics", "", "", noCert, http.StatusOK},
		} {
			code, out := doHTTP(t, &http.Client{Transport: c.tr}, url+c.path, c.token, c.body)
			assert.Equal(t, c.want, code, "%s: %v", c.name, out)
		}
	})

	t.Run("a plaintext client is told the port needs TLS", func(t *testing.T) {
		cl, err := client.New(context.Background(), client.Config{Endpoints: []string{nodes[0].GRPCAddr()},
			Token: secToken, TokenWithoutTLS: true, AttemptTimeout: 2 * time.Second})
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = cl.Check(ctx, "plain", client.Limit{Limit: 1, Window: time.Second})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "this port requires TLS")

		resp, err := http.Post("http://"+nodes[0].HTTPAddr()+"/v1/check", "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Contains(t, string(b), "HTTPS")

		_, err = client.New(context.Background(), client.Config{Endpoints: []string{nodes[0].GRPCAddr()}, Token: secToken})
		require.Error(t, err, "a token is not sent in clear unless asked to")
		assert.Contains(t, err.Error(), "transport level security")
	})

	t.Run("peers outside the cluster cannot forward or hand off", func(t *testing.T) {
		target := nodes[0]
		key := keyOwnedBy(t, target, target.ID(), "intruded")
		fwd := &pb.ForwardRequest{Checks: []*pb.CheckRequest{{Key: key, Limit: 100, WindowMs: 60_000}}}
		handoff := &pb.HandoffRequest{States: []*pb.KeyState{protoconv.ToProtoKeyState(limiter.KeyState{Key: key, Window: time.Minute,
			WindowID: time.Now().UnixMilli() / 60_000, Curr: 50})}}
		call := func(conn *grpc.ClientConn, origin string, md ...string) (fwdErr, handoffErr error) {
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), md...), 5*time.Second)
			defer cancel()
			fwd.Origin, handoff.Origin = origin, origin
			_, fwdErr = pb.NewPeerClient(conn).Forward(ctx, fwd)
			_, handoffErr = pb.NewPeerClient(conn).Handoff(ctx, handoff)
			return fwdErr, handoffErr
		}
		secretMD := []string{security.PeerTokenKey, security.PeerToken([]byte(secSecret), "node-1")}
		peerDial := func(cert testcerts.Pair, roots *testcerts.CA) *tls.Config {
			pool := x509.NewCertPool()
			b, err := os.ReadFile(roots.File)
			require.NoError(t, err)
			pool.AppendCertsFromPEM(b)
			kp, err := tls.LoadX509KeyPair(cert.CertFile, cert.KeyFile)
			require.NoError(t, err)
			// Sent whatever CAs the server asks for: an attacker would.
			return &tls.Config{RootCAs: pool, ServerName: peerName,
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }}
		}

		// A certificate from another CA, naming the peer role: the
		// handshake fails.
		stranger := testcerts.NewCA(t, "stranger")
		forged := stranger.Issue(t, testcerts.Leaf{Name: "forged", DNSNames: []string{peerName}})
		fe, he := call(dialWith(t, target.GRPCAddr(), credentials.NewTLS(peerDial(forged, h.nodeCA))), "node-1", secretMD...)
		assert.Equal(t, codes.Unavailable, status.Code(fe), "%v", fe)
		assert.Equal(t, codes.Unavailable, status.Code(he), "%v", he)

		// An application's certificate with the cluster secret: not a peer.
		fe, he = call(dialWith(t, target.GRPCAddr(), credentials.NewTLS(h.appTLS(t, true))), "node-1", secretMD...)
		assert.Equal(t, codes.Unauthenticated, status.Code(fe), "%v", fe)
		assert.Equal(t, codes.Unauthenticated, status.Code(he), "%v", he)

		// A genuine peer certificate without the secret, claiming a member.
		rogue := h.nodeCA.Issue(t, testcerts.Leaf{Name: "rogue", DNSNames: []string{peerName}})
		rogueConn := dialWith(t, target.GRPCAddr(), credentials.NewTLS(peerDial(rogue, h.nodeCA)))
		fe, he = call(rogueConn, "node-1", security.PeerTokenKey, security.PeerToken([]byte("wrong-secret-0123456789"), "node-1"))
		assert.Equal(t, codes.Unauthenticated, status.Code(fe), "%v", fe)
		assert.Equal(t, codes.Unauthenticated, status.Code(he), "%v", he)

		// Every credential, through the real sender path (rpc.Peers), but
		// not a member: refused with PermissionDenied.
		intruder := intruderPeers(t, h, "intruder")
		route := peer.Route{ID: target.ID(), Addr: target.GRPCAddr()}
		_, _, err := intruder.Forward(context.Background(), route, limiter.Request{Key: key, Limit: 100, Window: time.Minute, Hits: 1})
		assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		_, _, err = intruder.Handoff(context.Background(), route, peer.Handoff{Sent: time.Now(), States: []limiter.KeyState{{Key: key, Window: time.Minute,
			WindowID: time.Now().UnixMilli() / 60_000, Curr: 50}}})
		assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

		assert.Zero(t, peekCount(t, target, key, time.Minute), "no refused call changed the owner's state")

		// The control: the same kind of connection from a member works.
		member := intruderPeers(t, h, "node-1")
		res, _, err := member.Forward(context.Background(), route, limiter.Request{Key: key, Limit: 100, Window: time.Minute, Hits: 1})
		require.NoError(t, err)
		assert.Equal(t, target.ID(), res.Owner)
		assert.EqualValues(t, 1, peekCount(t, target, key, time.Minute))
	})

	t.Run("renewed certificates apply on reload", func(t *testing.T) {
		n := nodes[1]
		serial := func() string {
			t.Helper()
			var got string
			cfg := h.appTLS(t, true)
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				got = cs.PeerCertificates[0].SerialNumber.String()
				return nil
			}
			_, err := healthpb.NewHealthClient(dialWith(t, n.GRPCAddr(), credentials.NewTLS(cfg))).
				Check(context.Background(), &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			return got
		}
		before := serial()
		renewed := h.nodeCA.Issue(t, testcerts.Leaf{Name: n.ID() + "-server", IPs: testcerts.Loopback, Server: true}) // same files
		require.NoError(t, n.Reload())
		assert.NotEqual(t, before, serial())
		assert.Equal(t, renewed.Cert.SerialNumber.String(), serial())

		require.NoError(t, os.WriteFile(renewed.KeyFile, []byte("not a key"), 0o600))
		err := n.Reload()
		require.Error(t, err)
		assert.Contains(t, err.Error(), renewed.CertFile, "the error names the file")
		assert.Equal(t, renewed.Cert.SerialNumber.String(), serial(), "a broken file keeps the certificate in use")
	})
}

// intruderPeers is the sender side of a process that holds a peer
// certificate and the cluster secret, calling itself id.
func intruderPeers(t *testing.T, h *hardened, id string) *peerrpc.Peers {
	t.Helper()
	srv := h.nodeCA.Issue(t, testcerts.Leaf{Name: id + "-x-server", IPs: testcerts.Loopback, Server: true})
	peer := h.nodeCA.Issue(t, testcerts.Leaf{Name: id + "-x-peer", DNSNames: []string{peerName}})
	tl, err := security.LoadTLS(security.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, PeerCAFile: h.nodeCA.File,
		PeerCertFile: peer.CertFile, PeerKeyFile: peer.KeyFile, PeerServerName: peerName})
	require.NoError(t, err)
	pa, err := security.NewPeerAuth(security.PeerAuthConfig{SelfID: id, RequireCert: true, Secrets: [][]byte{[]byte(secSecret)}})
	require.NoError(t, err)
	cfg := peerrpc.DefaultConfig()
	cfg.BatchLimit, cfg.Timeout = 1, 5*time.Second
	p, err := peerrpc.NewPeers(cfg, id, nil,
		grpc.WithTransportCredentials(credentials.NewTLS(tl.PeerDialConfig())), grpc.WithPerRPCCredentials(pa.Credentials()))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func doHTTP(t *testing.T, hc *http.Client, url, token, body string) (int, map[string]any) {
	t.Helper()
	method := http.MethodGet
	if body != "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	_ = json.Unmarshal(raw, &out) // /metrics is text
	return resp.StatusCode, out
}

// Without TLS, the cluster secret alone keeps strangers out of the Peer
// service: a process with another secret is Unauthenticated, one with the
// secret that is not a member PermissionDenied, and neither changes state.
func TestClusterSecretKeepsStrangersOut(t *testing.T) {
	c := testcluster.New(t, 2, func(cfg *node.Config) { cfg.Security.ClusterSecrets = [][]byte{[]byte(secSecret)} })
	target := c.Node(0)
	key := keyOwnedBy(t, target, target.ID(), "secret")
	route := peer.Route{ID: target.ID(), Addr: target.GRPCAddr()}
	sender := func(id, secret string) *peerrpc.Peers {
		pa, err := security.NewPeerAuth(security.PeerAuthConfig{SelfID: id, Secrets: [][]byte{[]byte(secret)}})
		require.NoError(t, err)
		cfg := peerrpc.DefaultConfig()
		cfg.BatchLimit, cfg.Timeout = 1, 5*time.Second
		p, err := peerrpc.NewPeers(cfg, id, nil, grpc.WithPerRPCCredentials(pa.Credentials()))
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	state := peer.Handoff{Sent: time.Now(), States: []limiter.KeyState{{Key: key, Window: time.Minute, WindowID: time.Now().UnixMilli() / 60_000, Curr: 50}}}
	req := limiter.Request{Key: key, Limit: 100, Window: time.Minute, Hits: 1}
	for _, s := range []struct {
		name, id, secret string
		want             codes.Code
	}{
		{"another cluster's secret, a member's id", c.Node(1).ID(), "another-secret-0123456789", codes.Unauthenticated},
		{"the secret, not a member", "stranger", secSecret, codes.PermissionDenied},
	} {
		p := sender(s.id, s.secret)
		_, _, err := p.Forward(context.Background(), route, req)
		assert.Equal(t, s.want, status.Code(err), "%s: forward: %v", s.name, err)
		_, _, err = p.Handoff(context.Background(), route, state)
		assert.Equal(t, s.want, status.Code(err), "%s: handoff: %v", s.name, err)
	}
	assert.Zero(t, peekCount(t, target, key, time.Minute))

	// Plain gRPC with no credential at all.
	_, err := pb.NewPeerClient(dialWith(t, target.GRPCAddr(), insecure.NewCredentials())).
		Forward(context.Background(), &pb.ForwardRequest{Origin: c.Node(1).ID(), Checks: []*pb.CheckRequest{{Key: key, Limit: 1, WindowMs: 1000}}})
	assert.Equal(t, codes.Unauthenticated, status.Code(err))

	// The member itself forwards fine.
	resp, err := apiClient(t, c.Node(1)).Check(context.Background(), &pb.CheckRequest{Key: key, Limit: 100, WindowMs: 60_000})
	require.NoError(t, err)
	assert.False(t, resp.Degraded)
	assert.Equal(t, target.ID(), resp.Owner)
	assert.EqualValues(t, 1, peekCount(t, target, key, time.Minute))
}

// A leaving node hands its keys off after the others have dropped it from
// their membership: the peer grace is what lets it.
func TestGracefulLeaveWithPeerAuthHandsCountsToHeirs(t *testing.T) {
	c := testcluster.New(t, 3, func(cfg *node.Config) { cfg.Security.ClusterSecrets = [][]byte{[]byte(secSecret)} })
	keys := manyKeys(300)
	consume(t, c.Live(), keys, 3)
	c.Leave(1)
	c.WaitConverged()
	waitCounts(t, c, c.Node(0), keys, 3)
}

// rotationFiles are one node's keyring and cluster secret files.
type rotationFiles struct{ keyring, secrets string }

func writeLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
}

// TestRollingRotationOfGossipKeysAndClusterSecrets rotates the gossip key
// and the cluster secret of a running 3-node cluster in the documented
// three steps (add the new one everywhere, make it primary everywhere,
// remove the old one everywhere), one node at a time with Reload.
// Through every intermediate state no member logs a packet it could not
// decrypt (memberlist logs each one at once: the precise signal of a key
// mismatch), every node keeps seeing all three members alive, and forwards
// to every owner go through (not degraded). Then a node with only the new
// key joins, and a node put back on the old key alone drops out: the
// rotation took effect, and the decryption signal does fire.
func TestRollingRotationOfGossipKeysAndClusterSecrets(t *testing.T) {
	const (
		oldKey    = "b2xkLWdvc3NpcC1rZXkxNg==" // "old-gossip-key16"
		newKey    = "bmV3LWdvc3NpcC1rZXkxNg==" // "new-gossip-key16"
		oldSecret = "old-cluster-secret-0123456789"
		newSecret = "new-cluster-secret-0123456789"
		// Ten gossip intervals and two or three probes of the local
		// profile: every member exchanges packets with every other.
		window = 500 * time.Millisecond
	)
	dir := t.TempDir()
	files := map[string]rotationFiles{}
	var undecryptable atomic.Int64
	c := testcluster.New(t, 3, func(cfg *node.Config) {
		f := rotationFiles{keyring: filepath.Join(dir, cfg.ID+".keyring"), secrets: filepath.Join(dir, cfg.ID+".secrets")}
		writeLines(t, f.keyring, oldKey)
		writeLines(t, f.secrets, oldSecret)
		files[cfg.ID] = f // start runs on the test goroutine
		cfg.Security.GossipKeyringFile, cfg.Security.ClusterSecretFile = f.keyring, f.secrets
		cfg.Logger = slog.New(decryptFailures{Handler: cfg.Logger.Handler(), n: &undecryptable})
	})
	nodes := c.Live()
	apis := make([]pb.RateLimiterClient, len(nodes))
	for i, n := range nodes {
		apis[i] = apiClient(t, n)
	}
	owned := make([]string, len(nodes))
	for i, n := range nodes {
		owned[i] = keyOwnedBy(t, nodes[0], n.ID(), "rot")
	}

	// healthy: nothing undecryptable, every node sees all three members,
	// and every node's forwards to every owner are decided by that owner.
	healthy := func() (bool, string) {
		if n := undecryptable.Load(); n > 0 {
			return false, fmt.Sprintf("%d gossip messages could not be decrypted", n)
		}
		for _, n := range nodes {
			if got := len(n.Members()); got != len(nodes) {
				return false, fmt.Sprintf("%s sees %d members", n.ID(), got)
			}
		}
		for i := range nodes {
			for j, key := range owned {
				resp, err := apis[i].Check(context.Background(), &pb.CheckRequest{Key: key, Limit: 1_000_000, WindowMs: 60_000})
				if err != nil {
					return false, err.Error()
				}
				if resp.Degraded || resp.Owner != nodes[j].ID() {
					return false, fmt.Sprintf("%s → %s: owner %s, degraded %v", nodes[i].ID(), nodes[j].ID(), resp.Owner, resp.Degraded)
				}
			}
		}
		return true, ""
	}
	// holds requires healthy throughout d, polled: gossip must get its
	// chance to carry packets under the new keys.
	holds := func(d time.Duration, what string) {
		t.Helper()
		for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
			ok, why := healthy()
			require.True(t, ok, "%s: %s", what, why)
			if time.Now().After(end) {
				return
			}
		}
	}
	holds(window, "before rotation")

	for _, step := range []struct {
		name    string
		keys    []string
		secrets []string
	}{
		{"1. add the new key", []string{oldKey, newKey}, []string{oldSecret, newSecret}},
		{"2. make it primary", []string{newKey, oldKey}, []string{newSecret, oldSecret}},
		{"3. remove the old key", []string{newKey}, []string{newSecret}},
	} {
		for _, n := range nodes {
			writeLines(t, files[n.ID()].keyring, step.keys...)
			writeLines(t, files[n.ID()].secrets, step.secrets...)
			require.NoError(t, n.Reload(), "%s on %s", step.name, n.ID())
			holds(window, step.name+" on "+n.ID())
		}
	}

	// A newcomer with only the new key and secret joins.
	joinDir := t.TempDir()
	newcomerFiles := rotationFiles{keyring: filepath.Join(joinDir, "keyring"), secrets: filepath.Join(joinDir, "secrets")}
	writeLines(t, newcomerFiles.keyring, newKey)
	writeLines(t, newcomerFiles.secrets, newSecret)
	newcomer := startJoined(t, nodes[0], "newcomer", newcomerFiles)
	c.Eventually(10*time.Second, func() (bool, string) {
		for _, n := range append(nodes, newcomer) {
			if got := len(n.Members()); got != 4 {
				return false, fmt.Sprintf("%s sees %d members, want 4", n.ID(), got)
			}
		}
		return true, ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, newcomer.Shutdown(ctx))
	c.WaitConverged()
	require.Zero(t, undecryptable.Load())

	// The negative control: node 2 back on the old key alone. Its packets
	// fail to decrypt at once, and the others drop it.
	writeLines(t, files[nodes[2].ID()].keyring, oldKey)
	require.NoError(t, nodes[2].Reload())
	start := time.Now()
	c.Eventually(10*time.Second, func() (bool, string) {
		n := undecryptable.Load()
		return n > 0, "no decryption failure logged"
	})
	t.Logf("first undecryptable packet %s after the stale key", time.Since(start).Round(time.Millisecond))
	c.Eventually(10*time.Second, func() (bool, string) {
		got := len(nodes[0].Members())
		return got == 2, fmt.Sprintf("%s still sees %d members", nodes[0].ID(), got)
	})
	t.Logf("the stale member dropped %s after its reload", time.Since(start).Round(time.Millisecond))
}

// decryptFailures counts log records about gossip it could not decrypt:
// memberlist logs each such packet or stream as an error.
type decryptFailures struct {
	slog.Handler
	n *atomic.Int64
}

func (h decryptFailures) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(strings.ToLower(r.Message), "decrypt") {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h decryptFailures) WithAttrs(a []slog.Attr) slog.Handler {
	return decryptFailures{Handler: h.Handler.WithAttrs(a), n: h.n}
}

func (h decryptFailures) WithGroup(g string) slog.Handler {
	return decryptFailures{Handler: h.Handler.WithGroup(g), n: h.n}
}

// startJoined starts a node with a keyring and a cluster secret file,
// joined through seed.
func startJoined(t *testing.T, seed *node.Node, id string, f rotationFiles) *node.Node {
	t.Helper()
	cfg := node.DefaultLocalConfig(id)
	cfg.Join = []string{seed.GossipAddr()}
	cfg.Peers.Timeout = 5 * time.Second
	cfg.Security.GossipKeyringFile, cfg.Security.ClusterSecretFile = f.keyring, f.secrets
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", id)
	n, err := node.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(n.Kill)
	return n
}

// syncBuffer collects a node's log lines, written from its goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A gRPC port beyond loopback serves Peer calls only to authenticated
// members, or to anyone when the node is told so, loudly (protected
// mode, docs/security.md); on loopback nothing is needed.
func TestPeersBeyondLoopbackOnlyFromMembers(t *testing.T) {
	var logs syncBuffer
	config := func(id string, edit func(*node.Config)) node.Config {
		c := node.DefaultLocalConfig(id)
		c.GRPCAddr = ":0" // every interface
		c.Logger = slog.New(slog.NewJSONHandler(io.MultiWriter(&logs, testlog.New(t)), &slog.HandlerOptions{Level: slog.LevelWarn}))
		if edit != nil {
			edit(&c)
		}
		return c
	}
	start := func(cfg node.Config) *node.Node {
		t.Helper()
		n, err := node.Start(cfg)
		require.NoError(t, err)
		t.Cleanup(n.Kill)
		return n
	}
	// A Peer call from a process that is no member, with no credentials,
	// on the bound port over loopback.
	strangerForward := func(n *node.Node) error {
		t.Helper()
		_, port, err := net.SplitHostPort(n.GRPCAddr())
		require.NoError(t, err)
		_, err = pb.NewPeerClient(dialWith(t, net.JoinHostPort("127.0.0.1", port), insecure.NewCredentials())).
			Forward(context.Background(), &pb.ForwardRequest{Origin: "stranger", Checks: []*pb.CheckRequest{{Key: "k", Limit: 1, WindowMs: 1000}}})
		return err
	}

	// Nothing set: refused before anything binds, the address's field named
	// with every way out.
	_, err := node.Start(config("closed", nil))
	var fe *field.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "GRPCAddr", fe.Path)
	assert.Contains(t, fe.Reason, `":0", beyond loopback`)
	for _, way := range []string{"Security.ClusterSecretFile", "Security.ClusterSecrets", "Security.PeerCAFile", "Security.OpenPeers"} {
		assert.Contains(t, fe.Reason, field.Ref(way))
	}

	// A cluster secret: it starts, and the stranger is refused.
	secured := start(config("secured", func(c *node.Config) { c.Security.ClusterSecrets = [][]byte{[]byte(secSecret)} }))
	assert.Equal(t, codes.Unauthenticated, status.Code(strangerForward(secured)))
	assert.NotContains(t, logs.String(), "INSECURE")

	// The opt-out: it starts, says so at WARN, and the stranger is served.
	open := start(config("open", func(c *node.Config) { c.Security.OpenPeers = true }))
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["level"] == "WARN" && strings.HasPrefix(rec["msg"].(string), "INSECURE: Peer calls are open to anyone") {
			warned = true
			assert.Equal(t, ":0", rec["grpc_addr"])
			assert.Equal(t, "open", rec["node"])
		}
	}
	assert.True(t, warned, "a WARN at start that Peer calls are open:\n%s", logs.String())
	assert.NoError(t, strangerForward(open))

	// The opt-out with peer authentication would open nothing: refused.
	err = config("both", func(c *node.Config) {
		c.Security.OpenPeers, c.Security.ClusterSecrets = true, [][]byte{[]byte(secSecret)}
	}).Validate()
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "Security.OpenPeers", fe.Path)

	// Production defaults (:9090) validate once peers authenticate; local
	// ones need nothing.
	prod := node.DefaultConfig()
	require.ErrorAs(t, prod.Validate(), &fe)
	assert.Equal(t, "GRPCAddr", fe.Path)
	prod.Security.ClusterSecrets = [][]byte{[]byte(secSecret)}
	assert.NoError(t, prod.Validate())
	assert.NoError(t, node.DefaultLocalConfig("local").Validate())

	// Loopback needs nothing.
	start(config("loopback", func(c *node.Config) { c.GRPCAddr = "127.0.0.1:0" }))
	for addr, loopback := range map[string]bool{
		"127.0.0.1:9090": true, "127.1.2.3:9090": true, "[::1]:9090": true, "[::ffff:127.0.0.1]:9090": true,
		"localhost:9090": true, "LocalHost:9090": true,
		":9090": false, "0.0.0.0:9090": false, "[::]:9090": false, "10.0.0.7:9090": false, "[fe80::1%eth0]:9090": false,
		"peerlimit-0.peerlimit-gossip:9090": false, "localhost.example:9090": false,
	} {
		err := config("addr", func(c *node.Config) { c.GRPCAddr = addr }).Validate()
		if loopback {
			assert.NoError(t, err, addr)
		} else {
			assert.ErrorContains(t, err, "beyond loopback", addr)
		}
	}

	// An authenticated public API needs peer authentication anywhere; its
	// own error says so, once.
	err = config("tokens", func(c *node.Config) { c.Security.APITokens = []string{secToken} }).Validate()
	assert.ErrorContains(t, err, "the Peer service is not")
	assert.NotContains(t, err.Error(), "beyond loopback")
}
