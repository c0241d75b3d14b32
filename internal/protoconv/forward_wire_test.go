package protoconv

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// randomForwardResponse draws a batch's answer: responses with every
// field (negative numbers, reservations, settle outcomes out of range),
// per-check errors, and results with neither.
func randomForwardResponse(rng *rand.Rand) *pb.ForwardResponse {
	out := &pb.ForwardResponse{Seq: rng.Uint64()}
	owners := []string{"", "node-1", "node-22"}
	for range rng.IntN(20) {
		switch rng.IntN(6) {
		case 0:
			out.Results = append(out.Results, &pb.CheckResult{Result: &pb.CheckResult_Error{Error: &pb.Error{
				Code: rng.Uint32N(20), Field: []string{"", "key"}[rng.IntN(2)], Message: "no"}}})
		case 1:
			out.Results = append(out.Results, &pb.CheckResult{})
		default:
			r := &pb.CheckResponse{Allowed: rng.IntN(2) == 0, Limit: rng.Int64N(1 << 40), Remaining: rng.Int64N(100) - 5,
				CurrentCount: rng.Int64(), RetryAfterMs: rng.Int64N(1 << 30), ResetAfterMs: rng.Int64N(1 << 30),
				Owner: owners[rng.IntN(len(owners))], Degraded: rng.IntN(4) == 0, RefillAfterMs: rng.Int64N(1000)}
			if rng.IntN(3) == 0 {
				r.Reservation, r.ExpiresInMs, r.Refunded, r.Over = "tok", rng.Int64()-1<<62, rng.Int64N(9), rng.Int64N(3)
				r.Settled = pb.Settled(rng.Int32N(300) - 20)
			}
			out.Results = append(out.Results, &pb.CheckResult{Result: &pb.CheckResult_Response{Response: r}})
		}
	}
	return out
}

// fromGenerated is what the forwarder gave before DecodeForwardResponse.
func fromGenerated(t *testing.T, data []byte) (uint64, []peer.Result, error) {
	var in pb.ForwardResponse
	if err := in.UnmarshalVT(data); err != nil {
		return 0, nil, err
	}
	out := make([]peer.Result, len(in.GetResults()))
	for i, r := range in.GetResults() {
		out[i] = FromProtoResult(r)
	}
	return in.GetSeq(), out, nil
}

// DecodeForwardResponse gives what UnmarshalVT and FromProtoResult give.
func TestDecodeForwardResponseMatchesTheGeneratedCode(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range 2000 {
		data, err := randomForwardResponse(rng).MarshalVT()
		require.NoError(t, err)
		wantSeq, want, err := fromGenerated(t, data)
		require.NoError(t, err)
		seq, got, err := DecodeForwardResponse(data)
		require.NoError(t, err, "seed %d, batch %d", seed, i)
		assert.Equal(t, wantSeq, seq, "seed %d, batch %d", seed, i)
		require.Equal(t, want, got, "seed %d, batch %d", seed, i)
	}
}

// A batch's results share their owner's string: decoding a batch of 64
// answers allocates the results and one owner, nothing per check.
func TestDecodeForwardResponseAllocatesNothingPerCheck(t *testing.T) {
	in := &pb.ForwardResponse{Seq: 7}
	for range 64 {
		in.Results = append(in.Results, &pb.CheckResult{Result: &pb.CheckResult_Response{Response: &pb.CheckResponse{
			Allowed: true, Limit: 100, Remaining: 42, ResetAfterMs: 900, Owner: "node-3"}}})
	}
	data, err := in.MarshalVT()
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		if _, r, err := DecodeForwardResponse(data); err != nil || len(r) != 64 {
			t.Fatal(err)
		}
	})
	assert.LessOrEqual(t, allocs, 2.0)
}

// A malformed answer is refused naming the field it broke at.
func TestDecodeForwardResponseNamesTheBrokenField(t *testing.T) {
	for name, tc := range map[string]struct {
		data  []byte
		field string
	}{
		"results as a varint":  {[]byte{1<<3 | 0, 1}, "results"},
		"seq as bytes":         {[]byte{2<<3 | 2, 1, 0}, "seq"},
		"response as a varint": {[]byte{1<<3 | 2, 2, 1<<3 | 0, 1}, "response"},
		"limit as bytes":       {[]byte{1<<3 | 2, 5, 1<<3 | 2, 3, 2<<3 | 2, 1, 0}, "limit"},
		"error code as bytes":  {[]byte{1<<3 | 2, 5, 2<<3 | 2, 3, 1<<3 | 2, 1, 0}, "code"},
		"a result cut short":   {[]byte{1<<3 | 2, 5, 1<<3 | 2}, "results"},
	} {
		_, _, err := DecodeForwardResponse(tc.data)
		var ae *limiter.ArgumentError
		require.ErrorAs(t, err, &ae, name)
		assert.Equal(t, tc.field, ae.Field, "%s: %v", name, err)
	}
}

// Whatever DecodeForwardResponse accepts, the generated code accepts and
// reads the same.
func FuzzDecodeForwardResponseMatchesVT(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		data, err := randomForwardResponse(rng).MarshalVT()
		require.NoError(f, err)
		f.Add(data)
	}
	f.Add([]byte{1<<3 | 2, 4, 2<<3 | 2, 0, 1<<3 | 2, 0}) // error, then response: the last wins
	f.Fuzz(func(t *testing.T, data []byte) {
		seq, got, err := DecodeForwardResponse(data)
		wantSeq, want, vtErr := fromGenerated(t, data)
		if err != nil {
			return // stricter than the generated code on malformed groups and varints: allowed
		}
		require.NoError(t, vtErr, "DecodeForwardResponse accepted what UnmarshalVT refuses")
		assert.Equal(t, wantSeq, seq)
		if len(want) == 0 && len(got) == 0 {
			return
		}
		require.Equal(t, want, got)
	})
}
