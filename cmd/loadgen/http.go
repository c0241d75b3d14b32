package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// httpTarget is a peerlimit cluster asked over its HTTP/JSON API, the way
// a client without peerlimit's Go library (curl, another language) asks
// it: POST /v1/check, or /v1/check:batch with -batch > 1, to the first
// endpoint (route node) or a random one per call (route random).
//
// Connections are kept alive and reused: the transport's idle pool holds
// a connection per worker for every endpoint, and the warm-up opens them
// before the clock starts, so that no call of the run pays for a TCP (or
// TLS) handshake.
type httpTarget struct {
	cfg    *Config
	keys   []string
	client *http.Client
	tr     *http.Transport
	check  []string // POST /v1/check URL per endpoint of the route
	batch  []string // POST /v1/check:batch URL, same order
	auth   string   // the Authorization header; "" without a token
	algo   string   // the proto enum name of -algorithm
	// dials counts the connections opened, so that tests can tell
	// keep-alive from a connection per request.
	dials atomic.Int64
}

// The HTTP API's JSON, with the proto's field names (docs/api.md). Only
// what the load generator sends and reads.
type (
	httpCheck struct {
		Key       string `json:"key"`
		Limit     int64  `json:"limit"`
		WindowMS  int64  `json:"window_ms"`
		Algorithm string `json:"algorithm"`
		Hits      *int64 `json:"hits,omitempty"` // absent: 1; 0: a peek
	}
	httpDecision struct {
		Allowed  bool `json:"allowed"`
		Degraded bool `json:"degraded"`
	}
	httpError struct {
		Code    string `json:"code"`
		Field   string `json:"field"`
		Message string `json:"message"`
	}
	httpBatchRequest struct {
		Checks []httpCheck `json:"checks"`
	}
	httpBatchResponse struct {
		Results []struct {
			Response *httpDecision `json:"response"`
			Error    *httpError    `json:"error"`
		} `json:"results"`
	}
)

func (e *httpError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (field %s): %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

// maxHTTPResponse bounds the body read from a node: a batch of 1000
// answers is about 200 kB.
const maxHTTPResponse = 8 << 20

func newHTTPTarget(ctx context.Context, cfg *Config, keys []string) (*httpTarget, error) {
	tlsCfg, token, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	t := &httpTarget{cfg: cfg, keys: keys, algo: "SLIDING_WINDOW_COUNTER"}
	switch cfg.Algorithm {
	case algoLog:
		t.algo = "SLIDING_WINDOW_LOG"
	case algoGCRA:
		t.algo = "GCRA"
	}
	if token != "" {
		t.auth = "Bearer " + token
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	endpoints := routeEndpoints(cfg, cfg.HTTPEndpoints)
	for _, ep := range endpoints {
		t.check = append(t.check, scheme+"://"+ep+"/v1/check")
		t.batch = append(t.batch, scheme+"://"+ep+"/v1/check:batch")
	}
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}
	t.tr = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			t.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: cfg.Timeout,
		// As http.DefaultTransport: HTTP/2 where TLS offers it. A custom
		// DialContext would otherwise turn it off.
		ForceAttemptHTTP2: true,
		// Every worker may call the same node at once: the idle pool must
		// hold a connection per worker per node, or connections would be
		// closed and reopened during the run (Go's default keeps 2 per
		// host).
		MaxIdleConns:        cfg.Workers * len(endpoints),
		MaxIdleConnsPerHost: cfg.Workers,
		// And never more than one per worker: without a cap, a worker
		// whose previous connection is not yet back in the idle pool
		// (the transport returns it from its read loop) dials a new one
		// that then finds the pool full and is closed.
		MaxConnsPerHost:    cfg.Workers,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true,
	}
	t.client = &http.Client{Transport: t.tr}
	t.warmUp(ctx)
	return t, nil
}

// warmUp opens the connections before the clock starts: Workers
// concurrent peeks (hits 0, which consume nothing) to each endpoint, so
// that each endpoint's idle pool holds a connection per worker. A failure
// is only a warning, as for the gRPC routes: the run counts the calls to
// an endpoint that is down as errors.
func (t *httpTarget) warmUp(ctx context.Context) {
	zero := int64(0)
	body, err := json.Marshal(httpCheck{Key: t.keys[0], Limit: t.cfg.Limit, WindowMS: t.cfg.Window.Milliseconds(),
		Algorithm: t.algo, Hits: &zero})
	if err != nil {
		panic(err) // a struct of strings and numbers always encodes
	}
	for i, url := range t.check {
		var wg sync.WaitGroup
		errs := make([]error, t.cfg.Workers)
		for w := range t.cfg.Workers {
			wg.Go(func() {
				var d httpDecision
				errs[w] = t.post(ctx, url, body, &d)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				fmt.Fprintf(t.cfg.Stderr, "loadgen: warning: warming up %s: %v\n", routeEndpoints(t.cfg, t.cfg.HTTPEndpoints)[i], err)
				break
			}
		}
	}
}

func (t *httpTarget) close() error {
	t.tr.CloseIdleConnections()
	return nil
}

func (t *httpTarget) caller(int) caller {
	c := &httpCaller{t: t}
	c.one = httpCheck{Limit: t.cfg.Limit, WindowMS: t.cfg.Window.Milliseconds(), Algorithm: t.algo}
	if t.cfg.Batch > 1 {
		c.many.Checks = make([]httpCheck, 0, t.cfg.Batch)
	}
	return c
}

// httpCaller makes one worker's HTTP calls, reusing its request values and
// body buffer from call to call.
type httpCaller struct {
	t    *httpTarget
	one  httpCheck
	many httpBatchRequest
	buf  bytes.Buffer
}

func (c *httpCaller) call(ctx context.Context, keys []int, o *outcome) error {
	i := 0
	if len(c.t.check) > 1 {
		i = rand.IntN(len(c.t.check)) // random route
	}
	ctx, cancel := context.WithTimeout(ctx, c.t.cfg.Timeout)
	defer cancel()
	c.buf.Reset()
	enc := json.NewEncoder(&c.buf)
	if c.t.cfg.Batch == 1 {
		c.one.Key = c.t.keys[keys[0]]
		if err := enc.Encode(&c.one); err != nil {
			return fmt.Errorf("encoding the check: %w", err)
		}
		var d httpDecision
		if err := c.t.post(ctx, c.t.check[i], c.buf.Bytes(), &d); err != nil {
			return err
		}
		o.count(d.Allowed, d.Degraded)
		return nil
	}
	c.many.Checks = c.many.Checks[:0]
	for _, k := range keys {
		c.one.Key = c.t.keys[k]
		c.many.Checks = append(c.many.Checks, c.one)
	}
	if err := enc.Encode(&c.many); err != nil {
		return fmt.Errorf("encoding the batch: %w", err)
	}
	// A fresh answer each time: decoding into the previous one's elements
	// could leave an old error or response in place.
	var res httpBatchResponse
	if err := c.t.post(ctx, c.t.batch[i], c.buf.Bytes(), &res); err != nil {
		return err
	}
	if got := len(res.Results); got != len(keys) {
		return fmt.Errorf("POST /v1/check:batch answered %d results for %d checks", got, len(keys))
	}
	for _, r := range res.Results {
		switch {
		case r.Error != nil:
			o.fail(r.Error)
		case r.Response == nil:
			o.fail(errors.New("POST /v1/check:batch: a result with neither response nor error"))
		default:
			o.count(r.Response.Allowed, r.Response.Degraded)
		}
	}
	return nil
}

// post sends body to url and decodes a 200 answer into out. Any other
// status is an error carrying the API's error body. The body is always
// read to its end and closed, so that the connection goes back to the
// idle pool.
func (t *httpTarget) post(ctx context.Context, url string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if t.auth != "" {
		req.Header.Set("Authorization", t.auth)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return err // names the method and URL already
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHTTPResponse))
		_ = resp.Body.Close()
	}()
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxHTTPResponse))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error *httpError `json:"error"`
		}
		if err := dec.Decode(&e); err != nil || e.Error == nil {
			return fmt.Errorf("POST %s: %s", url, resp.Status)
		}
		return fmt.Errorf("POST %s: %s: %w", url, resp.Status, e.Error)
	}
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("POST %s: decoding the answer: %w", url, err)
	}
	return nil
}
