package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/node"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist's Shutdown stops its probe ticker but does not wait
		// for a probe in flight: that goroutine waits out its ack timer
		// and, for a silent peer, the TCP fallback ping (up to
		// TCPTimeout, 2 s on the lan profile), then ends by itself. Not
		// a leak of ours, but longer than goleak's retries.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

func endpoints(nodes ...*node.Node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.GRPCAddr())
	}
	return out
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.New(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// forwards sums peerlimit_forwards_total over the nodes' /metrics.
func forwards(t *testing.T, nodes ...*node.Node) int {
	t.Helper()
	// Prometheus writes large counts as floats (1.234567e+06).
	re := regexp.MustCompile(`(?m)^peerlimit_forwards_total\{result="ok"\} (\S+)`)
	total := 0
	for _, n := range nodes {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := re.FindSubmatch(body); m != nil {
			v, err := strconv.ParseFloat(string(m[1]), 64)
			require.NoError(t, err)
			total += int(v)
		}
	}
	return total
}

var perMinute = client.Limit{Limit: 3, Window: time.Minute}

func TestCheckCheckNAndPeek(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	ctx := context.Background()
	for i := range 3 {
		d, err := cl.Check(ctx, "user:1", perMinute)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "check %d", i)
		assert.EqualValues(t, 2-i, d.Remaining)
	}
	d, err := cl.Check(ctx, "user:1", perMinute)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Positive(t, d.RetryAfter)
	assert.Equal(t, c.Node(0).Ring().Owner("user:1").ID, d.Owner)
	assert.Positive(t, d.RefillAfter, "the counter's fixed window always has time left")
	assert.LessOrEqual(t, d.RefillAfter, perMinute.Window)

	d, err = cl.CheckN(ctx, "user:1", perMinute, 0)
	require.NoError(t, err)
	assert.EqualValues(t, 3, d.CurrentCount, "a peek reports")
	d, err = cl.CheckN(ctx, "user:2", client.Limit{Limit: 10, Window: time.Second, Algorithm: client.SlidingWindowLog}, 7)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.EqualValues(t, 3, d.Remaining)
	assert.Equal(t, time.Second, d.RefillAfter, "the log's oldest hits are the 7 just counted: a whole window to go")
}

func TestInvalidInputIsNotRetried(t *testing.T) {
	c := testcluster.New(t, 2, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Live()...)})
	_, err := cl.Check(context.Background(), "", perMinute)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, err.Error(), "key")
	_, err = cl.Check(context.Background(), "k", client.Limit{Limit: 1, Window: 1500 * time.Microsecond})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, err.Error(), "window_ms")
}

func TestCheckBatch(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(1))})
	var reqs []client.Request
	for i := range 30 {
		reqs = append(reqs, client.Request{Key: fmt.Sprintf("b%d", i), Limit: perMinute, Hits: 2})
	}
	reqs = append(reqs,
		client.Request{Key: "", Limit: perMinute},
		// Refused by the client itself, before the call: the items after
		// it must still get their own answers.
		client.Request{Key: "b2", Limit: client.Limit{Limit: 0, Window: time.Minute}},
		client.Request{Key: "b0", Limit: perMinute, Peek: true},
		client.Request{Key: "b1", Limit: perMinute, Hits: 2})
	res, err := cl.CheckBatch(context.Background(), reqs)
	require.NoError(t, err)
	require.Len(t, res, 34)
	owners := map[string]bool{}
	for i, r := range res[:30] {
		require.NoError(t, r.Err, "item %d", i)
		assert.True(t, r.Allowed)
		assert.Equal(t, c.Node(0).Ring().Owner(reqs[i].Key).ID, r.Owner)
		owners[r.Owner] = true
	}
	assert.Len(t, owners, 3)
	assert.Equal(t, codes.InvalidArgument, status.Code(res[30].Err))
	require.Error(t, res[31].Err)
	assert.Contains(t, res[31].Err.Error(), "limit")
	require.NoError(t, res[32].Err)
	assert.EqualValues(t, 2, res[32].CurrentCount, "peek sees b0's 2 hits")
	require.NoError(t, res[33].Err)
	assert.False(t, res[33].Allowed, "b1 had 2 of 3 already")
}

// With owner routing every check goes straight to its owner: the nodes
// forward nothing. Without it, about two thirds are forwarded.
func TestOwnerRoutingSavesTheForwardingHop(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	nodes := c.Live()
	ctx := context.Background()
	routed := newClient(t, client.Config{Endpoints: endpoints(nodes[0])})
	before := forwards(t, nodes...)
	for i := range 300 {
		_, err := routed.Check(ctx, fmt.Sprintf("r%d", i), perMinute)
		require.NoError(t, err)
	}
	assert.Equal(t, before, forwards(t, nodes...), "owner routing: nothing forwarded")

	plain := newClient(t, client.Config{Endpoints: endpoints(nodes...), DisableOwnerRouting: true})
	before = forwards(t, nodes...)
	for i := range 300 {
		_, err := plain.Check(ctx, fmt.Sprintf("p%d", i), perMinute)
		require.NoError(t, err)
	}
	fwd := forwards(t, nodes...) - before
	assert.InDelta(t, 200, fwd, 60, "about 2/3 of 300 checks forwarded without owner routing")
}

// A node killed under load: every call that had time left succeeds, on
// another node.
func TestFailoverWhileANodeIsKilled(t *testing.T) {
	c := testcluster.New(t, 3, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Live()...), AttemptTimeout: 300 * time.Millisecond})
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := cl.Check(ctx, fmt.Sprintf("load:%d:%d", g, i%50), client.Limit{Limit: 1 << 30, Window: time.Minute})
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	c.Eventually(5*time.Second, func() (bool, string) { return ok.Load() > 500, "warming up" })
	c.Kill(2)
	atKill := ok.Load()
	c.Eventually(10*time.Second, func() (bool, string) { return ok.Load() > atKill+2000, "traffic after the kill" })
	close(stop)
	wg.Wait()
	assert.Zero(t, failed.Load(), "calls failed: first error %v", firstErr.Load())
	t.Logf("%d calls, %d after the kill, none failed", ok.Load(), ok.Load()-atKill)
}

// When the cluster grows the client's ring goes stale; an answer from an
// unexpected owner makes it refresh, and routing is direct again.
func TestViewRefreshesAfterAJoin(t *testing.T) {
	c := testcluster.New(t, 2, nil)
	cl := newClient(t, client.Config{Endpoints: endpoints(c.Node(0))})
	added := c.Add()
	c.WaitConverged()
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("j%d", i); added.Ring().Owner(k).ID == added.ID() {
			key = k
		}
	}
	c.Eventually(5*time.Second, func() (bool, string) {
		before := forwards(t, c.Live()...)
		d, err := cl.Check(context.Background(), key, client.Limit{Limit: 1 << 30, Window: time.Minute})
		if err != nil {
			return false, err.Error()
		}
		return d.Owner == added.ID() && forwards(t, c.Live()...) == before, "still forwarded: the client's ring is stale"
	})
}

func TestCloseAndConfig(t *testing.T) {
	_, err := client.New(context.Background(), client.Config{})
	assert.Error(t, err, "no endpoints")

	// Nothing listens there: New still works, calls fail within their context.
	cl, err := client.New(context.Background(), client.Config{Endpoints: []string{"127.0.0.1:1"}, AttemptTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = cl.Check(ctx, "k", perMinute)
	assert.Error(t, err)
	require.NoError(t, cl.Close())
	require.NoError(t, cl.Close(), "idempotent")
	_, err = cl.Check(context.Background(), "k", perMinute)
	assert.True(t, errors.Is(err, client.ErrClosed))
}

// A zero field means its default; a negative one is an error naming the
// field, never silently replaced.
func TestConfigDefaultsAndErrors(t *testing.T) {
	require.NoError(t, client.Config{Endpoints: []string{"x:1"}}.Validate())
	assert.ErrorContains(t, client.Config{}.Validate(), "Endpoints")
	for name, mutate := range map[string]func(*client.Config){
		"AttemptTimeout":  func(c *client.Config) { c.AttemptTimeout = -time.Second },
		"RefreshInterval": func(c *client.Config) { c.RefreshInterval = -1 },
		"CoalesceLimit":   func(c *client.Config) { c.CoalesceLimit = -1 },
		"MaxRetryBackoff": func(c *client.Config) { c.RetryBackoff, c.MaxRetryBackoff = time.Second, time.Millisecond },
	} {
		c := client.Config{Endpoints: []string{"x:1"}}
		mutate(&c)
		assert.ErrorContains(t, c.Validate(), name)
		_, err := client.New(context.Background(), c)
		assert.ErrorContains(t, err, name)
	}
	// An unset MaxRetryBackoff is never below a RetryBackoff that was set.
	require.NoError(t, client.Config{Endpoints: []string{"x:1"}, RetryBackoff: time.Minute}.Validate())
}

// The client's algorithms are the server's, by value and by name, though
// the client imports none of the server's packages.
func TestAlgorithmsAreTheServers(t *testing.T) {
	for _, a := range []limiter.Algorithm{limiter.SlidingWindowCounter, limiter.SlidingWindowLog, limiter.GCRA, limiter.Concurrency} {
		c, err := client.ParseAlgorithm(a.String())
		require.NoError(t, err)
		assert.Equal(t, uint8(a), uint8(c))
		assert.Equal(t, a.String(), c.String())
	}
	c, err := client.ParseAlgorithm("")
	require.NoError(t, err)
	assert.Equal(t, client.SlidingWindowCounter, c, "the default")
	_, err = client.ParseAlgorithm("FIXED_WINDOW")
	assert.ErrorContains(t, err, "invalid algorithm")
	assert.ErrorContains(t, err, "GCRA or CONCURRENCY")
}
