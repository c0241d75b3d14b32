package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// memberlist's Shutdown does not wait for a probe in flight; it
		// ends by itself (see client's TestMain).
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

const (
	callers   = 50
	perCaller = 20   // requests each
	budget    = 5000 // tokens per minute, one user
)

// seed is PEERLIMIT_SEED, else the time, logged to replay.
func seed(t *testing.T) uint64 {
	t.Helper()
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("PEERLIMIT_SEED"); v != "" {
		var err error
		s, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "PEERLIMIT_SEED")
	}
	t.Logf("seed %d (set PEERLIMIT_SEED to replay)", s)
	return s
}

// call is one caller's request: what it asked and what it got.
type call struct {
	maxTokens int64
	status    int
	tokens    int64 // tokens received, all of them: every stream is read to [DONE]
}

// ask posts one completion and reads its stream to the end.
func ask(hc *http.Client, url string, maxTokens int64) (call, error) {
	body := fmt.Sprintf(`{"prompt":"hello","max_tokens":%d}`, maxTokens)
	req, err := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return call{}, err
	}
	req.Header.Set("X-User", "alice")
	resp, err := hc.Do(req)
	if err != nil {
		return call{}, err
	}
	defer resp.Body.Close()
	c := call{maxTokens: maxTokens, status: resp.StatusCode}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			c.tokens++
		}
	}
	if c.status == http.StatusOK && !done {
		return c, fmt.Errorf("stream ended before [DONE]: %v", sc.Err())
	}
	return c, sc.Err()
}

// 50 callers share one user's budget, each asking 20 completions with a
// random max_tokens (20 to 400) and getting a random real length (1 to
// max_tokens, the model's choice). The budget must hold exactly: at no
// time does the count on the key's owner, reservations in flight
// included, exceed it; at the end it equals what the admitted requests
// streamed, which the callers received in full.
func TestBudgetUnder50Callers(t *testing.T) {
	s := seed(t)
	c := testcluster.New(t, 3, nil)
	ctx := context.Background()
	cl, err := client.New(ctx, client.Config{Endpoints: []string{c.Node(0).GRPCAddr()}})
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	model := httptest.NewServer(NewModel(s, 200*time.Microsecond))
	t.Cleanup(model.Close)
	proxy, err := NewProxy(cl, model.URL, Budget(budget), 10*time.Second) // generous: a reservation timed out stays counted
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: callers}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}

	// The owner's count, reservations in flight included, sampled while
	// the callers run.
	var peak atomic.Int64
	stop := make(chan struct{})
	var mon sync.WaitGroup
	mon.Go(func() {
		for {
			d, err := cl.CheckN(ctx, "tpm:alice", Budget(budget), 0)
			if err == nil {
				peak.Store(max(peak.Load(), d.CurrentCount))
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})

	start := time.Now()
	calls := make([][]call, callers)
	var wg sync.WaitGroup
	for i := range callers {
		rng := rand.New(rand.NewPCG(s, uint64(i)))
		wg.Go(func() {
			for range perCaller {
				got, err := ask(hc, front.URL, 20+rng.Int64N(381))
				if !assert.NoError(t, err) {
					return
				}
				calls[i] = append(calls[i], got)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	mon.Wait()
	require.Less(t, elapsed, 30*time.Second, "every hit is still in the one-minute window")

	var admitted, denied, reserved, streamed int64
	for _, cs := range calls {
		for _, got := range cs {
			switch got.status {
			case http.StatusOK:
				admitted++
				reserved += got.maxTokens
				streamed += got.tokens
				assert.LessOrEqual(t, got.tokens, got.maxTokens)
			case http.StatusTooManyRequests:
				denied++
			default:
				t.Errorf("status %d", got.status)
			}
		}
	}
	final, err := cl.CheckN(ctx, "tpm:alice", Budget(budget), 0)
	require.NoError(t, err)

	assert.LessOrEqual(t, peak.Load(), int64(budget), "never over the budget, in flight included")
	assert.LessOrEqual(t, streamed, int64(budget), "what the admitted requests used fits the budget")
	assert.Equal(t, streamed, final.CurrentCount, "the count is exactly what streamed")
	assert.Equal(t, streamed, proxy.Stats.Settled.Load(), "and what was settled")
	assert.Equal(t, reserved-streamed, proxy.Stats.Refunded.Load(), "the rest of each estimate came back")
	assert.Equal(t, admitted, proxy.Stats.Admitted.Load())
	assert.Equal(t, denied, proxy.Stats.Denied.Load())
	assert.Positive(t, denied, "the budget was contended")
	assert.Greater(t, reserved, int64(budget), "settling let through more max_tokens than the budget holds")
	t.Logf("%d callers × %d requests in %s: %d admitted, %d denied (429); max_tokens admitted %d, tokens streamed and settled %d, count at the end %d, peak count sampled %d, budget %d",
		callers, perCaller, elapsed.Round(time.Millisecond), admitted, denied, reserved, streamed, final.CurrentCount, peak.Load(), budget)
}
