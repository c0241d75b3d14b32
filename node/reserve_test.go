package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// reserveLoad is what the callers of TestReservationsOnRealNodesKeepTheBudget
// did to one budget.
type reserveLoad struct {
	admitted, denied, released, retried atomic.Int64
	cost                                atomic.Int64 // what the settles counted
}

// 64 callers reserve random estimates of one budget over real gRPC,
// through all three nodes (two in three forwarded to the owner), and
// settle each admitted one at a random real cost no higher than its
// estimate, or release it; one settle in four is retried over HTTP
// through another node. For both algorithms: no answer and no peek at the
// owner ever shows the budget past its limit, and at the end the owner
// counts exactly what the settles counted.
func TestReservationsOnRealNodesKeepTheBudget(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	seed := rand.Uint64()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("workload seed: %d", seed)
		}
	})
	var clients []pb.RateLimiterClient
	for _, n := range c.Live() {
		clients = append(clients, apiClient(t, n))
	}
	owner := c.Node(1)
	for _, alg := range []pb.Algorithm{pb.Algorithm_SLIDING_WINDOW_COUNTER, pb.Algorithm_SLIDING_WINDOW_LOG} {
		t.Run(alg.String(), func(t *testing.T) {
			// An hour's window: the run stays in one, but for a counter
			// whose window turns meanwhile (checked below).
			base := &pb.CheckRequest{Key: keyOwnedBy(t, c.Node(0), owner.ID(), "budget-"+alg.String()), Limit: 1000,
				WindowMs: hourish.Milliseconds(), Algorithm: alg, Op: pb.Op_RESERVE, TtlMs: 60_000}
			peek := limiter.Request{Key: base.Key, Limit: base.Limit, Window: hourish, Algorithm: limiter.Algorithm(alg)}
			began := time.Now()
			var load reserveLoad
			done := make(chan struct{})
			var peeker sync.WaitGroup
			peeker.Go(func() {
				for {
					select {
					case <-done:
						return
					case <-time.After(time.Millisecond):
					}
					d, err := owner.Store().Check(time.Now(), peek)
					if assert.NoError(t, err) && d.CurrentCount > base.Limit {
						t.Errorf("the owner counts %d, over the limit of %d", d.CurrentCount, base.Limit)
						return
					}
				}
			})
			var wg sync.WaitGroup
			for w := range 64 {
				wg.Go(func() { reserveCaller(t, c, clients, base, rand.New(rand.NewPCG(seed, uint64(w))), &load) })
			}
			wg.Wait()
			close(done)
			peeker.Wait()
			ended := time.Now()

			t.Logf("%d admitted (%d released, %d settles retried), %d denied", load.admitted.Load(), load.released.Load(), load.retried.Load(), load.denied.Load())
			assert.Positive(t, load.denied.Load(), "the callers contended for the budget")
			if alg == pb.Algorithm_SLIDING_WINDOW_COUNTER && began.UnixMilli()/base.WindowMs != ended.UnixMilli()/base.WindowMs {
				t.Skip("the counter's hour turned during the run; its count is weighted now")
			}
			zero := int64(0)
			resp, err := clients[0].Check(context.Background(), &pb.CheckRequest{Key: base.Key, Limit: base.Limit, WindowMs: base.WindowMs, Algorithm: alg, Hits: &zero})
			require.NoError(t, err)
			assert.Equal(t, load.cost.Load(), resp.CurrentCount, "the owner counts exactly what the settles counted")
			assert.Empty(t, owner.Store().Reservations().Open(base.Key, time.Now(), 10), "every reservation closed")
		})
	}
	st := owner.Store().Reservations().Stats()
	assert.Zero(t, st.Unknown+st.Expired, "every settle found its reservation on the owner")
}

// reserveCaller makes 25 reservations of base's budget through random
// nodes, and settles (retrying one in four over HTTP) or releases each
// one admitted.
func reserveCaller(t *testing.T, c *testcluster.Cluster, clients []pb.RateLimiterClient, base *pb.CheckRequest, r *rand.Rand, load *reserveLoad) {
	ctx := context.Background()
	for range 25 {
		req := proto.CloneOf(base)
		req.Hits = ptr(1 + r.Int64N(12))
		resp, err := clients[r.IntN(len(clients))].Check(ctx, req)
		if !assert.NoError(t, err) {
			return
		}
		assert.False(t, resp.Degraded)
		assert.LessOrEqual(t, resp.CurrentCount, base.Limit, "an admission never takes the count past the limit")
		if !resp.Allowed {
			assert.Empty(t, resp.Reservation)
			load.denied.Add(1)
			continue
		}
		load.admitted.Add(1)
		settle := &pb.CheckRequest{Key: base.Key, Limit: base.Limit, WindowMs: base.WindowMs, Algorithm: base.Algorithm,
			Op: pb.Op_SETTLE, Reservation: resp.Reservation, Hits: ptr(r.Int64N(*req.Hits + 1))}
		if r.IntN(5) == 0 {
			settle.Op, settle.Hits = pb.Op_RELEASE, ptr(int64(0))
			load.released.Add(1)
		}
		got, err := clients[r.IntN(len(clients))].Check(ctx, settle)
		if !assert.NoError(t, err) {
			return
		}
		assert.Equal(t, pb.Settled_SETTLED_NOW, got.Settled)
		assert.Equal(t, *req.Hits-*settle.Hits, got.Refunded, "all the cost did not use comes back")
		load.cost.Add(*settle.Hits)
		if r.IntN(4) == 0 {
			load.retried.Add(1)
			again := settleOverHTTP(t, c.Live()[r.IntN(3)], settle)
			assert.Equal(t, "SETTLED_BEFORE", again.Settled, "a retry applies nothing")
			assert.Equal(t, got.Refunded, again.Refunded, "and repeats the answer")
		}
	}
}

func ptr[T any](v T) *T { return &v }

// settleOverHTTP sends req (a SETTLE or RELEASE) to n's POST /v1/check.
func settleOverHTTP(t *testing.T, n *node.Node, req *pb.CheckRequest) httpapi.CheckResponse {
	t.Helper()
	alg := "SLIDING_WINDOW_COUNTER"
	if req.Algorithm == pb.Algorithm_SLIDING_WINDOW_LOG {
		alg = "SLIDING_WINDOW_LOG"
	}
	body, err := json.Marshal(httpapi.CheckRequest{Key: req.Key, Limit: req.Limit, WindowMS: req.WindowMs, Algorithm: alg,
		Hits: req.Hits, Op: req.Op.String(), Reservation: req.Reservation})
	require.NoError(t, err)
	resp, err := http.Post("http://"+n.HTTPAddr()+"/v1/check", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out httpapi.CheckResponse
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// An all-or-nothing batch over real gRPC, with keys of all three nodes:
// refused whole while one key is used up, with nothing counted on the
// other owners; admitted whole once every key fits.
func TestAllOrNothingOnRealNodes(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	cl := apiClient(t, c.Node(0))
	ctx := context.Background()
	var checks []*pb.CheckRequest
	for i, n := range c.Live() {
		checks = append(checks, &pb.CheckRequest{Key: keyOwnedBy(t, c.Node(0), n.ID(), fmt.Sprintf("aon-%d", i)), Limit: 2, WindowMs: hourish.Milliseconds(),
			Algorithm: pb.Algorithm(i % 2)})
	}
	full := checks[2]
	for range 2 {
		resp, err := apiClient(t, c.Node(1)).Check(ctx, full)
		require.NoError(t, err)
		require.True(t, resp.Allowed)
	}
	count := func(req *pb.CheckRequest) int64 {
		zero := int64(0)
		resp, err := cl.Check(ctx, &pb.CheckRequest{Key: req.Key, Limit: req.Limit, WindowMs: req.WindowMs, Algorithm: req.Algorithm, Hits: &zero})
		require.NoError(t, err)
		return resp.CurrentCount
	}
	resp, err := cl.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: checks, AllOrNothing: true})
	require.NoError(t, err)
	for i, r := range resp.Results {
		require.NotNil(t, r.GetResponse(), "item %d: %v", i, r.GetError())
		assert.False(t, r.GetResponse().Allowed, "item %d", i)
	}
	assert.Zero(t, count(checks[0])+count(checks[1]), "nothing counted on the other owners")
	assert.EqualValues(t, 2, count(full))

	checks[2] = &pb.CheckRequest{Key: full.Key + ":fresh", Limit: 2, WindowMs: hourish.Milliseconds()}
	resp, err = cl.CheckBatch(ctx, &pb.CheckBatchRequest{Checks: checks, AllOrNothing: true})
	require.NoError(t, err)
	for i, r := range resp.Results {
		require.NotNil(t, r.GetResponse(), "item %d: %v", i, r.GetError())
		assert.True(t, r.GetResponse().Allowed, "item %d", i)
		assert.Empty(t, r.GetResponse().Reservation, "no hold's token leaks out")
		assert.EqualValues(t, 1, count(checks[i]), "item %d counted once", i)
	}
}
