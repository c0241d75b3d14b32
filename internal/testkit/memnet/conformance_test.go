package memnet_test

import (
	"testing"

	"github.com/peerlimit/peerlimit/internal/testkit/memnet"
	"github.com/peerlimit/peerlimit/internal/testkit/peertest"
	"github.com/peerlimit/peerlimit/peer"
)

// memnet keeps the peer protocol's contract, as peerrpc does over gRPC.
func TestConformance(t *testing.T) {
	peertest.Conformance(t, func(t *testing.T) peertest.Transport {
		n := memnet.New(1, timeout)
		t.Cleanup(n.Close)
		return peertest.Transport{
			Serve: func(_ *testing.T, id string, h peer.Handler) peer.Route {
				n.Join(id).Serve(h)
				return peer.Route{ID: id, Addr: id + ":9090"}
			},
			Caller: func(_ *testing.T, id string) peer.Peers { return n.Join(id) },
			Absent: func(*testing.T) peer.Route { return peer.Route{ID: "gone"} },
		}
	})
}
