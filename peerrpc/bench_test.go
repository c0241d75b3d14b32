package peerrpc_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/peerlimit/peerlimit/internal/testkit/grpctest"
	"github.com/peerlimit/peerlimit/internal/wire"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/peerrpc"
)

// allower answers every forwarded check allowed, doing nothing else: what
// is left is the transport's work.
type allower struct{ peer.Handler }

func (allower) HandleForward(_ context.Context, _ string, reqs []limiter.Request) []peer.Result {
	out := make([]peer.Result, len(reqs))
	for i, q := range reqs {
		out[i] = peer.Result{Owner: "b", Decision: limiter.Decision{Allowed: true, Limit: q.Limit, Remaining: q.Limit - q.Hits}}
	}
	return out
}

// BenchmarkForward is one forwarded check through Peers.Forward and a
// node's server (peerrpc.Register, internal/wire's codec) over loopback,
// 16 callers at once, both ends in this process: B/op and allocs/op are
// both ends' per forwarded check (docs/benchmarks.md, "The hop between
// two processes", has the CPU between processes).
func BenchmarkForward(b *testing.B) {
	addr := grpctest.Serve(b, func(gs *grpc.Server) { peerrpc.Register(gs, peerrpc.NewServer(allower{})) },
		grpc.ForceServerCodecV2(wire.Codec))
	p, err := peerrpc.NewPeers(peerrpc.DefaultConfig(), "a", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	to := peer.Route{ID: "b", Addr: addr}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "tenant:7:user:" + strconv.Itoa(i)
	}
	var n atomic.Uint64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := limiter.Request{Key: keys[n.Add(1)%uint64(len(keys))], Limit: 1000, Window: time.Minute, Hits: 1}
			if res, _, err := p.Forward(context.Background(), to, req); err != nil || !res.Decision.Allowed {
				b.Fatal(err, res)
			}
		}
	})
}
