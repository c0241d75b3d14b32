package route_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/route"
)

// Code promises google.rpc.Code's values and spelling (CANCELLED, not
// grpc-go's Canceled): check every one against the generated enum.
func TestCodeIsGoogleRPCCode(t *testing.T) {
	for c := route.OK; c <= route.Unauthenticated; c++ {
		assert.Equal(t, rpccode.Code_name[int32(c)], c.String(), "code %d", c)
	}
	assert.Equal(t, "CODE(99)", route.Code(99).String())
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want route.Code
	}{
		{nil, route.OK},
		{fmt.Errorf("wrapped: %w", &limiter.ArgumentError{Field: "key", Reason: "x"}), route.InvalidArgument},
		{fmt.Errorf("reset: %w: %w", route.ErrOwnerUnreachable, &route.Error{Code: route.Unauthenticated}), route.Unavailable},
		{fmt.Errorf("full: %w", limiter.ErrCapacity), route.ResourceExhausted},
		{route.ErrBatchTooLarge, route.ResourceExhausted},
		{route.ErrTooManyForwards, route.ResourceExhausted},
		{context.DeadlineExceeded, route.DeadlineExceeded},
		{context.Canceled, route.Canceled},
		{&route.CallError{ID: "x", Err: &route.Error{Code: route.PermissionDenied, Message: "no"}}, route.PermissionDenied},
		{errors.New("boom"), route.Internal},
	} {
		assert.Equal(t, tc.want, route.CodeOf(tc.err), "%v", tc.err)
	}
	assert.Equal(t, "key", route.Field(fmt.Errorf("x: %w", &limiter.ArgumentError{Field: "key"})))
	assert.Empty(t, route.Field(errors.New("boom")))
}

func TestValidRequestID(t *testing.T) {
	for _, id := range []string{"a", "0af7651916cd43dd8448eb211c80319c", "req-1:2/3", strings.Repeat("x", route.MaxRequestIDBytes)} {
		assert.True(t, route.ValidRequestID(id), id)
	}
	for _, id := range []string{"", "a b", "tab\t", "new\nline", "é", strings.Repeat("x", route.MaxRequestIDBytes+1)} {
		assert.False(t, route.ValidRequestID(id), id)
		assert.Empty(t, route.RequestIDFrom(route.WithRequestID(context.Background(), id)), "an invalid id is ignored")
	}
	ids := map[string]bool{}
	for range 1000 {
		id := route.NewRequestID()
		assert.True(t, route.ValidRequestID(id))
		ids[id] = true
	}
	assert.Len(t, ids, 1000)
	assert.Equal(t, "mine", route.RequestIDForCall(route.WithRequestID(context.Background(), "mine")))
	assert.Len(t, route.RequestIDForCall(context.Background()), 16, "generated for a call when the request has none")
}

func TestClip(t *testing.T) {
	assert.Equal(t, "short", route.Clip("short"))
	assert.Equal(t, strings.Repeat("x", 64)+"…", route.Clip(strings.Repeat("x", 100)))
}
