package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/peerlimit/peerlimit/envoyrls"
)

// envoyTarget is a peerlimit cluster asked as an Envoy asks its rate
// limit service: ShouldRateLimit through Envoy's generated Go client, with
// grpc-go's default codec (plain protobuf, as Envoy sends), to the first
// endpoint (route node) or a random one per call (route random). Each
// request has the domain -rls-domain and one descriptor of one entry,
// -rls-descriptor-key = the check's key, and hits_addend 1.
type envoyTarget struct {
	cfg   *Config
	keys  []string
	conns []*grpc.ClientConn
	apis  []rlspb.RateLimitServiceClient // conns' clients, same order
}

// errNoRule is the answer to a descriptor that no limited rule of the
// domain matches: Envoy's service answers OK without counting anything,
// which would make the run measure nothing.
var errNoRule = errors.New("no limited rule matched the descriptor (answered OK, nothing counted)")

func newEnvoyTarget(ctx context.Context, cfg *Config, keys []string) (*envoyTarget, error) {
	tlsCfg, token, err := cfg.credentials()
	if err != nil {
		return nil, err
	}
	conns, err := dialEndpoints(ctx, cfg, tlsCfg, token)
	if err != nil {
		return nil, err
	}
	t := &envoyTarget{cfg: cfg, keys: keys, conns: conns}
	for _, conn := range conns {
		t.apis = append(t.apis, rlspb.NewRateLimitServiceClient(conn))
	}
	if err := t.warmUp(ctx); err != nil {
		_ = t.close()
		return nil, err
	}
	return t, nil
}

// warmUp asks every endpoint once, before the clock starts, with a peek
// (the descriptor's hits_addend 0 consumes nothing). A node that does not
// serve the API, or a domain without a limited rule for the descriptor,
// stops the run before it starts: it would measure nothing. A node that
// cannot be reached is only a warning, as for the other routes.
func (t *envoyTarget) warmUp(ctx context.Context) error {
	endpoints := routeEndpoints(t.cfg, t.cfg.Endpoints)
	for i, api := range t.apis {
		req := t.request()
		req.Descriptors[0].Entries[0].Value = t.keys[0]
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
		resp, err := api.ShouldRateLimit(ctx, req)
		switch status.Code(err) {
		case codes.OK:
		case codes.Unimplemented:
			return fmt.Errorf("%s does not serve Envoy's rate limit service (start the nodes with --envoy-rls-config): %w", endpoints[i], err)
		case codes.InvalidArgument:
			return fmt.Errorf("%s refused the request: %w", endpoints[i], err)
		default:
			fmt.Fprintf(t.cfg.Stderr, "loadgen: warning: warming up %s: %v\n", endpoints[i], err)
			continue
		}
		if _, _, err := envoyOutcome(resp); err != nil {
			return fmt.Errorf("%s, domain %q, descriptor %s=<key>: %w", endpoints[i], t.cfg.RLSDomain, t.cfg.RLSDescriptorKey, err)
		}
	}
	return nil
}

func (t *envoyTarget) close() error {
	var errs []error
	for _, c := range t.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// request is a request with its descriptor's value (the key) left empty.
func (t *envoyTarget) request() *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{
		Domain:     t.cfg.RLSDomain,
		HitsAddend: 1,
		Descriptors: []*rlscommon.RateLimitDescriptor{{
			Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: t.cfg.RLSDescriptorKey}},
		}},
	}
}

func (t *envoyTarget) caller(int) caller {
	req := t.request()
	return &envoyCaller{t: t, req: req, entry: req.Descriptors[0].Entries[0]}
}

// envoyCaller makes one worker's calls, reusing its request.
type envoyCaller struct {
	t     *envoyTarget
	req   *rlspb.RateLimitRequest
	entry *rlscommon.RateLimitDescriptor_Entry // the request's one entry
}

func (c *envoyCaller) call(ctx context.Context, keys []int, o *outcome) error {
	api := c.t.apis[0]
	if len(c.t.apis) > 1 {
		api = c.t.apis[rand.IntN(len(c.t.apis))] // random route
	}
	ctx, cancel := context.WithTimeout(ctx, c.t.cfg.Timeout)
	defer cancel()
	c.entry.Value = c.t.keys[keys[0]]
	resp, err := api.ShouldRateLimit(ctx, c.req)
	if err != nil {
		return err
	}
	allowed, degraded, err := envoyOutcome(resp)
	if err != nil {
		return err
	}
	o.count(allowed, degraded)
	return nil
}

// envoyOutcome reads the answer to a request of one descriptor: OK is
// allowed, OVER_LIMIT denied; degraded when the node's fallback decided
// (its dynamic metadata says so). An answer whose descriptor no limited
// rule matched is errNoRule.
func envoyOutcome(resp *rlspb.RateLimitResponse) (allowed, degraded bool, err error) {
	sts := resp.GetStatuses()
	if len(sts) != 1 {
		return false, false, fmt.Errorf("ShouldRateLimit answered %d statuses for 1 descriptor", len(sts))
	}
	if sts[0].GetCurrentLimit() == nil {
		return false, false, errNoRule
	}
	degraded = resp.GetDynamicMetadata().GetFields()[envoyrls.DegradedKey].GetBoolValue()
	switch code := resp.GetOverallCode(); code {
	case rlspb.RateLimitResponse_OK:
		return true, degraded, nil
	case rlspb.RateLimitResponse_OVER_LIMIT:
		return false, degraded, nil
	default:
		return false, false, fmt.Errorf("ShouldRateLimit answered overall_code %s", code)
	}
}
