package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/peerlimit/peerlimit/client"
)

// Budget is a tokens-per-minute limit. The sliding window log counts
// every token exactly, at 4 bytes each on the key's owner, up to the
// nodes' --max-log-limit (10,000 by default); for larger budgets raise
// it, or use the counter, which is exact within a window and estimates
// across its boundary.
func Budget(tokensPerMinute int64) client.Limit {
	return client.Limit{Limit: tokensPerMinute, Window: time.Minute, Algorithm: client.SlidingWindowLog}
}

// Stats are a Proxy's totals since it started.
type Stats struct {
	Admitted atomic.Int64 // requests whose reservation was admitted
	Denied   atomic.Int64 // requests answered 429
	Reserved atomic.Int64 // max_tokens of the admitted requests
	Settled  atomic.Int64 // tokens the settled requests streamed: what they cost
	Refunded atomic.Int64 // reserved tokens given back by settles
}

// Proxy holds each user (the X-User header, which a real deployment's
// gateway authenticates) to a tokens-per-minute budget in front of a
// streaming model: it reserves the request's max_tokens, streams the
// answer, and settles the tokens the model actually sent, through
// client.ReserveMiddleware.
type Proxy struct {
	Stats Stats

	upstream string
	hc       *http.Client
	h        http.Handler
}

// NewProxy returns a Proxy to the model at upstream (http://host:port)
// under budget, reserving through r; timeout bounds each reservation and
// each settle. A reservation whose answer comes too late is answered 503
// and stays counted, as used, for its window: keep timeout well above
// the cluster's latency under load.
func NewProxy(r client.Reserver, upstream string, budget client.Limit, timeout time.Duration) (*Proxy, error) {
	p := &Proxy{upstream: strings.TrimSuffix(upstream, "/"), hc: &http.Client{Transport: &http.Transport{}}}
	reserve, err := client.ReserveMiddleware(r, client.ReserveConfig{
		MiddlewareConfig: client.MiddlewareConfig{
			Limit:  budget,
			Key:    client.Prefix("tpm:", client.KeyByHeader("X-User")),
			Policy: "tokens",
			Cost:   func(r *http.Request) int64 { return completion(r.Context()).MaxTokens },
			// A budget is money: when the cluster cannot be asked, refuse
			// rather than serve unmetered.
			FailClosed: true,
			Timeout:    timeout,
			Denied: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				p.Stats.Denied.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprintf(w, `{"error":"token budget exceeded","retry_after":%s}`+"\n", w.Header().Get("Retry-After"))
			}),
		},
		TTL: 2 * time.Minute, // longer than any answer streams
		OnSettle: func(_ *http.Request, cost int64, s client.Settlement) {
			p.Stats.Settled.Add(cost)
			p.Stats.Refunded.Add(s.Refunded)
		},
	})
	if err != nil {
		return nil, err
	}
	p.h = parseCompletion(reserve(http.HandlerFunc(p.forward)))
	return p, nil
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.h.ServeHTTP(w, r) }

// Close closes the idle connections to the model.
func (p *Proxy) Close() { p.hc.CloseIdleConnections() }

type completionKey struct{}

// parsed is a request's body, read once: decoded for the budget, raw for
// the model.
type parsed struct {
	CompletionRequest
	raw []byte
}

func completion(ctx context.Context) *parsed { return ctx.Value(completionKey{}).(*parsed) }

// parseCompletion reads the body before the budget is asked, which needs
// its max_tokens.
func parseCompletion(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var c parsed
		if err == nil {
			err = json.Unmarshal(raw, &c.CompletionRequest)
		}
		if err != nil || c.MaxTokens < 1 {
			http.Error(w, "want a JSON body with max_tokens ≥ 1", http.StatusBadRequest)
			return
		}
		c.raw = raw
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), completionKey{}, &c)))
	})
}

// forward streams the model's answer to the caller and reports each token
// it receives: the model generated it, so it is paid for, whether or not
// the caller stays to read it. A caller that leaves cancels the model's
// request, and the stream stops.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	c := completion(r.Context())
	p.Stats.Admitted.Add(1)
	p.Stats.Reserved.Add(c.MaxTokens)
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, p.upstream+"/v1/completions", bytes.NewReader(c.raw))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		http.Error(w, "model unreachable", http.StatusBadGateway) // nothing reported: released
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
	client.ReportUsage(r.Context(), 0) // the model answered: from here the cost is what it streams
	w.Header().Set("Content-Type", "text/event-stream")
	flush := http.NewResponseController(w).Flush
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") && line != "data: [DONE]" {
			client.ReportUsage(r.Context(), 1)
		}
		if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
			return
		}
		if line == "" {
			_ = flush() // the end of an event
		}
	}
}
