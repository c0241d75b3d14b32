package protoconv

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// randomReplication draws a round with every kind of state: counters,
// logs (with an unsorted entry), calendar counters in and out of UTC,
// GCRA buckets, concurrency slots with tags, negative numbers, whole
// partitions, and a zero or a real sent stamp.
func randomReplication(rng *rand.Rand) peer.Replication {
	r := peer.Replication{Boot: []string{"", "b1"}[rng.IntN(2)]}
	if rng.IntN(2) == 0 {
		r.Sent = time.UnixMilli(rng.Int64N(1 << 42))
	}
	for range rng.IntN(3) {
		r.Whole = append(r.Whole, rng.IntN(300))
	}
	for i := range rng.IntN(12) {
		ks := limiter.KeyState{Key: string(rune('a' + i%26)), Window: time.Duration(rng.IntN(3)) * time.Minute,
			Algorithm: limiter.Algorithm(rng.IntN(5)), WindowID: rng.Int64N(1<<40) - 1<<39,
			Prev: rng.Int64N(100) - 3, Curr: rng.Int64N(1 << 33), TAT: rng.Int64()}
		switch rng.IntN(4) {
		case 0:
			ks.Calendar = limiter.CalendarOf(limiter.CalendarUnit(1+rng.IntN(6)), []string{"UTC", "Europe/Paris"}[rng.IntN(2)])
		case 1:
			base := rng.Int64N(1 << 42)
			for j := range rng.IntN(6) {
				ks.Log = append(ks.Log, base+int64(j)*rng.Int64N(1<<34)-int64(j%2))
				ks.Tags = append(ks.Tags, rng.Uint32())
			}
		}
		r.States = append(r.States, ks)
	}
	return r
}

// AppendReplicate writes exactly the bytes the generated code marshals
// from ToProtoReplicate: a backup of any version reads them the same.
func TestAppendReplicateMatchesTheGeneratedCode(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range 2000 {
		r := randomReplication(rng)
		want, err := ToProtoReplicate("node1", r).MarshalVT()
		require.NoError(t, err)
		got := AppendReplicate(nil, "node1", r)
		require.Equal(t, want, got, "seed %d, round %d", seed, i)
		require.Equal(t, len(want), SizeReplicate("node1", r), "seed %d, round %d", seed, i)
	}
}

// DecodeReplicate gives what UnmarshalVT and FromProtoReplicate give.
func TestDecodeReplicateMatchesTheGeneratedCode(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := range 2000 {
		data := AppendReplicate(nil, "node1", randomReplication(rng))
		origin, got, err := DecodeReplicate(data)
		require.NoError(t, err, "seed %d, round %d", seed, i)
		var in pb.ReplicateRequest
		require.NoError(t, in.UnmarshalVT(data))
		assert.Equal(t, "node1", origin)
		assertSameReplication(t, FromProtoReplicate(&in), got, "seed %d, round %d", seed, i)
	}
}

// A malformed state is refused naming the field it broke at.
func TestDecodeReplicateNamesTheBrokenField(t *testing.T) {
	ok := AppendReplicate(nil, "node1", peer.Replication{States: []limiter.KeyState{{Key: "k", Window: time.Second, Curr: 3}}})
	for name, tc := range map[string]struct {
		data  []byte
		field string
	}{
		"cut short":              {ok[:len(ok)-1], "states"},
		"origin as a varint":     {[]byte{1<<3 | 0, 7}, "origin"},
		"key as a varint":        {[]byte{2<<3 | 2, 2, 1<<3 | 0, 1}, "key"},
		"curr as bytes":          {[]byte{2<<3 | 2, 3, 6<<3 | 2, 1, 0}, "curr"},
		"a varint over 10 bytes": {append([]byte{5 << 3}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1), "sent_unix_ms"},
	} {
		_, _, err := DecodeReplicate(tc.data)
		var ae *limiter.ArgumentError
		require.ErrorAs(t, err, &ae, name)
		assert.Equal(t, tc.field, ae.Field, "%s: %v", name, err)
	}
}

// Whatever DecodeReplicate accepts, the generated code accepts and reads
// the same: a member cannot send a backup something it reads otherwise
// than an older backup would.
func FuzzDecodeReplicateMatchesVT(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		f.Add(AppendReplicate(nil, "n", randomReplication(rng)))
	}
	f.Add([]byte{2<<3 | 2, 4, 8<<3 | 0, 0xff, 0xff, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		origin, got, err := DecodeReplicate(data)
		var in pb.ReplicateRequest
		vtErr := in.UnmarshalVT(data)
		if err != nil {
			return // stricter than the generated code on malformed groups and varints: allowed
		}
		require.NoError(t, vtErr, "DecodeReplicate accepted what UnmarshalVT refuses")
		assert.Equal(t, in.GetOrigin(), origin)
		assertSameReplication(t, FromProtoReplicate(&in), got)
	})
}

// assertSameReplication compares two decoded rounds, an empty list and
// none being the same.
func assertSameReplication(t *testing.T, want, got peer.Replication, msgAndArgs ...any) {
	t.Helper()
	assert.True(t, want.Sent.Equal(got.Sent), msgAndArgs...)
	assert.Equal(t, want.Boot, got.Boot, msgAndArgs...)
	assert.Equal(t, len(want.Whole), len(got.Whole), msgAndArgs...)
	if len(want.Whole) > 0 {
		assert.Equal(t, want.Whole, got.Whole, msgAndArgs...)
	}
	require.Equal(t, len(want.States), len(got.States), msgAndArgs...)
	for i := range want.States {
		w, g := want.States[i], got.States[i]
		if len(w.Tags) == 0 && len(g.Tags) == 0 {
			w.Tags, g.Tags = nil, nil
		}
		assert.Equal(t, w, g, msgAndArgs...)
	}
}
