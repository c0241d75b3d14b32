package batch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The batcher tests drive a batcher whose send is a fake the test answers
// by hand, as a stream's reader would: each send records the requests it
// carries and returns at once; the test calls its done later, from its own
// goroutine. No network.
//
// They run in a synctest bubble: synctest.Wait returns only once every
// goroutine of the bubble is blocked, so "every call so far has been taken
// in" is a fact, not a guess, and the bubble's clock moves only when
// everything is blocked, so time.Since(start) == 0 proves that nothing
// waited for a timer.

// btSend is one batch handed to the fake send.
type btSend struct {
	reqs []string
	done func([]string, error)
}

// btPeer is the fake far end: sends are recorded, answered by the test.
type btPeer struct {
	mu    sync.Mutex
	sends []*btSend
	// writers counts sends running at once: the Batcher must never run
	// two (a stream allows one writer).
	writers, maxWriters int
}

func (p *btPeer) send(reqs []string, done func([]string, error)) {
	p.mu.Lock()
	p.writers++
	p.maxWriters = max(p.maxWriters, p.writers)
	p.sends = append(p.sends, &btSend{reqs: reqs, done: done})
	p.writers--
	p.mu.Unlock()
}

// next returns the oldest unanswered send, or nil.
func (p *btPeer) next() *btSend {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sends) == 0 {
		return nil
	}
	s := p.sends[0]
	p.sends = p.sends[1:]
	return s
}

// echo answers each request with itself, so every caller can tell whether
// it got its own answer.
func (s *btSend) echo() { s.done(append([]string(nil), s.reqs...), nil) }

// btCall is one caller of Do, running in its own goroutine.
type btCall struct {
	key  string
	res  string
	err  error
	done chan struct{}
}

func btDo(ctx context.Context, b *Batcher[string, string], key string) *btCall {
	c := &btCall{key: key, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.res, c.err = b.Do(ctx, key)
	}()
	synctest.Wait() // it has sent, or is waiting: whichever the batcher decided
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

// own asserts that the caller got the answer to its own request.
func (c *btCall) own(t *testing.T) {
	t.Helper()
	<-c.done
	require.NoError(t, c.err, c.key)
	assert.Equal(t, c.key, c.res, "%s got another caller's answer", c.key)
}

func btKeys(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("k%d", i))
	}
	return out
}

func newBT(t *testing.T, limit, window int) (*Batcher[string, string], *btPeer) {
	t.Helper()
	p := &btPeer{}
	b, err := New(Config{Limit: limit, Window: window}, p.send)
	require.NoError(t, err)
	return b, p
}

// btNoLeaks fails the test if goroutines it started outlive it.
func btNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Limit: 0, Window: 1}, {Limit: 1, Window: 0}, {Limit: -1, Window: -1}} {
		_, err := New(c, (&btPeer{}).send)
		assert.ErrorContains(t, err, "Limit and Window must be ≥ 1")
	}
}

// An idle link sends each request at once, alone, on its caller's
// goroutine: nothing waits for a batch to fill.
func TestIdleLinkSendsAtOnceAlone(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		b, p := newBT(t, 8, 1)
		for _, key := range btKeys(0, 2) {
			start := time.Now()
			c := btDo(context.Background(), b, key)
			s := p.next()
			require.NotNil(t, s, "sent before its caller waits")
			assert.Equal(t, []string{key}, s.reqs)
			assert.Zero(t, time.Since(start))
			s.echo()
			c.own(t)
		}
		b.Close()
	})
}

// While the window is full, later requests gather; each answer lets the
// next batch go with everything that gathered, up to Limit (7 requests,
// limit 3: 3, 3, 1), each caller getting its own answer.
func TestRequestsGatherWhileTheWindowIsFull(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		b, p := newBT(t, 3, 1)
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()
		require.Equal(t, []string{"k0"}, s0.reqs)
		var calls []*btCall
		for _, key := range btKeys(1, 6) {
			calls = append(calls, btDo(context.Background(), b, key))
		}
		assert.Nil(t, p.next(), "all gathered behind k0, none sent")

		s0.echo()
		first.own(t)
		calls = append(calls, btDo(context.Background(), b, "k7"))
		var got [][]string
		for s := p.next(); s != nil; s = p.next() {
			got = append(got, s.reqs)
			s.echo() // answered on this goroutine: it sends the next batch
		}
		assert.Equal(t, [][]string{btKeys(1, 3), btKeys(4, 6), {"k7"}}, got)
		for _, c := range calls {
			c.own(t)
		}
		assert.Zero(t, p.maxWriters-1, "one send at a time")
		b.Close()
	})
}

// A window of 2 keeps two batches out at once; a third waits for either.
func TestWindowPipelinesBatches(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		b, p := newBT(t, 2, 2)
		calls := []*btCall{btDo(context.Background(), b, "k0"), btDo(context.Background(), b, "k1")}
		s0, s1 := p.next(), p.next()
		require.NotNil(t, s1, "a second batch goes before the first is answered")
		assert.Equal(t, []string{"k0"}, s0.reqs)
		assert.Equal(t, []string{"k1"}, s1.reqs)
		calls = append(calls, btDo(context.Background(), b, "k2"), btDo(context.Background(), b, "k3"))
		assert.Nil(t, p.next(), "window full")
		s1.echo()
		s2 := p.next()
		require.NotNil(t, s2)
		assert.Equal(t, btKeys(2, 3), s2.reqs)
		s0.echo()
		s2.echo()
		for _, c := range calls {
			c.own(t)
		}
		b.Close()
	})
}

// Every caller gets its own answer; an error of the send, or an answer of
// the wrong length, goes to every request of that batch and no other.
func TestResultsReachTheirCallers(t *testing.T) {
	errSend := errors.New("connection reset")
	for _, tc := range []struct {
		name  string
		reply func(s *btSend)
		want  func(t *testing.T, c *btCall)
	}{
		{"own results", (*btSend).echo, func(t *testing.T, c *btCall) { c.own(t) }},
		{"send error", func(s *btSend) { s.done(nil, errSend) }, func(t *testing.T, c *btCall) {
			<-c.done
			assert.ErrorIs(t, c.err, errSend, c.key)
			assert.Empty(t, c.res)
		}},
		{"too few results", func(s *btSend) { s.done(s.reqs[:1], nil) }, func(t *testing.T, c *btCall) {
			<-c.done
			assert.ErrorContains(t, c.err, "batch of 3 answered with 1 results", c.key)
		}},
		{"too many results", func(s *btSend) { s.done(append(s.reqs, "x"), nil) }, func(t *testing.T, c *btCall) {
			<-c.done
			assert.ErrorContains(t, c.err, "answered with 4 results", c.key)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			btNoLeaks(t)
			synctest.Test(t, func(t *testing.T) {
				b, p := newBT(t, 3, 1)
				first := btDo(context.Background(), b, "k0")
				s0 := p.next()
				var calls []*btCall
				for _, key := range btKeys(1, 3) {
					calls = append(calls, btDo(context.Background(), b, key))
				}
				s0.echo()
				first.own(t)
				s1 := p.next()
				require.Equal(t, btKeys(1, 3), s1.reqs)
				tc.reply(s1)
				for _, c := range calls {
					tc.want(t, c)
				}
				b.Close()
			})
		})
	}
}

// A caller whose context ends while its request waits gets ctx.Err() at
// once; the request still goes (nothing unsends it), and the others are
// unaffected.
func TestCallerContextEnds(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		b, p := newBT(t, 4, 1)
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()
		ctx, cancel := context.WithCancel(context.Background())
		c1 := btDo(ctx, b, "k1")
		c2 := btDo(context.Background(), b, "k2")
		cancel()
		synctest.Wait()
		require.True(t, c1.finished(), "a cancelled caller returns at once")
		assert.ErrorIs(t, c1.err, context.Canceled)
		assert.False(t, c2.finished())

		s0.echo()
		first.own(t)
		s1 := p.next()
		assert.Equal(t, btKeys(1, 2), s1.reqs)
		s1.echo()
		c2.own(t)
		b.Close()
	})
}

// A send that waits for its answer (a unary call) runs on the caller's
// goroutine; under sustained load its caller is not kept sending other
// callers' batches: once its own answer is in, it returns, and a goroutine
// of the Batcher's sends the rest.
func TestSynchronousSendReturnsItsCaller(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		var batches [][]string
		b, err := New(Config{Limit: 10, Window: 1}, func(reqs []string, done func([]string, error)) {
			mu.Lock()
			batches = append(batches, reqs)
			n := len(batches)
			mu.Unlock()
			if n == 1 {
				<-release // the first send is slow: others gather meanwhile
			}
			done(reqs, nil)
		})
		require.NoError(t, err)
		first := btDo(context.Background(), b, "k0")
		var calls []*btCall
		for _, key := range btKeys(1, 5) {
			calls = append(calls, btDo(context.Background(), b, key))
		}
		close(release)
		first.own(t) // returned although k1..k5 were still pending
		for _, c := range calls {
			c.own(t)
		}
		mu.Lock()
		assert.Equal(t, [][]string{{"k0"}, btKeys(1, 5)}, batches)
		mu.Unlock()
		b.Close()
	})
}

// Close fails the requests not yet sent with ErrClosed, at once, waits
// for the ones in flight, which get their answers, and Do then fails.
func TestCloseFailsPendingAndWaitsForInflight(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		b, p := newBT(t, 4, 1)
		first := btDo(context.Background(), b, "k0")
		s0 := p.next()
		c1 := btDo(context.Background(), b, "k1")
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		synctest.Wait()
		require.True(t, c1.finished())
		assert.ErrorIs(t, c1.err, ErrClosed)
		select {
		case <-closed:
			t.Fatal("Close returned with a batch in flight")
		default:
		}
		s0.echo()
		<-closed
		first.own(t)
		assert.Nil(t, p.next(), "nothing sent after Close")
		_, err := b.Do(context.Background(), "late")
		assert.ErrorIs(t, err, ErrClosed)
	})
}

// Backpressure: with the window full and 2 × Window × Limit requests
// pending, further callers wait for room, bounded by their contexts; an
// answer makes room, and a waiting caller gets in.
func TestBackpressureBoundsWaitingRequests(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		const limit, window = 2, 1
		b, p := newBT(t, limit, window)
		var calls []*btCall
		calls = append(calls, btDo(context.Background(), b, "k0")) // the window is full
		for _, key := range btKeys(1, 4) {                         // 2 × Window × Limit pending
			calls = append(calls, btDo(context.Background(), b, key))
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		blocked := btDo(ctx, b, "k6")
		assert.False(t, blocked.finished(), "waits for room")
		<-blocked.done
		assert.ErrorIs(t, blocked.err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "until its deadline")

		waiter := btDo(context.Background(), b, "k7")
		p.next().echo() // k0 answered: k1, k2 go, making room for k7
		synctest.Wait()
		var sent []string
		for s := p.next(); s != nil; s = p.next() {
			sent = append(sent, s.reqs...)
			s.echo()
			synctest.Wait()
		}
		assert.Equal(t, append(btKeys(1, 4), "k7"), sent, "k6 gave up before it got in")
		for _, c := range append(calls, waiter) {
			c.own(t)
		}
		b.Close()
	})
}

// Under concurrent callers and answers from other goroutines, in any
// order of events, every caller gets its own answer, at most Limit
// requests go in a batch, Window batches are out at most, and nothing
// leaks. The seed is printed on failure.
func TestConcurrentCallersGetTheirOwnAnswers(t *testing.T) {
	btNoLeaks(t)
	seed := rand.Uint64()
	defer func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 1))
	delays := make([]time.Duration, 64)
	for i := range delays {
		delays[i] = time.Duration(rng.IntN(200)) * time.Microsecond
	}
	const limit, window = 5, 2
	var mu sync.Mutex
	out, maxOut, maxLen := 0, 0, 0
	b, err := New(Config{Limit: limit, Window: window}, func(reqs []string, done func([]string, error)) {
		mu.Lock()
		out++
		maxOut, maxLen = max(maxOut, out), max(maxLen, len(reqs))
		d := delays[len(reqs)*7%len(delays)]
		mu.Unlock()
		time.AfterFunc(d, func() { // the answer comes on another goroutine
			mu.Lock()
			out--
			mu.Unlock()
			done(reqs, nil)
		})
	})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 200 {
				key := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := b.Do(ctx, key)
				cancel()
				if assert.NoError(t, err) {
					assert.Equal(t, key, res)
				}
			}
		})
	}
	wg.Wait()
	b.Close()
	assert.LessOrEqual(t, maxOut, window)
	assert.LessOrEqual(t, maxLen, limit)
}

// DoAll sends many requests for one caller, more than the pending bound
// included, in batches of Limit, and hands back each answer in order.
func TestDoAllSendsManyInBatches(t *testing.T) {
	btNoLeaks(t)
	synctest.Test(t, func(t *testing.T) {
		b, p := newBT(t, 2, 1)
		keys := btKeys(0, 6) // 7 > 2 × Window × Limit
		var res []string
		var errs []error
		done := make(chan error, 1)
		go func() {
			var err error
			res, errs, err = b.DoAll(context.Background(), keys)
			done <- err
		}()
		synctest.Wait()
		var sent [][]string
		for s := p.next(); s != nil; s = p.next() {
			sent = append(sent, s.reqs)
			s.echo()
			synctest.Wait()
		}
		require.NoError(t, <-done)
		assert.Equal(t, [][]string{{"k0", "k1"}, {"k2", "k3"}, {"k4", "k5"}, {"k6"}}, sent, "together, in batches of Limit")
		assert.Equal(t, keys, res)
		for _, err := range errs {
			assert.NoError(t, err)
		}
		r, e, err := b.DoAll(context.Background(), nil)
		assert.Nil(t, r)
		assert.Nil(t, e)
		assert.NoError(t, err)
		b.Close()
	})
}
