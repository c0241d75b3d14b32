package node_test

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A node serves before it joins (its peers call it the moment they see
// it), so the public API is up while the join is under way: a Members
// call then answers with what the node knows, this node alone, rather
// than panic on a membership not made yet (it did, caught by the
// handler's recover: jepsen-lite's restart of the whole cluster asked
// it). The seed here accepts the join's connection and never answers,
// which holds the join for memberlist's TCP timeout.
func TestMembersAnswersWhileTheJoinIsUnderWay(t *testing.T) {
	seed := silentSeed(t)
	grpcAddr := freeAddr(t)
	cfg := node.DefaultLocalConfig("n1")
	cfg.GRPCAddr, cfg.Join = grpcAddr, []string{seed}
	cfg.GossipProfile = cluster.ProfileLAN // a join held 2 s (memberlist's TCPTimeout), not the local profile's 0.5 s
	cfg.Logger = slog.New(slog.NewTextHandler(testlog.New(t), nil))

	started := make(chan *node.Node, 1)
	go func() {
		n, err := node.Start(cfg)
		assert.NoError(t, err)
		started <- n
	}()
	t.Cleanup(func() {
		if n := <-started; n != nil {
			n.Kill()
		}
	})

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	cl := pb.NewRateLimiterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cl.Members(ctx, &pb.MembersRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err, "asked while joining")
	select {
	case n := <-started:
		started <- n
		t.Fatal("the join was over before the call: the test asked nothing while joining")
	default:
	}
	assert.Equal(t, "n1", resp.Self)
	require.NotEmpty(t, resp.Members)
	assert.Equal(t, "n1", resp.Members[0].Id)
}

// silentSeed listens on loopback, accepts connections and never writes:
// a join through it waits until its timeout.
func silentSeed(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// freeAddr returns a loopback address nothing listens on, for a server
// whose address the test must know before it starts.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
