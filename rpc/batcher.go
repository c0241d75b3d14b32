package rpc

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// errPeerClosed fails calls to a peer that left the membership.
var errPeerClosed = errors.New("peer connection closed")

// call is one forwarded check waiting for its answer.
type call struct {
	req  *pb.CheckRequest
	res  *pb.CheckResult
	err  error
	done chan struct{}
}

// batcher coalesces the forwarded checks bound for one peer into Forward
// calls. It sends at once when no call to the peer is in flight (an idle
// link gains nothing by waiting); otherwise checks gather until the batch
// is full or wait has passed since the first of them, and at most
// maxInflight calls run at a time. Under load this is group commit: the
// busier the link, the bigger the batches, the lower the cost per check.
type batcher struct {
	limit       int
	maxInflight int
	wait        time.Duration
	send        func(reqs []*pb.CheckRequest) ([]*pb.CheckResult, error)

	in   chan *call
	stop chan struct{}
	done chan struct{}
}

func newBatcher(limit, maxInflight int, wait time.Duration, send func([]*pb.CheckRequest) ([]*pb.CheckResult, error)) *batcher {
	b := &batcher{limit: limit, maxInflight: maxInflight, wait: wait, send: send,
		in: make(chan *call, limit), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// do forwards one check and waits for its answer or ctx. If ctx ends after
// the check was sent, the owner may still count it.
func (b *batcher) do(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResult, error) {
	c := &call{req: req, done: make(chan struct{})}
	select {
	case b.in <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.stop:
		return nil, errPeerClosed
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
			return nil, errPeerClosed
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close fails what has not been sent, waits for what has, and stops run.
func (b *batcher) close() {
	close(b.stop)
	<-b.done
}

func (b *batcher) run() {
	defer close(b.done)
	var (
		pending  []*call
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
			batch := append([]*call(nil), pending[:n]...)
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
				c.err = errPeerClosed
				close(c.done)
			}
			// Calls still queued, or queued by a do racing close, get
			// errPeerClosed from do once done is closed.
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

func (b *batcher) exchange(batch []*call) {
	reqs := make([]*pb.CheckRequest, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	results, err := b.send(reqs)
	if err == nil && len(results) != len(batch) {
		err = errors.New("peer answered a different number of checks")
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
