package pipeline

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// msg is both a request and an answer of the fake stream.
type msg struct {
	seq  uint64
	body string
}

// fakeStream is the client side of a bidirectional stream whose far end
// the test plays: Send records, the test answers with reply or breaks it.
type fakeStream struct {
	grpc.ClientStream
	ctx  context.Context
	mu   sync.Mutex
	sent []*msg
	in   chan *msg  // answers to Recv
	dead chan error // closed with the error once broken
	err  error
}

func newFakeStream(ctx context.Context) *fakeStream {
	return &fakeStream{ctx: ctx, in: make(chan *msg, 16), dead: make(chan error)}
}

func (s *fakeStream) Send(m *msg) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return io.EOF
	}
	s.sent = append(s.sent, m)
	return nil
}

func (s *fakeStream) Recv() (*msg, error) {
	select {
	case m := <-s.in:
		return m, nil
	case <-s.dead:
		return nil, s.err
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

func (s *fakeStream) reply(seq uint64, body string) { s.in <- &msg{seq: seq, body: body} }

func (s *fakeStream) breakWith(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	close(s.dead)
}

func (s *fakeStream) Header() (metadata.MD, error) { return nil, nil }
func (s *fakeStream) Trailer() metadata.MD         { return nil }
func (s *fakeStream) CloseSend() error             { return nil }
func (s *fakeStream) Context() context.Context     { return s.ctx }

// opener hands out fake streams and remembers them.
type opener struct {
	mu      sync.Mutex
	streams []*fakeStream
	fail    error
	ended   error // when set, streams open already ended with it (see endedStream)
}

func (o *opener) open(ctx context.Context) (grpc.BidiStreamingClient[msg, msg], error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail != nil {
		return nil, o.fail
	}
	s := newFakeStream(ctx)
	o.streams = append(o.streams, s)
	if o.ended != nil {
		return &endedStream{fakeStream: s, status: o.ended, sent: make(chan struct{})}, nil
	}
	return s, nil
}

// endedStream is a stream the far end ended with a status before its first
// message went: as in grpc-go, Send fails with io.EOF, and Recv, here only
// once Send has failed, returns the status.
type endedStream struct {
	*fakeStream
	status error
	once   sync.Once
	sent   chan struct{}
}

func (s *endedStream) Send(*msg) error {
	s.once.Do(func() { close(s.sent) })
	return io.EOF
}

func (s *endedStream) Recv() (*msg, error) {
	<-s.sent
	return nil, s.status
}

func (o *opener) last() *fakeStream {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.streams[len(o.streams)-1]
}

func newTestPipeline(t *testing.T, o *opener) *Pipeline[msg, msg] {
	t.Helper()
	p, err := New(Config[msg, msg]{Open: o.open, SetSeq: func(m *msg, s uint64) { m.seq = s },
		SeqOf: func(m *msg) uint64 { return m.seq }, Timeout: time.Second})
	require.NoError(t, err)
	return p
}

// answer collects what done was called with.
type answer struct {
	res  *msg
	err  error
	done chan struct{}
}

func send(p *Pipeline[msg, msg], body string) *answer {
	a := &answer{done: make(chan struct{})}
	p.Send(&msg{body: body}, func(m *msg, err error) {
		a.res, a.err = m, err
		close(a.done)
	})
	return a
}

func (a *answer) answered() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func TestNewRequiresEveryHook(t *testing.T) {
	_, err := New(Config[msg, msg]{})
	assert.ErrorContains(t, err, "required")
}

// One stream carries every batch, numbered 1, 2, …; each answer reaches
// the batch whose seq it carries, whatever the order the answers come in.
func TestAnswersAreMatchedBySeq(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &opener{}
		p := newTestPipeline(t, o)
		a, b, c := send(p, "a"), send(p, "b"), send(p, "c")
		s := o.last()
		require.Len(t, o.streams, 1, "one stream for every batch")
		require.Len(t, s.sent, 3)
		assert.Equal(t, []uint64{1, 2, 3}, []uint64{s.sent[0].seq, s.sent[1].seq, s.sent[2].seq})
		s.reply(2, "B")
		s.reply(1, "A")
		s.reply(3, "C")
		synctest.Wait()
		for want, got := range map[string]*answer{"A": a, "B": b, "C": c} {
			require.True(t, got.answered())
			require.NoError(t, got.err)
			assert.Equal(t, want, got.res.body)
		}
		p.Close()
	})
}

// A batch whose answer does not come within the timeout fails with
// ErrTimeout (a DeadlineExceeded); the stream stays, later batches are
// answered, and the late answer is dropped.
func TestTimeoutFailsOneBatchAndKeepsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &opener{}
		p := newTestPipeline(t, o)
		start := time.Now()
		slow := send(p, "slow")
		<-slow.done
		assert.ErrorIs(t, slow.err, ErrTimeout)
		assert.ErrorIs(t, slow.err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))

		next := send(p, "next")
		s := o.last()
		s.reply(1, "too late")
		s.reply(2, "next")
		<-next.done
		require.NoError(t, next.err)
		assert.Equal(t, "next", next.res.body)
		assert.Len(t, o.streams, 1, "the stream stayed")
		p.Close()
	})
}

// A broken stream fails every batch waiting on it with its error; the
// next Send opens a new stream.
func TestBrokenStreamFailsItsBatchesAndReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &opener{}
		p := newTestPipeline(t, o)
		a, b := send(p, "a"), send(p, "b")
		reset := errors.New("connection reset")
		o.last().breakWith(reset)
		synctest.Wait()
		for _, x := range []*answer{a, b} {
			require.True(t, x.answered())
			assert.ErrorIs(t, x.err, reset)
		}
		c := send(p, "c")
		require.Len(t, o.streams, 2, "reopened")
		o.last().reply(1, "C")
		<-c.done
		require.NoError(t, c.err)
		p.Close()
	})
}

// A stream the far end ended (a server refusing the call, say) fails its
// batch with the far end's status, which grpc-go gives Recv, not with the
// bare io.EOF that Send sees first.
func TestEndedStreamFailsTheBatchWithItsStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := status.Error(codes.Unavailable, "this port requires TLS")
		p := newTestPipeline(t, &opener{ended: refused})
		a := send(p, "a")
		synctest.Wait()
		require.True(t, a.answered())
		assert.ErrorIs(t, a.err, refused)
		assert.Equal(t, codes.Unavailable, status.Code(a.err), "the status survives the wrapping")
		p.Close()
	})
}

// A stream that cannot be opened fails the batch with the reason, at once.
func TestOpenFailureFailsTheBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := errors.New("unimplemented")
		o := &opener{fail: refused}
		p := newTestPipeline(t, o)
		a := send(p, "a")
		require.True(t, a.answered(), "on the sender's goroutine")
		assert.ErrorIs(t, a.err, refused)
		p.Close()
	})
}

// Close fails the batches still waiting with ErrClosed and stops the
// reader; later Sends fail at once.
func TestCloseFailsWaitingBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &opener{}
		p := newTestPipeline(t, o)
		a := send(p, "a")
		p.Close()
		require.True(t, a.answered())
		assert.ErrorIs(t, a.err, ErrClosed)
		b := send(p, "b")
		require.True(t, b.answered())
		assert.ErrorIs(t, b.err, ErrClosed)
	})
}
