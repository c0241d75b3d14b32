// Package pipeline carries batches on one long-lived bidirectional gRPC
// stream: a batch goes as one message numbered by a seq, several may be
// out at once, and each answer is matched to its batch by the seq it
// carries back. Node-to-node forwarding (Peer.ForwardStream) and the Go
// client's coalesced checks (RateLimiter.CheckStream) use it, behind
// internal/batch: a batch then costs a message, not a call, on both sides
// (no headers, no stream set-up, no handler goroutine per batch).
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// ErrClosed fails the batches of a closed Pipeline.
var ErrClosed = errors.New("pipeline closed")

// ErrTimeout is the error, wrapped, of a batch whose answer did not come
// within Config.Timeout. It wraps context.DeadlineExceeded.
var ErrTimeout = fmt.Errorf("no answer in time: %w", context.DeadlineExceeded)

// Config is how a Pipeline opens its stream and numbers its messages.
type Config[Req, Res any] struct {
	// Open opens the stream; ctx lives as long as the stream, and ends
	// when the Pipeline closes or the stream breaks. Required.
	Open func(ctx context.Context) (grpc.BidiStreamingClient[Req, Res], error)
	// SetSeq numbers a request; SeqOf reads an answer's number. Required.
	SetSeq func(*Req, uint64)
	SeqOf  func(*Res) uint64
	// Timeout bounds the wait for each batch's answer. Required.
	Timeout time.Duration
}

// Pipeline sends batches on one stream, opened at the first Send and
// again after it breaks. Send must not be called concurrently (the
// Batcher never does); the answers come on the Pipeline's reader
// goroutine, which Close stops.
type Pipeline[Req, Res any] struct {
	cfg Config[Req, Res]

	mu      sync.Mutex
	cur     *stream[Req, Res] // nil until opened, and after it breaks
	closed  bool
	readers sync.WaitGroup
}

// stream is one open stream and the batches waiting for its answers.
type stream[Req, Res any] struct {
	s       grpc.BidiStreamingClient[Req, Res]
	cancel  context.CancelFunc
	seq     uint64
	waiting map[uint64]*waiter[Res] // guarded by the Pipeline's mu
}

type waiter[Res any] struct {
	done  func(*Res, error)
	timer *time.Timer
}

// New returns a Pipeline; nothing is opened before the first Send.
func New[Req, Res any](cfg Config[Req, Res]) (*Pipeline[Req, Res], error) {
	if cfg.Open == nil || cfg.SetSeq == nil || cfg.SeqOf == nil || cfg.Timeout <= 0 {
		return nil, errors.New("pipeline: Open, SetSeq, SeqOf and a positive Timeout are required")
	}
	return &Pipeline[Req, Res]{cfg: cfg}, nil
}

// Send numbers req, sends it and calls done exactly once: with its answer,
// or with why there is none (the stream could not be opened or broke, the
// answer did not come within the timeout, the Pipeline closed). done runs
// on the reader goroutine or a timer's, or on this one if the send itself
// fails; it must not block.
func (p *Pipeline[Req, Res]) Send(req *Req, done func(*Res, error)) {
	st, err := p.stream()
	if err != nil {
		done(nil, err)
		return
	}
	p.mu.Lock()
	if p.cur != st { // broke between opening and now
		p.mu.Unlock()
		done(nil, fmt.Errorf("stream broke: %w", ErrClosed))
		return
	}
	st.seq++
	seq := st.seq
	w := &waiter[Res]{done: done}
	w.timer = time.AfterFunc(p.cfg.Timeout, func() { p.expire(st, seq) })
	st.waiting[seq] = w
	p.mu.Unlock()

	p.cfg.SetSeq(req, seq)
	if err := st.s.Send(req); err != nil && !errors.Is(err, io.EOF) {
		p.broke(st, fmt.Errorf("send: %w", err))
	}
	// io.EOF says only that the far end has ended the stream: grpc-go
	// gives the reason (the status) to Recv, so the reader, which gets it
	// next, fails this batch with it.
}

// stream returns the open stream, opening one if there is none. Only the
// single sender opens, so mu need not be held meanwhile; an open that
// has not succeeded within Timeout (a peer still being connected to)
// fails like a batch that got no answer.
func (p *Pipeline[Req, Res]) stream() (*stream[Req, Res], error) {
	p.mu.Lock()
	cur, closed := p.cur, p.closed
	p.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case cur != nil:
		return cur, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop := time.AfterFunc(p.cfg.Timeout, cancel)
	s, err := p.cfg.Open(ctx)
	if !stop.Stop() && err == nil {
		err = fmt.Errorf("open: %w", ErrTimeout)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	st := &stream[Req, Res]{s: s, cancel: cancel, waiting: map[uint64]*waiter[Res]{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		cancel()
		return nil, ErrClosed
	}
	p.cur = st
	p.readers.Add(1)
	go func() {
		defer p.readers.Done()
		p.read(st)
	}()
	return st, nil
}

// read delivers st's answers until it breaks.
func (p *Pipeline[Req, Res]) read(st *stream[Req, Res]) {
	for {
		res, err := st.s.Recv()
		if err != nil {
			p.broke(st, fmt.Errorf("receive: %w", err))
			return
		}
		p.mu.Lock()
		w := st.waiting[p.cfg.SeqOf(res)]
		delete(st.waiting, p.cfg.SeqOf(res))
		p.mu.Unlock()
		if w == nil {
			continue // its batch timed out: the answer came too late
		}
		w.timer.Stop()
		w.done(res, nil)
	}
}

// expire fails batch seq of st, whose answer did not come in time. The
// stream stays: a slow peer may still answer the batches after it.
func (p *Pipeline[Req, Res]) expire(st *stream[Req, Res], seq uint64) {
	p.mu.Lock()
	w := st.waiting[seq]
	delete(st.waiting, seq)
	p.mu.Unlock()
	if w != nil {
		w.done(nil, ErrTimeout)
	}
}

// broke discards st, if it is still the current stream, and fails every
// batch waiting on it with err. The next Send opens a new one.
func (p *Pipeline[Req, Res]) broke(st *stream[Req, Res], err error) {
	p.mu.Lock()
	if p.cur == st {
		p.cur = nil
	}
	waiting := st.waiting
	st.waiting = map[uint64]*waiter[Res]{}
	p.mu.Unlock()
	st.cancel()
	for _, w := range waiting {
		w.timer.Stop()
		w.done(nil, err)
	}
}

// Close fails the batches still waiting, with ErrClosed, ends the stream
// and waits for its reader. Later Sends fail with ErrClosed.
func (p *Pipeline[Req, Res]) Close() {
	p.mu.Lock()
	p.closed = true
	st := p.cur
	p.mu.Unlock()
	if st != nil {
		p.broke(st, ErrClosed)
	}
	p.readers.Wait()
}
