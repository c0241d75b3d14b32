package peer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Code promises google.rpc.Code's values and spelling (CANCELLED, not
// grpc-go's Canceled): check every one against the generated enum.
func TestCodeIsGoogleRPCCode(t *testing.T) {
	for c := peer.OK; c <= peer.Unauthenticated; c++ {
		assert.Equal(t, rpccode.Code_name[int32(c)], c.String(), "code %d", c)
	}
	assert.Equal(t, "CODE(99)", peer.Code(99).String())
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want peer.Code
	}{
		{nil, peer.OK},
		{fmt.Errorf("wrapped: %w", &limiter.ArgumentError{Field: "key", Reason: "x"}), peer.InvalidArgument},
		{fmt.Errorf("reset: %w: %w", peer.NewError(peer.Unavailable, "owner unreachable"), &peer.Error{Code: peer.Unauthenticated}), peer.Unavailable},
		{fmt.Errorf("full: %w", limiter.ErrCapacity), peer.ResourceExhausted},
		{peer.NewError(peer.ResourceExhausted, "batch too large"), peer.ResourceExhausted},
		{context.DeadlineExceeded, peer.DeadlineExceeded},
		{context.Canceled, peer.Canceled},
		{&peer.CallError{ID: "x", Err: &peer.Error{Code: peer.PermissionDenied, Message: "no"}}, peer.PermissionDenied},
		{errors.New("boom"), peer.Internal},
	} {
		assert.Equal(t, tc.want, peer.CodeOf(tc.err), "%v", tc.err)
	}
	assert.Equal(t, "key", peer.FieldOf(fmt.Errorf("x: %w", &limiter.ArgumentError{Field: "key"})))
	assert.Equal(t, "key", peer.FieldOf(&peer.CallError{Err: &peer.Error{Code: peer.InvalidArgument, Field: "key"}}), "a field another member named")
	assert.Empty(t, peer.FieldOf(errors.New("boom")))
}

func TestValidRequestID(t *testing.T) {
	for _, id := range []string{"a", "0af7651916cd43dd8448eb211c80319c", "req-1:2/3", strings.Repeat("x", peer.MaxRequestIDBytes)} {
		assert.True(t, peer.ValidRequestID(id), id)
	}
	for _, id := range []string{"", "a b", "tab\t", "new\nline", "é", strings.Repeat("x", peer.MaxRequestIDBytes+1)} {
		assert.False(t, peer.ValidRequestID(id), id)
		assert.Empty(t, peer.RequestIDFrom(peer.WithRequestID(context.Background(), id)), "an invalid id is ignored")
	}
	ids := map[string]bool{}
	for range 1000 {
		id := peer.NewRequestID()
		assert.True(t, peer.ValidRequestID(id))
		ids[id] = true
	}
	assert.Len(t, ids, 1000)
	assert.Equal(t, "mine", peer.RequestIDForCall(peer.WithRequestID(context.Background(), "mine")))
	assert.Len(t, peer.RequestIDForCall(context.Background()), 16, "generated for a call when the request has none")
}
