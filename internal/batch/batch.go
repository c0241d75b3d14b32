// Package batch coalesces concurrent calls into batched ones: the
// forwarding of checks between nodes and the client's coalescing of checks
// bound for one node both use it.
package batch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrClosed fails the calls of a closed Batcher.
var ErrClosed = errors.New("batcher closed")

// SendFunc sends reqs as one batch and calls done exactly once, with one
// result per request, in order, or with an error for them all. It may call
// done before it returns (a send that waits for its answer, such as a
// unary call) or later, on another goroutine (a stream's reader); done
// does not block. The Batcher never runs two SendFuncs at once, so a send
// may write to a stream that allows one writer at a time.
type SendFunc[Req, Res any] func(reqs []Req, done func([]Res, error))

// Config bounds a Batcher.
type Config struct {
	// Limit is the most requests one batch carries.
	Limit int
	// Window is the most batches in flight at once (sent, not yet
	// answered). With all of them out, new requests wait, and go in the
	// next batch as soon as one is answered. 1 is group commit at its
	// leanest: under load, a batch carries everything that arrived while
	// the one before was out.
	Window int
}

// Validate reports an unusable Config.
func (c Config) Validate() error {
	if c.Limit < 1 || c.Window < 1 {
		return fmt.Errorf("batch: Limit and Window must be ≥ 1, got %d and %d", c.Limit, c.Window)
	}
	return nil
}

// Batcher coalesces concurrent requests to one destination into batches.
// A request on an idle link goes at once, alone, on its caller's
// goroutine: nothing waits for a batch to fill. While Window batches are
// out, requests gather, and whoever learns that one was answered (the
// goroutine that received the answer) sends the next, with everything
// that gathered, up to Limit. So the busier the link, the bigger the
// batches and the lower the cost per request, and a request costs its
// caller no goroutine hand-off beyond being woken with its answer: the
// Batcher has no goroutine of its own.
//
// At most twice what the window holds (2 × Window × Limit) wait to be
// sent; a caller past that waits for room, bounded by its context, so
// memory does not grow with a slow destination. Safe for concurrent use.
type Batcher[Req, Res any] struct {
	cfg  Config
	send SendFunc[Req, Res]

	mu       sync.Mutex
	pending  []*call[Req, Res] // waiting to be sent, in arrival order
	inflight int               // batches sent and not yet answered
	flushing bool              // a goroutine is sending: no other may
	closed   bool
	waiting  int           // callers waiting for room
	room     chan struct{} // closed (and replaced) to wake them

	busy sync.WaitGroup // batches in flight and flushes under way, for Close
}

// call is one request waiting for its answer. The calls of one DoAll
// share their done channel, closed when the last of them is answered:
// one channel for a caller's batch, not one per request.
type call[Req, Res any] struct {
	req   Req
	res   Res
	err   error
	done  chan struct{}
	group *atomic.Int32 // DoAll: how many of the calls sharing done are unanswered
}

// answer records c's result and, once it (or its whole group) is
// answered, closes done.
func (c *call[Req, Res]) answer(res Res, err error) {
	c.res, c.err = res, err
	if c.group == nil || c.group.Add(-1) == 0 {
		close(c.done)
	}
}

// New returns a Batcher sending through send.
func New[Req, Res any](cfg Config, send SendFunc[Req, Res]) (*Batcher[Req, Res], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Batcher[Req, Res]{cfg: cfg, send: send, room: make(chan struct{})}, nil
}

// Do sends req with others and waits for its answer or ctx. If ctx ends
// after req was sent, the destination may still act on it.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (res Res, err error) {
	c := &call[Req, Res]{req: req, done: make(chan struct{})}
	if err := b.enqueue(ctx, c); err != nil {
		return res, err
	}
	b.flush(c)
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return res, ctx.Err()
	}
}

// DoAll sends reqs, which go in as few batches as Limit allows (with
// others' requests), and waits for every answer or ctx: a caller that has
// a batch already need not wait for each request in turn. The error is
// ctx's or ErrClosed; a batch's send error is in each of its results'
// errs.
func (b *Batcher[Req, Res]) DoAll(ctx context.Context, reqs []Req) (res []Res, errs []error, err error) {
	if len(reqs) == 0 {
		return nil, nil, nil
	}
	done, left := make(chan struct{}), new(atomic.Int32)
	left.Store(int32(len(reqs)))
	calls := make([]call[Req, Res], len(reqs))
	for i := range calls {
		calls[i] = call[Req, Res]{req: reqs[i], done: done, group: left}
	}
	for i := 0; i < len(calls); {
		if n := b.enqueueSome(calls[i:]); n > 0 {
			i += n
			continue
		}
		// No room: send what is pending first, which makes room (more
		// than the bound would otherwise wait forever), then wait for it.
		b.flush(&calls[0])
		if err := b.enqueue(ctx, &calls[i]); err != nil {
			return nil, nil, err
		}
		i++
	}
	b.flush(&calls[0]) // together, as far as Limit allows
	select {
	case <-done:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	res, errs = make([]Res, len(reqs)), make([]error, len(reqs))
	for i := range calls {
		res[i], errs[i] = calls[i].res, calls[i].err
	}
	return res, errs, nil
}

// enqueueSome adds as many of calls to the pending requests as there is
// room for, and returns how many.
func (b *Batcher[Req, Res]) enqueueSome(calls []call[Req, Res]) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0
	}
	n := min(len(calls), b.maxPending()-len(b.pending))
	for i := range n {
		b.pending = append(b.pending, &calls[i])
	}
	return max(n, 0)
}

// enqueue adds c to the pending requests, once there is room for it.
func (b *Batcher[Req, Res]) enqueue(ctx context.Context, c *call[Req, Res]) error {
	b.mu.Lock()
	for !b.closed && len(b.pending) >= b.maxPending() {
		room := b.room
		b.waiting++
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			b.mu.Lock()
			b.waiting--
			b.mu.Unlock()
			return ctx.Err()
		}
		b.mu.Lock()
		b.waiting--
	}
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	b.pending = append(b.pending, c)
	return nil
}

func (b *Batcher[Req, Res]) maxPending() int { return 2 * b.cfg.Limit * b.cfg.Window }

// flush sends pending batches while the window has room, on this
// goroutine, unless another goroutine is sending already (it will send
// these too). A caller (own set) stops once its own request is answered,
// which a send that waits for its answer does before it returns; if
// requests are still pending then, a new goroutine carries on, so that no
// caller is kept sending other callers' batches under sustained load.
func (b *Batcher[Req, Res]) flush(own *call[Req, Res]) {
	b.mu.Lock()
	if b.flushing {
		b.mu.Unlock()
		return
	}
	b.flushing = true
	for b.canSend() && (own == nil || !own.answered()) {
		batch := b.take()
		b.mu.Unlock()
		b.sendBatch(batch)
		b.mu.Lock()
	}
	b.flushing = false
	more := b.canSend()
	if more {
		b.busy.Add(1)
	}
	b.mu.Unlock()
	if more {
		go func() {
			defer b.busy.Done()
			b.flush(nil)
		}()
	}
}

// canSend reports whether a batch should go now. Requires b.mu held.
func (b *Batcher[Req, Res]) canSend() bool {
	return len(b.pending) > 0 && b.inflight < b.cfg.Window && !b.closed
}

// take removes the next batch from pending and counts it in flight.
// Requires b.mu held.
func (b *Batcher[Req, Res]) take() []*call[Req, Res] {
	n := min(len(b.pending), b.cfg.Limit)
	batch := append([]*call[Req, Res](nil), b.pending[:n]...)
	clear(b.pending[:n]) // let answered calls go
	b.pending = b.pending[n:]
	if len(b.pending) == 0 {
		b.pending = nil // let the backing array go
	}
	if b.waiting > 0 {
		close(b.room)
		b.room = make(chan struct{})
	}
	b.inflight++
	b.busy.Add(1)
	return batch
}

// sendBatch sends batch and, when its answer comes, hands each request
// its result and sends what gathered meanwhile.
func (b *Batcher[Req, Res]) sendBatch(batch []*call[Req, Res]) {
	reqs := make([]Req, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	b.send(reqs, func(results []Res, err error) {
		if err == nil && len(results) != len(batch) {
			err = fmt.Errorf("batch of %d answered with %d results", len(batch), len(results))
		}
		for i, c := range batch {
			var res Res
			if err == nil {
				res = results[i]
			}
			c.answer(res, err)
		}
		b.mu.Lock()
		b.inflight--
		b.mu.Unlock()
		b.flush(nil) // this goroutine learnt of the free slot: it sends next
		b.busy.Done()
	})
}

func (c *call[Req, Res]) answered() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Close fails what has not been sent with ErrClosed, and waits for the
// batches in flight to be answered (their SendFunc must call done, if
// only with an error, for Close to return).
func (b *Batcher[Req, Res]) Close() {
	b.mu.Lock()
	b.closed = true
	pending := b.pending
	b.pending = nil
	close(b.room) // callers waiting for room see closed
	b.room = make(chan struct{})
	b.mu.Unlock()
	for _, c := range pending {
		var zero Res
		c.answer(zero, ErrClosed)
	}
	b.busy.Wait()
}
