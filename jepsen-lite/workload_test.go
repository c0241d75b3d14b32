package jepsenlite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// The short profile (the test command's) has the GCRA and concurrency
// keys too, and asks for them as the API says.
func TestWorkloadKeysOfTheShortProfile(t *testing.T) {
	keys := workloadKeys(Scenario{Name: "s"}, ShortProfile(), 2.5)
	var buckets, slots []KeySpec
	names := map[string]bool{}
	for _, ks := range keys {
		assert.False(t, names[ks.Name], "%s twice", ks.Name)
		names[ks.Name] = true
		switch ks.Algorithm {
		case pb.Algorithm_GCRA:
			buckets = append(buckets, ks)
		case pb.Algorithm_CONCURRENCY:
			slots = append(slots, ks)
		}
	}
	require.Len(t, buckets, 2)
	require.Len(t, slots, 2)
	assert.Equal(t, KeySpec{Name: "jepsen:s:gcra:0", Algorithm: pb.Algorithm_GCRA, Limit: 20, Window: time.Second, Burst: 10}, buckets[0])
	assert.Equal(t, KeySpec{Name: "jepsen:s:gcra:hot:1", Algorithm: pb.Algorithm_GCRA, Limit: 20, Window: time.Second, Burst: 10, Weight: 3}, buckets[1])
	assert.Equal(t, KeySpec{Name: "jepsen:s:concurrency:1", Algorithm: pb.Algorithm_CONCURRENCY, Limit: 5, Window: 2 * time.Second}, slots[1])
	assert.Equal(t, len(keys)+2, TotalWeight(keys), "the hot key counts 3")

	req := buckets[0].request()
	assert.Equal(t, int64(10), req.GetBurst())
	assert.Equal(t, pb.Op_CHECK, req.GetOp())
	assert.Equal(t, pb.Op_ACQUIRE, slots[0].request().GetOp())
	assert.Nil(t, slots[0].request().Burst)
	rel := slots[0].release("tok")
	assert.Equal(t, pb.Op_RELEASE, rel.GetOp())
	assert.Equal(t, "tok", rel.GetReservation())
	assert.Equal(t, int64(2000), rel.GetWindowMs())
}

func TestWorkloadPicksKeysByWeight(t *testing.T) {
	w := Workload{Keys: []KeySpec{{Name: "a"}, {Name: "b", Weight: 3}}}
	r := rand.New(rand.NewPCG(1, 2))
	n := [2]int{}
	for range 4000 {
		n[w.pickKey(r)]++
	}
	assert.InDelta(t, 3.0, float64(n[1])/float64(n[0]), 0.3, "%v", n)
}

// exactNode answers checks as one exact node would, on the test's clock:
// GCRA buckets (the emission interval window ÷ limit rounded up,
// admitting while the theoretical arrival time is at most burst − 1
// intervals ahead) and concurrency slots (freed by their release or
// window after they were taken). extraBurst and extraSlots make it a
// mutant that admits one more than asked.
type exactNode struct {
	pb.RateLimiterClient // only Check is called
	epoch                time.Time
	extraBurst           int64
	extraSlots           int

	mu     sync.Mutex
	tat    map[string]time.Duration
	slots  map[string]map[string]time.Duration // key → token → taken
	tokens int
}

func newExactNode() *exactNode {
	return &exactNode{epoch: time.Now(), tat: map[string]time.Duration{}, slots: map[string]map[string]time.Duration{}}
}

func (n *exactNode) Check(_ context.Context, req *pb.CheckRequest, _ ...grpc.CallOption) (*pb.CheckResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Since(n.epoch)
	resp := &pb.CheckResponse{Owner: "n1"}
	window := time.Duration(req.GetWindowMs()) * time.Millisecond
	switch req.GetOp() {
	case pb.Op_CHECK:
		interval := (window + time.Duration(req.GetLimit()) - 1) / time.Duration(req.GetLimit())
		tat := max(n.tat[req.GetKey()], now)
		if tat-now <= time.Duration(req.GetBurst()+n.extraBurst-1)*interval {
			n.tat[req.GetKey()], resp.Allowed = tat+interval, true
		}
	case pb.Op_ACQUIRE:
		held := n.slots[req.GetKey()]
		if held == nil {
			held = map[string]time.Duration{}
			n.slots[req.GetKey()] = held
		}
		for tok, taken := range held {
			if now-taken >= window {
				delete(held, tok)
			}
		}
		if len(held) < int(req.GetLimit())+n.extraSlots {
			n.tokens++
			tok := fmt.Sprint("slot-", n.tokens)
			held[tok], resp.Allowed, resp.Reservation = now, true, tok
		}
	case pb.Op_RELEASE:
		delete(n.slots[req.GetKey()], req.GetReservation())
		resp.Allowed = true
	}
	return resp, nil
}

// runAgainst runs the profile's GCRA and concurrency keys for 10 s of
// the bubble's clock against node, and checks the history.
func runAgainst(t *testing.T, node pb.RateLimiterClient) (*Result, History) {
	keys := slices.DeleteFunc(workloadKeys(Scenario{Name: "exact"}, FullProfile(), 2.5), func(ks KeySpec) bool {
		return ks.Algorithm != pb.Algorithm_GCRA && ks.Algorithm != pb.Algorithm_CONCURRENCY
	})
	clients := &Clients{conns: map[string]*grpc.ClientConn{}, clients: map[string]pb.RateLimiterClient{"n1": node}, targets: []string{"n1"}}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	w := Workload{Keys: keys, Workers: 4, Rate: 2.5 * 10 * float64(TotalWeight(keys)), Timeout: time.Second}
	ops := w.Run(ctx, clients, start, 1)
	h := History{Scenario: "exact", Start: start, End: time.Since(start), Nodes: []string{"n1"}, Keys: keys, Ops: ops,
		Events: []Event{{Name: "start", Steady: 1, Expect: map[string][]string{}}}, Up: map[string][]Span{"n1": {{From: 0}}}}
	r := Analyze(h)
	t.Logf("%d operations; gcra: %d intervals, worst %.3f×, %d violations; concurrency: %d instants, worst %.2f×, %d violations",
		len(ops), r.GCRA.Windows, r.GCRA.Worst, len(r.GCRA.Violations), r.Concurrency.Windows, r.Concurrency.Worst, len(r.Concurrency.Violations))
	return r, h
}

// The workload against one exact node: every key saturated, every slot
// released but one in twenty, and nothing over a bound.
func TestWorkloadOfBucketsAndSlotsPassesAnExactNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, h := runAgainst(t, newExactNode())
		assert.Empty(t, r.Violations())
		assert.Greater(t, r.GCRA.Worst, 0.9, "the buckets are saturated")
		assert.LessOrEqual(t, r.GCRA.Worst, 1.0)
		assert.InDelta(t, 1.0, r.Concurrency.Worst, 1e-9, "every slot taken at times")
		assert.Zero(t, r.GCRA.Excess+r.Concurrency.Excess)
		assert.Zero(t, r.Log.Windows+r.CounterFixed.Windows+r.Calendar.Windows)

		perKey := map[int]int{}
		acquires, releases := map[int]bool{}, map[int]bool{}
		for _, op := range h.Ops {
			perKey[op.Key]++
			switch {
			case op.Kind == AcquireOp && op.Outcome == Allowed:
				acquires[op.Slot] = true
			case op.Kind == ReleaseOp:
				assert.True(t, acquires[op.Slot], "a release of slot %d before its acquire", op.Slot)
				releases[op.Slot] = true
			}
		}
		assert.InDelta(t, 3.0, float64(perKey[1])/float64(perKey[0]), 0.5, "the hot bucket is offered 3× the other: %v", perKey)
		never := len(acquires) - len(releases)
		assert.Greater(t, never, 0, "some slots are never released")
		assert.Less(t, never, len(acquires)/5, "%d of %d never released", never, len(acquires))
	})
}

// A node whose bucket holds one more than its burst, or that gives one
// slot more than its limit, fails.
func TestWorkloadOfBucketsAndSlotsFailsAMutantNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := newExactNode()
		n.extraBurst = 1
		r, _ := runAgainst(t, n)
		assert.NotEmpty(t, r.GCRA.Violations)
		assert.Empty(t, r.Concurrency.Violations)
	})
	synctest.Test(t, func(t *testing.T) {
		n := newExactNode()
		n.extraSlots = 1
		r, _ := runAgainst(t, n)
		assert.Empty(t, r.GCRA.Violations)
		require.NotEmpty(t, r.Concurrency.Violations)
		assert.Equal(t, 6, r.Concurrency.Violations[0].Allowed)
	})
}
