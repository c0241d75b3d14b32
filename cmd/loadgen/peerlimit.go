package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/client"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
	"github.com/peerlimit/peerlimit/security"
)

// peerlimitTarget is a peerlimit cluster, reached by one of three routes:
// raw gRPC to the first endpoint (node) or to a random endpoint per call
// (random), or the Go client library, which sends each check to its key's
// owner (owner).
type peerlimitTarget struct {
	cfg   *Config
	keys  []string
	conns []*grpc.ClientConn     // node and random routes
	apis  []pb.RateLimiterClient // conns' clients, same order
	cl    *client.Client         // owner route
	algo  pb.Algorithm           // of every check
	limit client.Limit           // owner route
}

func newPeerlimitTarget(ctx context.Context, cfg *Config, keys []string) (*peerlimitTarget, error) {
	t := &peerlimitTarget{cfg: cfg, keys: keys, algo: pb.Algorithm_SLIDING_WINDOW_COUNTER}
	switch cfg.Algorithm {
	case algoLog:
		t.algo = pb.Algorithm_SLIDING_WINDOW_LOG
	case algoGCRA:
		t.algo = pb.Algorithm_GCRA
	}
	t.limit = client.Limit{Limit: cfg.Limit, Window: cfg.Window, Algorithm: client.Algorithm(t.algo)}

	tlsCfg, token, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	if cfg.Route == routeOwner {
		cl, err := client.New(ctx, client.Config{
			Endpoints:       cfg.Endpoints,
			TLS:             tlsCfg,
			Token:           token,
			TokenWithoutTLS: true, // the cluster's choice, not the load generator's

			DisableCoalescing: !cfg.Coalesce,
			// -timeout bounds one attempt on one node; the client then
			// fails over to another node within the same call.
			AttemptTimeout: cfg.Timeout,
			Logger:         slog.New(slog.NewTextHandler(cfg.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		if err != nil {
			return nil, fmt.Errorf("creating the peerlimit client for %v: %w", cfg.Endpoints, err)
		}
		t.cl = cl
		t.warmUp(ctx)
		return t, nil
	}

	conns, err := dialEndpoints(ctx, cfg, tlsCfg, token)
	if err != nil {
		return nil, err
	}
	t.conns = conns
	for _, conn := range conns {
		t.apis = append(t.apis, pb.NewRateLimiterClient(conn))
	}
	return t, nil
}

// routeEndpoints are the endpoints cfg's route calls: the first one for
// route node, every one otherwise.
func routeEndpoints(cfg *Config, endpoints []string) []string {
	if cfg.Route == routeNode {
		return endpoints[:1]
	}
	return endpoints
}

// dialEndpoints opens one gRPC connection per endpoint of cfg's route and
// connects them. No wire.Dial(), unlike the Go client: these routes stand
// for a client that is not peerlimit's (another language, an Envoy), so
// they keep grpc-go's default protobuf codec, as such a client would have.
// The token goes over plaintext too: the cluster's choice, not ours.
func dialEndpoints(ctx context.Context, cfg *Config, tlsCfg *tls.Config, token string) ([]*grpc.ClientConn, error) {
	endpoints := routeEndpoints(cfg, cfg.Endpoints)
	opts := client.Credentials(tlsCfg, token, true)
	var conns []*grpc.ClientConn
	for _, ep := range endpoints {
		conn, err := grpc.NewClient(ep, opts...)
		if err != nil {
			for _, c := range conns {
				_ = c.Close()
			}
			return nil, fmt.Errorf("connecting to %s: %w", ep, err)
		}
		conns = append(conns, conn)
	}
	// Connect before the clock starts, so that the first calls do not pay
	// for it. An endpoint that is down is only a warning: the run then
	// counts its calls as errors, as a chaos experiment wants.
	for i, conn := range conns {
		if err := waitReady(ctx, conn); err != nil {
			fmt.Fprintf(cfg.Stderr, "loadgen: warning: %s is not reachable yet: %v\n", endpoints[i], err)
		}
	}
	return conns, nil
}

func (c *Config) tlsOn() bool {
	return c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSServerName != ""
}

// credentials reads the TLS files and the token file; nil and "" when
// not configured.
func (c *Config) credentials() (*tls.Config, string, error) {
	var tlsCfg *tls.Config
	if c.tlsOn() {
		var err error
		if tlsCfg, err = client.LoadTLS(c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile, c.TLSServerName); err != nil {
			return nil, "", err
		}
	}
	token := ""
	if c.TokenFile != "" {
		lines, err := security.ReadLines(c.TokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("-api-token-file: %w", err)
		}
		token = lines[0]
	}
	return tlsCfg, token, nil
}

// warmUp connects the client to the owners before the clock starts, as
// the other routes wait for their connections: one batch of peeks (which
// consume nothing) over the first keys reaches every owner of them.
func (t *peerlimitTarget) warmUp(ctx context.Context) {
	reqs := make([]client.Request, min(len(t.keys), 256))
	for i := range reqs {
		reqs[i] = client.Request{Key: t.keys[i], Limit: t.limit, Peek: true}
	}
	res, err := t.cl.CheckBatch(ctx, reqs)
	if err == nil {
		for _, r := range res {
			if err = r.Err; err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintf(t.cfg.Stderr, "loadgen: warning: warming up the client: %v\n", err)
	}
}

// waitReady connects conn and waits until it is ready, fails to connect
// or ctx ends.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		s := conn.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			return errors.New("connection failed")
		}
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connection %s: %w", s, ctx.Err())
		}
	}
}

func (t *peerlimitTarget) close() error {
	var errs []error
	if t.cl != nil {
		errs = append(errs, t.cl.Close())
	}
	for _, c := range t.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

func (t *peerlimitTarget) caller(int) caller {
	n := t.cfg.Batch
	if t.cl != nil {
		c := &ownerCaller{t: t, reqs: make([]client.Request, n)}
		for i := range c.reqs {
			c.reqs[i].Limit = t.limit
		}
		return c
	}
	c := &grpcCaller{t: t}
	if n == 1 {
		c.req = t.request()
		return c
	}
	c.reqs = make([]*pb.CheckRequest, n)
	for i := range c.reqs {
		c.reqs[i] = t.request()
	}
	c.batch = &pb.CheckBatchRequest{}
	return c
}

// request is a check without its key; hits are absent, which means 1.
func (t *peerlimitTarget) request() *pb.CheckRequest {
	return &pb.CheckRequest{Limit: t.cfg.Limit, WindowMs: t.cfg.Window.Milliseconds(), Algorithm: t.algo}
}

// grpcCaller calls the RateLimiter service directly: Check with -batch 1,
// CheckBatch otherwise. Its requests are reused from call to call.
type grpcCaller struct {
	t     *peerlimitTarget
	req   *pb.CheckRequest // batch 1
	reqs  []*pb.CheckRequest
	batch *pb.CheckBatchRequest
}

func (c *grpcCaller) call(ctx context.Context, keys []int, o *outcome) error {
	api := c.t.apis[0]
	if len(c.t.apis) > 1 {
		api = c.t.apis[rand.IntN(len(c.t.apis))] // random route
	}
	ctx, cancel := context.WithTimeout(ctx, c.t.cfg.Timeout)
	defer cancel()
	if c.req != nil {
		c.req.Key = c.t.keys[keys[0]]
		resp, err := api.Check(ctx, c.req)
		if err != nil {
			return err
		}
		o.count(resp.GetAllowed(), resp.GetDegraded())
		return nil
	}
	for i, k := range keys {
		c.reqs[i].Key = c.t.keys[k]
	}
	c.batch.Checks = c.reqs[:len(keys)]
	resp, err := api.CheckBatch(ctx, c.batch)
	if err != nil {
		return err
	}
	if got := len(resp.GetResults()); got != len(keys) {
		return fmt.Errorf("CheckBatch answered %d results for %d checks", got, len(keys))
	}
	for _, r := range resp.GetResults() {
		if e := r.GetError(); e != nil {
			o.fail(status.Error(codes.Code(e.GetCode()), e.GetMessage()))
			continue
		}
		o.count(r.GetResponse().GetAllowed(), r.GetResponse().GetDegraded())
	}
	return nil
}

// fail counts one check that got no decision.
func (o *outcome) fail(err error) {
	o.failed++
	if o.err == nil {
		o.err = err
	}
}

// ownerCaller goes through the Go client: Check with -batch 1 (coalesced
// with other workers' checks unless -coalesce=false), CheckBatch otherwise
// (split by owner, the parts sent at once).
type ownerCaller struct {
	t    *peerlimitTarget
	reqs []client.Request // batch > 1; reused
}

func (c *ownerCaller) call(ctx context.Context, keys []int, o *outcome) error {
	if c.t.cfg.Batch == 1 {
		d, err := c.t.cl.Check(ctx, c.t.keys[keys[0]], c.t.limit)
		if err != nil {
			return err
		}
		o.count(d.Allowed, d.Degraded)
		return nil
	}
	reqs := c.reqs[:len(keys)]
	for i, k := range keys {
		reqs[i].Key = c.t.keys[k]
	}
	res, err := c.t.cl.CheckBatch(ctx, reqs)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			o.fail(r.Err)
			continue
		}
		o.count(r.Decision.Allowed, r.Decision.Degraded)
	}
	return nil
}
