// Package rpc is a node's request path and its gRPC face: a Service stamps
// each check with the node's clock and decides it, and Server adapts the
// public gRPC API (peerlimit.v1.RateLimiter) onto it. The HTTP/JSON API
// (package httpapi) calls the same Service, so both APIs decide alike.
package rpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
)

// Config holds the Service's settings. Start from DefaultConfig.
type Config struct {
	// NodeID names this node in every answer it decides (CheckResponse.owner).
	NodeID string
	// MaxBatch caps the checks of one CheckBatch call. Default 1000.
	MaxBatch int
	// Now is the node's clock; it stamps every request once, on arrival.
	// Default time.Now. Tests inject their own.
	Now func() time.Time
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{MaxBatch: 1000, Now: time.Now}
}

// Validate reports an unusable Config.
func (c Config) Validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("rpc config: NodeID must not be empty")
	case c.MaxBatch < 1:
		return fmt.Errorf("rpc config: MaxBatch must be ≥ 1, got %d", c.MaxBatch)
	case c.Now == nil:
		return errors.New("rpc config: Now must not be nil")
	}
	return nil
}

// Result is the answer to one check: a decision and who made it, or why
// there is none.
type Result struct {
	Decision limiter.Decision
	Owner    string
	Err      error
}

// Service decides checks against the local store. It is safe for
// concurrent use.
type Service struct {
	cfg     Config
	store   *limiter.Store
	metrics *Metrics
}

// ErrBatchTooLarge is returned, wrapped, for a batch over Config.MaxBatch.
var ErrBatchTooLarge = errors.New("batch too large")

// NewService returns a Service deciding on store. metrics may be nil.
func NewService(cfg Config, store *limiter.Store, metrics *Metrics) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		return nil, errors.New("rpc: nil store")
	}
	return &Service{cfg: cfg, store: store, metrics: metrics}, nil
}

// Check decides one request.
func (s *Service) Check(ctx context.Context, req limiter.Request) Result {
	return s.decide(s.cfg.Now(), req)
}

// CheckBatch decides every request, each on its own, all stamped with the
// same arrival time. The error is for the batch as a whole (too large);
// per-item failures are in the results.
func (s *Service) CheckBatch(ctx context.Context, reqs []limiter.Request) ([]Result, error) {
	if len(reqs) > s.cfg.MaxBatch {
		return nil, fmt.Errorf("checks: %d items; the maximum is %d: %w", len(reqs), s.cfg.MaxBatch, ErrBatchTooLarge)
	}
	now := s.cfg.Now()
	out := make([]Result, len(reqs))
	for i, r := range reqs {
		out[i] = s.decide(now, r)
	}
	return out, nil
}

// MaxBatch is the largest batch CheckBatch accepts.
func (s *Service) MaxBatch() int { return s.cfg.MaxBatch }

func (s *Service) decide(now time.Time, req limiter.Request) Result {
	d, err := s.store.Check(now, req)
	s.metrics.observe(req.Algorithm, d.Allowed, err)
	if err != nil {
		return Result{Err: err}
	}
	return Result{Decision: d, Owner: s.cfg.NodeID}
}

// NewRequest builds a limiter request from the public API's fields, which
// both the gRPC and the JSON API share. hits nil means 1; window_ms too
// large for a time.Duration is an *limiter.ArgumentError like any other bad
// field (the store checks the rest).
func NewRequest(key string, limit, windowMS int64, algo limiter.Algorithm, hits *int64) (limiter.Request, error) {
	if windowMS > math.MaxInt64/int64(time.Millisecond) {
		return limiter.Request{}, &limiter.ArgumentError{Field: "window_ms", Reason: fmt.Sprintf("%d is too large", windowMS)}
	}
	r := limiter.Request{Key: key, Limit: limit, Window: time.Duration(windowMS) * time.Millisecond, Algorithm: algo, Hits: 1}
	if hits != nil {
		r.Hits = *hits
	}
	return r, nil
}
