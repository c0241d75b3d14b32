// Package batch coalesces concurrent calls into batched ones: the
// forwarding of checks between nodes and the client's coalescing of checks
// bound for one node both use it.
package batch

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed fails the calls of a closed Batcher.
var ErrClosed = errors.New("batcher closed")

// call is one request waiting for its answer.
type call[Req, Res any] struct {
	req  Req
	res  Res
	err  error
	done chan struct{}
}

// Batcher coalesces concurrent requests to one destination into batched
// sends. It sends at once when no send is in flight (an idle link gains
// nothing by waiting); otherwise requests gather until the batch is full
// or wait has passed since the first of them, and at most maxInflight sends
// run at a time. Under load this is group commit: the busier the link, the
// bigger the batches, the lower the cost per request. With several
// batches' worth waiting it stops accepting, so callers wait (bounded by
// their contexts) instead of memory growing.
//
// send must return one result per request, in order; it runs on one of
// maxInflight sender goroutines, which live as long as the Batcher: a
// goroutine per send grew its stack through the whole gRPC call path every
// time (runtime.newstack and copystack were 9% of a forwarding node's CPU,
// 6% of a coalescing client's). Safe for concurrent use.
type Batcher[Req, Res any] struct {
	limit       int
	maxInflight int
	wait        time.Duration
	send        func(reqs []Req) ([]Res, error)

	in   chan *call[Req, Res]
	stop chan struct{}
	done chan struct{}
}

// New starts a Batcher; Close stops it.
func New[Req, Res any](limit, maxInflight int, wait time.Duration, send func([]Req) ([]Res, error)) *Batcher[Req, Res] {
	limit, maxInflight = max(limit, 1), max(maxInflight, 1) // with 0, nothing would ever be sent
	b := &Batcher[Req, Res]{limit: limit, maxInflight: maxInflight, wait: wait, send: send,
		in: make(chan *call[Req, Res], limit), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// Do sends req with others and waits for its answer or ctx. If ctx ends
// after req was sent, the destination may still act on it.
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (res Res, err error) {
	c := &call[Req, Res]{req: req, done: make(chan struct{})}
	select {
	case b.in <- c:
	case <-ctx.Done():
		return res, ctx.Err()
	case <-b.stop:
		return res, ErrClosed
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-b.done:
		// run has stopped; c may have been answered just before.
		select {
		case <-c.done:
			return c.res, c.err
		default:
			return res, ErrClosed
		}
	case <-ctx.Done():
		return res, ctx.Err()
	}
}

// Close fails what has not been sent, waits for what has, and stops.
func (b *Batcher[Req, Res]) Close() {
	close(b.stop)
	<-b.done
}

func (b *Batcher[Req, Res]) run() {
	defer close(b.done)
	var (
		pending  []*call[Req, Res]
		inflight int
		senders  sync.WaitGroup
		timer    = time.NewTimer(time.Hour)
		timerOn  bool
		// Both hold at most maxInflight, the most batches ever out, so
		// neither side ever blocks on them.
		sends    = make(chan []*call[Req, Res], b.maxInflight)
		finished = make(chan struct{}, b.maxInflight)
	)
	for range b.maxInflight {
		senders.Go(func() {
			for batch := range sends {
				b.exchange(batch)
				finished <- struct{}{}
			}
		})
	}
	timer.Stop()
	defer timer.Stop()
	flush := func() {
		for len(pending) > 0 && inflight < b.maxInflight {
			n := min(len(pending), b.limit)
			batch := append([]*call[Req, Res](nil), pending[:n]...)
			pending = pending[n:]
			inflight++
			sends <- batch
		}
		if len(pending) == 0 {
			pending = nil // let the backing array go
			if timerOn {
				timer.Stop()
				timerOn = false
			}
		}
	}
	in := b.in
	for {
		select {
		case c := <-in:
			pending = append(pending, c)
			switch {
			case len(pending) >= b.limit || inflight == 0:
				flush()
			case !timerOn:
				timer.Reset(b.wait)
				timerOn = true
			}
		case <-timer.C:
			timerOn = false
			flush()
		case <-finished:
			inflight--
			flush() // what gathered meanwhile goes now
		case <-b.stop:
			for _, c := range pending {
				c.err = ErrClosed
				close(c.done)
			}
			// Calls still queued, or queued by a Do racing Close, get
			// ErrClosed from Do once done is closed. Batches already
			// handed to the senders are sent and answered.
			close(sends)
			senders.Wait()
			return
		}
		// Backpressure: with several batches' worth waiting, stop taking
		// more; callers then wait in do, bounded by their contexts.
		if len(pending) >= b.maxInflight*b.limit {
			in = nil
		} else {
			in = b.in
		}
	}
}

func (b *Batcher[Req, Res]) exchange(batch []*call[Req, Res]) {
	reqs := make([]Req, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	results, err := b.send(reqs)
	if err == nil && len(results) != len(batch) {
		err = errors.New("batch answered with a different number of results")
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.res = results[i]
		}
		close(c.done)
	}
}
