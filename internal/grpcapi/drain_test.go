package grpcapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Drain's quiet point: not before what is under way is done, at once if
// nothing is; after it nothing new is taken.
func TestDrainQuietOnceNothingIsUnderWay(t *testing.T) {
	d := NewDrain()
	require.True(t, d.Enter())
	require.True(t, d.Enter())
	quiet := d.Start()
	assert.True(t, d.Draining())
	d.Leave()
	select {
	case <-quiet:
		t.Fatal("quiet with a call under way")
	default:
	}
	d.Leave()
	<-quiet
	assert.False(t, d.Enter(), "nothing is taken past the quiet point")

	idle := NewDrain()
	<-idle.Start() // nothing under way: quiet at once

	var nilDrain *Drain
	assert.True(t, nilDrain.Enter(), "no Drain: everything is taken")
	assert.False(t, nilDrain.Draining())
}

func TestDrainUnaryRefusesPastTheQuietPoint(t *testing.T) {
	d := NewDrain()
	called := false
	h := func(context.Context, any) (any, error) { called = true; return "ok", nil }
	got, err := d.Unary(context.Background(), nil, &grpc.UnaryServerInfo{}, h)
	require.NoError(t, err)
	assert.Equal(t, "ok", got)
	<-d.Start()
	called = false
	_, err = d.Unary(context.Background(), nil, &grpc.UnaryServerInfo{}, h)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.False(t, called)
}
