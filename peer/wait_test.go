package peer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/peerlimit/peerlimit/peer"
)

func TestSenderGoneMeasuresTheWaitFromArrival(t *testing.T) {
	ctx := context.Background()
	assert.NoError(t, peer.SenderGone(ctx), "no wait: only the context ends it")
	assert.NoError(t, peer.SenderGone(peer.WithSenderWait(ctx, time.Now(), time.Minute)))
	assert.ErrorIs(t, peer.SenderGone(peer.WithSenderWait(ctx, time.Now().Add(-time.Second), time.Millisecond)), context.DeadlineExceeded)
	assert.NoError(t, peer.SenderGone(peer.WithSenderWait(ctx, time.Now().Add(-time.Hour), 0)), "a zero wait says nothing")
	done, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, peer.SenderGone(peer.WithSenderWait(done, time.Now(), time.Minute)), context.Canceled)
}

func TestNotDecided(t *testing.T) {
	assert.True(t, peer.NotDecided(peer.ErrNotCounted))
	assert.True(t, peer.NotDecided(&peer.Error{Code: peer.Aborted, Message: "as it arrives over the wire"}))
	assert.True(t, peer.NotDecided(&peer.CallError{Err: errors.New("refused")}))
	assert.False(t, peer.NotDecided(nil))
	assert.False(t, peer.NotDecided(&peer.Error{Code: peer.InvalidArgument, Field: "key"}), "the owner's answer")
}
