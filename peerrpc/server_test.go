package peerrpc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/testkit/peertest"
	"github.com/peerlimit/peerlimit/peerrpc"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// A sent stamp before 1970 comes from no member's clock: the call is
// refused naming the field, and its states reach nothing.
func TestANegativeSentStampIsRefused(t *testing.T) {
	h := &peertest.Recorder{ID: "b"}
	s := peerrpc.NewServer(h)
	states := []*pb.KeyState{{Key: "k", WindowMs: 1000, WindowId: 1, Curr: 1}}
	_, err := s.Handoff(context.Background(), &pb.HandoffRequest{Origin: "a", States: states, SentUnixMs: -1})
	st, _ := status.FromError(err)
	assert.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	assert.Equal(t, "sent_unix_ms", grpcapi.Field(st))
	_, err = s.Replicate(context.Background(), &pb.ReplicateRequest{Origin: "a", States: states, SentUnixMs: -1})
	st, _ = status.FromError(err)
	assert.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	assert.Equal(t, "sent_unix_ms", grpcapi.Field(st))
	assert.Empty(t, h.Acted())

	_, err = s.Handoff(context.Background(), &pb.HandoffRequest{Origin: "a", States: states})
	require.NoError(t, err, "0: a sender from before the stamp")
	require.Len(t, h.Sent(), 1)
	assert.True(t, h.Sent()[0].IsZero())
}
