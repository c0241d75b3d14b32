package batch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// The batcher tests drive a batcher whose send is a fake the test answers
// by hand: each send announces itself with the checks it carries, then
// blocks until the test replies. No network.
//
// Most run in a synctest bubble. synctest.Wait returns only once every
// goroutine of the bubble (the batcher's loop, its sends, the callers) is
// blocked, so "every call so far has been taken in by the loop" is a fact,
// not a guess; and the bubble's clock moves only when everything is
// blocked, so time.Since(start) == 0 proves something happened without
// waiting for any timer, and == BatchWait proves the timer did it.

// btSend is one call of the fake send.
type btSend struct {
	reqs  []*pb.CheckRequest
	reply chan btReply
}

type btReply struct {
	results []*pb.CheckResult
	err     error
}

func (s *btSend) keys() []string {
	out := make([]string, len(s.reqs))
	for i, r := range s.reqs {
		out[i] = r.GetKey()
	}
	return out
}

// btEcho answers each check with a response naming its key, so every
// caller can tell whether it got its own answer.
func btEcho(reqs []*pb.CheckRequest) []*pb.CheckResult {
	out := make([]*pb.CheckResult, len(reqs))
	for i, r := range reqs {
		out[i] = &pb.CheckResult{Result: &pb.CheckResult_Response{Response: &pb.CheckResponse{
			Allowed: true, Limit: r.GetLimit(), Owner: r.GetKey()}}}
	}
	return out
}

func (s *btSend) echo()                                 { s.reply <- btReply{results: btEcho(s.reqs)} }
func (s *btSend) answer(res []*pb.CheckResult, e error) { s.reply <- btReply{results: res, err: e} }

// btPeer is the fake far end: its send blocks until the test answers.
type btPeer struct{ sends chan *btSend }

func newBTPeer() *btPeer { return &btPeer{sends: make(chan *btSend, 64)} }

func (p *btPeer) send(reqs []*pb.CheckRequest) ([]*pb.CheckResult, error) {
	s := &btSend{reqs: reqs, reply: make(chan btReply, 1)}
	p.sends <- s
	r := <-s.reply
	return r.results, r.err
}

// next returns the next send, waiting for it as long as it takes: in a
// bubble, if nothing else can happen, the fake clock runs to the next
// timer (and the caller's time assertion says so).
func (p *btPeer) next() *btSend { return <-p.sends }

// nextWithin is next on the real clock, failing the test after d.
func (p *btPeer) nextWithin(t *testing.T, d time.Duration) *btSend {
	t.Helper()
	select {
	case s := <-p.sends:
		return s
	case <-time.After(d):
		t.Fatalf("no send within %s", d)
		return nil
	}
}

// started returns the sends that have started and not been taken yet.
func (p *btPeer) started() []*btSend {
	var out []*btSend
	for {
		select {
		case s := <-p.sends:
			out = append(out, s)
		default:
			return out
		}
	}
}

// none asserts that no send has started.
func (p *btPeer) none(t *testing.T) {
	t.Helper()
	select {
	case s := <-p.sends:
		t.Fatalf("unexpected send of %v", s.keys())
	default:
	}
}

// btCall is one caller of do, running in its own goroutine.
type btCall struct {
	key  string
	res  *pb.CheckResult
	err  error
	done chan struct{}
}

func btDo(ctx context.Context, b *Batcher[*pb.CheckRequest, *pb.CheckResult], key string) *btCall {
	c := &btCall{key: key, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.res, c.err = b.Do(ctx, &pb.CheckRequest{Key: key, Limit: 10, WindowMs: 1000})
	}()
	return c
}

// btDoSettled starts a caller and waits (in a bubble) until it and the
// batcher's loop are blocked again: the call is pending, in flight,
// queued, or answered, whichever the batcher decided.
func btDoSettled(ctx context.Context, b *Batcher[*pb.CheckRequest, *pb.CheckResult], key string) *btCall {
	c := btDo(ctx, b, key)
	synctest.Wait()
	return c
}

func (c *btCall) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// own asserts that the caller got the answer to its own check.
func (c *btCall) own(t *testing.T) {
	t.Helper()
	<-c.done
	require.NoError(t, c.err, c.key)
	assert.Equal(t, c.key, c.res.GetResponse().GetOwner(), "%s got another caller's answer", c.key)
}

func btKeys(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("k%d", i))
	}
	return out
}

// btNoLeaks fails the test if goroutines it started outlive it.
func btNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// An idle link sends each check at once, alone: a BatchWait of an hour
// never comes into it.
func TestBatcherIdleLinkSendsAtOnceAlone(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](8, 4, time.Hour, p.send)
		for _, key := range btKeys(0, 2) {
			start := time.Now()
			c := btDo(context.Background(), b, key)
			s := p.next()
			assert.Equal(t, []string{key}, s.keys())
			assert.Zero(t, time.Since(start), "sent without waiting for BatchWait")
			s.echo()
			c.own(t)
		}
		b.Close()
	})
}

// The same on the real clock: with BatchWait an hour, each call must come
// back within its 10s deadline, in a send of its own.
func TestBatcherIdleLinkSendsAtOnceRealClock(t *testing.T) {
	btNoLeaks(t)
	var sizes []int
	b := New[*pb.CheckRequest, *pb.CheckResult](8, 4, time.Hour, func(reqs []*pb.CheckRequest) ([]*pb.CheckResult, error) {
		sizes = append(sizes, len(reqs)) // one send at a time: the calls are sequential
		return btEcho(reqs), nil
	})
	defer b.Close()
	for _, key := range btKeys(0, 4) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := b.Do(ctx, &pb.CheckRequest{Key: key, Limit: 1, WindowMs: 1000})
		cancel()
		require.NoError(t, err, "an idle batcher must not wait for BatchWait")
		assert.Equal(t, key, res.GetResponse().GetOwner())
	}
	assert.Equal(t, []int{1, 1, 1, 1, 1}, sizes)
}

// While a call is in flight, later calls gather; when it returns they go
// in as few sends as BatchLimit allows (10 calls, limit 4: 4, 4, 2), each
// caller getting its own answer, in order.
func TestBatcherGathersCallsWhileOneIsInFlight(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](4, 1, time.Hour, p.send)
		start := time.Now()
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()
		require.Equal(t, []string{"k0"}, s0.keys())

		var calls []*btCall
		for _, key := range btKeys(1, 10) {
			calls = append(calls, btDoSettled(context.Background(), b, key))
		}
		p.none(t) // all gathered behind k0, none sent

		s0.echo()
		first.own(t)
		var got [][]string
		for range 3 {
			s := p.next()
			synctest.Wait() // let the loop take in what it can before this send ends
			got = append(got, s.keys())
			s.echo()
		}
		assert.Equal(t, [][]string{btKeys(1, 4), btKeys(5, 8), btKeys(9, 10)}, got)
		for _, c := range calls {
			c.own(t)
		}
		synctest.Wait()
		p.none(t)
		assert.Zero(t, time.Since(start), "no BatchWait timer was involved")
		b.Close()
	})
}

// A full batch goes at once, an hour's BatchWait notwithstanding, if a send
// slot is free; with every slot taken (MaxInflight) it waits for one.
func TestBatcherSendsFullBatchWithoutWaiting(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](3, 2, time.Hour, p.send)
		start := time.Now()
		first := btDo(context.Background(), b, "k0")
		s0 := p.next() // idle link: alone, at once; one slot of two now taken

		var calls []*btCall
		for _, key := range btKeys(1, 2) {
			calls = append(calls, btDoSettled(context.Background(), b, key))
			p.none(t) // a partial batch waits while k0 is in flight
		}
		calls = append(calls, btDoSettled(context.Background(), b, "k3"))
		s1 := p.next()
		assert.Equal(t, btKeys(1, 3), s1.keys(), "full: sent with a slot free")
		assert.Zero(t, time.Since(start), "without waiting for BatchWait")

		// Both slots taken: a full batch has to wait for one.
		for _, key := range btKeys(4, 6) {
			calls = append(calls, btDoSettled(context.Background(), b, key))
		}
		p.none(t)
		s0.echo()
		first.own(t)
		s2 := p.next()
		assert.Equal(t, btKeys(4, 6), s2.keys(), "sent when a slot freed")
		s1.echo()
		s2.echo()
		for _, c := range calls {
			c.own(t)
		}
		assert.Zero(t, time.Since(start))
		b.Close()
	})
}

// With a send in flight and a slot free, a partial batch goes when
// BatchWait has passed since its first check: not before, and not later
// because more checks joined it.
func TestBatcherTimerFlushesPartialBatch(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](4, 2, 5*time.Millisecond, p.send)
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()

		start := time.Now()
		c1 := btDoSettled(context.Background(), b, "k1")
		time.Sleep(3 * time.Millisecond) // fake clock
		p.none(t)
		c2 := btDoSettled(context.Background(), b, "k2")
		p.none(t)
		s1 := p.next() // nothing else can happen: the clock runs to the timer
		assert.Equal(t, btKeys(1, 2), s1.keys())
		assert.Equal(t, 5*time.Millisecond, time.Since(start))
		assert.False(t, first.finished(), "k0 still in flight")
		s1.echo()
		c1.own(t)
		c2.own(t)
		s0.echo()
		first.own(t)
		b.Close()
	})
}

// The same on the real clock, polling with a deadline: the only thing
// that can send k1 while k0 is held in flight is the 5ms timer.
func TestBatcherTimerFlushesPartialBatchRealClock(t *testing.T) {
	btNoLeaks(t)
	p := newBTPeer()
	b := New[*pb.CheckRequest, *pb.CheckResult](4, 2, 5*time.Millisecond, p.send)
	defer b.Close()
	first := btDo(context.Background(), b, "k0")
	s0 := p.nextWithin(t, 10*time.Second)
	defer s0.echo() // never leave a send blocked, even on failure

	start := time.Now()
	c1 := btDo(context.Background(), b, "k1")
	s1 := p.nextWithin(t, 10*time.Second)
	elapsed := time.Since(start)
	assert.Equal(t, []string{"k1"}, s1.keys())
	assert.GreaterOrEqual(t, elapsed, 5*time.Millisecond, "not before BatchWait")
	assert.False(t, first.finished(), "k0 still in flight")
	s1.echo()
	c1.own(t)
}

// Every caller gets its own answer; an error of the send, or an answer of
// the wrong length, goes to every call of that batch and no other.
func TestBatcherResultsReachTheirCallers(t *testing.T) {
	errSend := errors.New("connection reset")
	perCheckErr := &pb.CheckResult{Result: &pb.CheckResult_Error{Error: &pb.Error{Code: 3, Field: "limit", Message: "bad"}}}
	for _, tc := range []struct {
		name  string
		reply func(s *btSend)
		check func(t *testing.T, calls []*btCall)
	}{{
		name: "own results, a per-check error included",
		reply: func(s *btSend) {
			res := btEcho(s.reqs)
			res[1] = perCheckErr
			s.answer(res, nil)
		},
		check: func(t *testing.T, calls []*btCall) {
			calls[0].own(t)
			<-calls[1].done
			require.NoError(t, calls[1].err)
			assert.Equal(t, "limit", calls[1].res.GetError().GetField())
			calls[2].own(t)
		},
	}, {
		name:  "send error",
		reply: func(s *btSend) { s.answer(nil, errSend) },
		check: func(t *testing.T, calls []*btCall) {
			for _, c := range calls {
				<-c.done
				assert.ErrorIs(t, c.err, errSend, c.key)
				assert.Nil(t, c.res)
			}
		},
	}, {
		name:  "too few results",
		reply: func(s *btSend) { s.answer(btEcho(s.reqs)[:2], nil) },
		check: func(t *testing.T, calls []*btCall) {
			for _, c := range calls {
				<-c.done
				assert.ErrorContains(t, c.err, "different number", c.key)
				assert.Nil(t, c.res)
			}
		},
	}, {
		name:  "too many results",
		reply: func(s *btSend) { s.answer(append(btEcho(s.reqs), perCheckErr), nil) },
		check: func(t *testing.T, calls []*btCall) {
			for _, c := range calls {
				<-c.done
				assert.ErrorContains(t, c.err, "different number", c.key)
			}
		},
	}, {
		name:  "no results, no error",
		reply: func(s *btSend) { s.answer(nil, nil) },
		check: func(t *testing.T, calls []*btCall) {
			for _, c := range calls {
				<-c.done
				assert.ErrorContains(t, c.err, "different number", c.key)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			btNoLeaks(t)
			synctest.Test(t, func(t *testing.T) {
				p := newBTPeer()
				b := New[*pb.CheckRequest, *pb.CheckResult](3, 2, time.Hour, p.send)
				first := btDo(context.Background(), b, "k0")
				s0 := p.next()
				var calls []*btCall
				for _, key := range btKeys(1, 3) {
					calls = append(calls, btDoSettled(context.Background(), b, key))
				}
				s1 := p.next()
				require.Equal(t, btKeys(1, 3), s1.keys())
				tc.reply(s1)
				tc.check(t, calls)
				assert.False(t, first.finished(), "another batch is not affected")
				s0.echo()
				first.own(t)
				b.Close()
			})
		})
	}
}

// A caller whose context ends while its check waits gets ctx.Err() at once
// (cancel) or at its deadline; the other callers are unaffected.
func TestBatcherCallerContextEnds(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](4, 1, time.Hour, p.send)
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()

		ctx1, cancel1 := context.WithCancel(context.Background())
		c1 := btDoSettled(ctx1, b, "k1")
		c2 := btDoSettled(context.Background(), b, "k2")
		start := time.Now()
		cancel1()
		synctest.Wait()
		require.True(t, c1.finished(), "a cancelled caller returns at once")
		assert.ErrorIs(t, c1.err, context.Canceled)
		assert.Nil(t, c1.res)
		assert.Zero(t, time.Since(start))

		ctx3, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel3()
		c3 := btDoSettled(ctx3, b, "k3")
		<-c3.done
		assert.ErrorIs(t, c3.err, context.DeadlineExceeded)
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "returned at its deadline")

		assert.False(t, c2.finished())
		assert.False(t, first.finished())
		p.none(t)
		s0.echo()
		first.own(t)
		s1 := p.next()
		// k1 and k3 gave up before they were sent; the batcher sends them
		// anyway (nothing unsends a pending call). Only k2's answer matters.
		assert.Contains(t, s1.keys(), "k2")
		s1.echo()
		c2.own(t)
		b.Close()
	})
}

// Close fails the checks not yet sent with ErrClosed, at once, and
// waits for the ones in flight, which get their answers.
func TestBatcherCloseFailsPendingAndWaitsForInflight(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](4, 1, time.Hour, p.send)
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()
		c1 := btDoSettled(context.Background(), b, "k1")
		c2 := btDoSettled(context.Background(), b, "k2")

		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		synctest.Wait()
		for _, c := range []*btCall{c1, c2} {
			require.True(t, c.finished(), c.key)
			assert.ErrorIs(t, c.err, ErrClosed, c.key)
		}
		select {
		case <-closed:
			t.Fatal("close returned with a send in flight")
		default:
		}
		assert.False(t, first.finished())

		s0.echo()
		<-closed
		first.own(t)
		p.none(t)
	})
}

// After Close, Do fails with ErrClosed rather than waiting.
func TestBatcherDoAfterCloseFails(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		b := New[*pb.CheckRequest, *pb.CheckResult](4, 1, time.Hour, newBTPeer().send)
		b.Close()
		for i := range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := b.Do(ctx, &pb.CheckRequest{Key: "k", Limit: 1, WindowMs: 1000})
			cancel()
			require.ErrorIs(t, err, ErrClosed, "call %d after close", i)
		}
	})
}

// Calls that reached the batcher's queue (b.in) but not its pending list
// when close ran must fail with ErrClosed too.
func TestBatcherCloseFailsQueuedCalls(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](2, 1, time.Hour, p.send)
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()
		// k1, k2 pending (= MaxInflight*BatchLimit: the loop stops taking
		// more); k3, k4 wait in the queue.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var calls []*btCall
		for _, key := range btKeys(1, 4) {
			calls = append(calls, btDoSettled(ctx, b, key))
		}
		require.Len(t, b.in, 2, "k3 and k4 are queued")
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		synctest.Wait()
		s0.echo()
		<-closed
		first.own(t)
		for _, c := range calls {
			<-c.done
			assert.ErrorIs(t, c.err, ErrClosed, c.key)
		}
	})
}

// Backpressure: with MaxInflight sends stuck and MaxInflight*BatchLimit
// checks pending, the batcher takes no more than its queue holds
// (BatchLimit); further callers wait in do until their deadline, and are
// never sent.
func TestBatcherBackpressureBoundsWaitingCalls(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		const limit, inflight = 2, 2
		p := newBTPeer()
		b := New[*pb.CheckRequest, *pb.CheckResult](limit, inflight, time.Hour, p.send)
		var calls []*btCall
		calls = append(calls, btDoSettled(context.Background(), b, "k0")) // idle: alone
		calls = append(calls, btDoSettled(context.Background(), b, "k1"))
		calls = append(calls, btDoSettled(context.Background(), b, "k2")) // full: sent
		s0, s1 := p.next(), p.next()
		require.Equal(t, []string{"k0"}, s0.keys())
		require.Equal(t, btKeys(1, 2), s1.keys())

		for _, key := range btKeys(3, 8) { // 4 pending, then 2 queued
			calls = append(calls, btDoSettled(context.Background(), b, key))
		}
		p.none(t)
		require.Equal(t, limit, len(b.in), "the queue is full: the loop stopped taking calls")

		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var blocked []*btCall
		for _, key := range btKeys(9, 11) {
			blocked = append(blocked, btDoSettled(ctx, b, key))
		}
		for _, c := range blocked {
			assert.False(t, c.finished(), "%s waits for room", c.key)
		}
		for _, c := range blocked {
			<-c.done
			assert.ErrorIs(t, c.err, context.DeadlineExceeded, c.key)
		}
		assert.Equal(t, time.Second, time.Since(start), "they waited for their deadline")
		assert.Equal(t, limit, len(b.in), "and never got in")

		// Release the sends one at a time (each frees one slot, so at most
		// one new send starts): everything accepted goes, in order, in
		// full batches; nothing else does.
		sent := append(s0.keys(), s1.keys()...)
		held := []*btSend{s0, s1}
		for len(held) > 0 {
			held[0].echo()
			held = held[1:]
			synctest.Wait()
			for _, s := range p.started() {
				assert.Len(t, s.reqs, limit)
				sent = append(sent, s.keys()...)
				held = append(held, s)
			}
		}
		assert.Equal(t, btKeys(0, 8), sent, "accepted: %d pending + %d queued + the %d in flight", inflight*limit, limit, inflight*limit-1)
		for _, c := range calls {
			c.own(t)
		}
		b.Close()
	})
}
