package protoconv

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A GCRA bucket's TAT (Unix ns) travels as tat_ns, to the nanosecond,
// through both conversions.
func TestGCRAKeyStatesRoundTrip(t *testing.T) {
	ks := limiter.KeyState{Key: "k", Window: time.Second, Algorithm: limiter.GCRA, TAT: 1_750_000_000_123_456_789}
	for _, m := range []*pb.KeyState{ToProtoKeyState(ks), ToProtoKeyStates([]limiter.KeyState{ks})[0]} {
		assert.Equal(t, ks.TAT, m.GetTatNs())
		data, err := m.MarshalVT()
		require.NoError(t, err)
		var back pb.KeyState
		require.NoError(t, back.UnmarshalVT(data))
		assert.Equal(t, ks, FromProtoKeyState(&back))
	}
}
