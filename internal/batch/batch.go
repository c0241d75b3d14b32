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
// send must return one result per request, in order; it runs on its own
// goroutine, at most maxInflight at once. Safe for concurrent use.
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
		wg       sync.WaitGroup
		timer    = time.NewTimer(time.Hour)
		timerOn  bool
		finished = make(chan struct{}, b.maxInflight) // never blocks a sender
	)
	timer.Stop()
	defer timer.Stop()
	flush := func() {
		for len(pending) > 0 && inflight < b.maxInflight {
			n := min(len(pending), b.limit)
			batch := append([]*call[Req, Res](nil), pending[:n]...)
			pending = pending[n:]
			inflight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.exchange(batch)
				finished <- struct{}{}
			}()
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
			// ErrClosed from Do once done is closed.
			wg.Wait()
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
