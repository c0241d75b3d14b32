package route

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// lateCtx is a context past its deadline whose timer has not fired yet.
type lateCtx struct {
	context.Context
	dl time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.dl, true }

func TestCallerGoneBeforeTheContextSaysSo(t *testing.T) {
	assert.ErrorIs(t, callerGone(lateCtx{context.Background(), time.Now().Add(-time.Millisecond)}), context.DeadlineExceeded)
	assert.NoError(t, callerGone(lateCtx{context.Background(), time.Now().Add(time.Hour)}))
	assert.NoError(t, callerGone(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, callerGone(ctx), context.Canceled)
}
