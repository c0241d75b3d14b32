package protoconv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// GCRA's burst and CONCURRENCY's ACQUIRE come in through the public API
// and travel to the owner as they came, through the wire's own codec.
func TestGCRAAndConcurrencyRequestsRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		in   *pb.CheckRequest
		want limiter.Request
	}{
		{"GCRA with burst", &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Burst: ptr(int64(50))},
			limiter.Request{Key: "k", Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Burst: 50, Hits: 1}},
		{"GCRA without burst", &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Hits: ptr(int64(4))},
			limiter.Request{Key: "k", Limit: 10, Window: time.Second, Algorithm: limiter.GCRA, Hits: 4}},
		{"ACQUIRE", &pb.CheckRequest{Key: "c", Limit: 5, WindowMs: 30000, Algorithm: pb.Algorithm_CONCURRENCY, Op: pb.Op_ACQUIRE},
			limiter.Request{Key: "c", Limit: 5, Window: 30 * time.Second, Algorithm: limiter.Concurrency, Op: limiter.OpAcquire, Hits: 1}},
		{"RELEASE of a slot", &pb.CheckRequest{Key: "c", Limit: 5, WindowMs: 30000, Algorithm: pb.Algorithm_CONCURRENCY, Op: pb.Op_RELEASE, Reservation: "r"},
			limiter.Request{Key: "c", Limit: 5, Window: 30 * time.Second, Algorithm: limiter.Concurrency, Op: limiter.OpRelease, Reservation: "r"}},
		{"peek", &pb.CheckRequest{Key: "c", Limit: 5, WindowMs: 30000, Algorithm: pb.Algorithm_CONCURRENCY, Hits: ptr(int64(0))},
			limiter.Request{Key: "c", Limit: 5, Window: 30 * time.Second, Algorithm: limiter.Concurrency}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := FromProto(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.want, r)

			m := ToProtoRequest(r)
			assert.Equal(t, r.Burst != 0, m.Burst != nil, "burst is sent only when given")
			data, err := m.MarshalVT()
			require.NoError(t, err)
			var back pb.CheckRequest
			require.NoError(t, back.UnmarshalVT(data))
			fwd, err := FromForwarded(&back)
			require.NoError(t, err)
			assert.Equal(t, r, fwd, "forwarded")

			batch := ToProtoRequests([]limiter.Request{r, r})
			assert.Equal(t, c.in.Burst != nil, batch[1].Burst != nil)
			again, err := FromProto(batch[1])
			require.NoError(t, err)
			assert.Equal(t, r, again, "each of a slab's messages has its own burst")
		})
	}
}

// burst is optional on the wire, so an explicit 0 is not "absent": it
// is refused naming the field, as a negative one is.
func TestBurstFromAPIRefusesWhatIsNotPositive(t *testing.T) {
	for _, b := range []int64{0, -1, -1 << 63} {
		_, err := FromProto(&pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Burst: ptr(b)})
		assert.Equal(t, "burst", peer.FieldOf(err), "burst %d: %v", b, err)
	}
	n, err := BurstFromAPI(nil)
	assert.NoError(t, err)
	assert.Zero(t, n)
}

func TestAlgorithmFromProto(t *testing.T) {
	for _, a := range []pb.Algorithm{pb.Algorithm_SLIDING_WINDOW_COUNTER, pb.Algorithm_SLIDING_WINDOW_LOG, pb.Algorithm_GCRA, pb.Algorithm_CONCURRENCY} {
		got, err := AlgorithmFromProto(a)
		require.NoError(t, err)
		assert.Equal(t, a.String(), got.String())
	}
	for _, a := range []pb.Algorithm{4, -1, 255} {
		_, err := AlgorithmFromProto(a)
		assert.Equal(t, "algorithm", peer.FieldOf(err))
		assert.ErrorContains(t, err, "GCRA (2) or CONCURRENCY (3)")
	}
	_, err := FromProto(&pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1, Op: pb.Op(8)})
	assert.Equal(t, "op", peer.FieldOf(err))
}
