package peerrpc_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/internal/testkit/peertest"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// dropRule drops every packet from src to dst (iptables, as jepsen-lite
// cuts links) until the test ends; it skips the test where iptables
// cannot be changed (not root, no iptables).
func dropRule(t *testing.T, src, dst string) {
	t.Helper()
	rule := []string{"INPUT", "-s", src, "-d", dst, "-j", "DROP"}
	if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
		t.Skipf("skipped, not passed: iptables: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("iptables", append([]string{"-w", "-D"}, rule...)...).CombinedOutput(); err != nil {
			t.Errorf("removing the test's iptables rule: %v: %s", err, out)
		}
	})
}

// A forward in flight on a link that goes dead (every packet dropped, no
// FIN, no RST) fails once its unacknowledged data outlives
// KeepaliveTimeout, not at its own deadline: the sender falls back to a
// relay or its policy at once, and the connection is redialled.
func TestADeadLinkIsNoticedWithinTheKeepaliveTimeout(t *testing.T) {
	// Addresses of this process's own: rules are by address, and other
	// test binaries use loopback aliases too.
	pid := os.Getpid()
	server, client := fmt.Sprintf("127.%d.%d.61", 1+pid/250%250, pid%250), fmt.Sprintf("127.%d.%d.62", 1+pid/250%250, pid%250)
	lis, err := net.Listen("tcp", server+":0")
	require.NoError(t, err)
	gs := grpc.NewServer(peerrpc.DefaultConfig().ServerKeepalive())
	pb.RegisterPeerServer(gs, peerrpc.NewServer(&peertest.Recorder{ID: "owner"}))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	cfg := peerrpc.DefaultConfig()
	cfg.Timeout = 20 * time.Second
	from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(client)}}
	p, err := peerrpc.NewPeers(cfg, "sender", nil, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return from.DialContext(ctx, "tcp", addr)
	}))
	require.NoError(t, err)
	t.Cleanup(p.Close)
	owner := peer.Route{ID: "owner", Addr: lis.Addr().String()}
	req := limiter.Request{Key: "k", Limit: 5, Window: time.Minute, Hits: 1}
	_, _, err = p.Forward(context.Background(), owner, req)
	require.NoError(t, err, "the link works before the cut")

	dropRule(t, client, server)
	dropRule(t, server, client)
	start := time.Now()
	_, _, err = p.Forward(context.Background(), owner, req)
	waited := time.Since(start)
	require.Error(t, err)
	assert.True(t, peer.IsCallError(err), "%v", err)
	assert.Less(t, waited, cfg.Timeout/2, "failed when the link was noticed dead, not at the forward's deadline: %v", err)
	t.Logf("noticed after %s: %v", waited.Round(time.Millisecond), err)
}
