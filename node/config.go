package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/peerlimit/peerlimit/limiter"
)

// Config is everything a node needs. Start from DefaultConfig (or
// DefaultLocalConfig for tests); only cmd/node reads flags and environment.
type Config struct {
	// ID names the node in answers (owner) and, with clustering, in the
	// membership. Default: the host name.
	ID string
	// GRPCAddr, HTTPAddr and GossipAddr are listen addresses. Port 0 binds
	// a free port; the node reports the bound address.
	// Defaults :9090, :8080, :7946.
	GRPCAddr   string
	HTTPAddr   string
	GossipAddr string
	// Join lists seed nodes' gossip addresses. Clustering is not built yet:
	// a node with Join set logs that it runs alone.
	Join []string

	Limiter limiter.Config
	// MaxBatch caps the checks in one batch call. Default 1000.
	MaxBatch int
	// MaxRecvMsgBytes caps a gRPC request. Default 4 MiB.
	MaxRecvMsgBytes int
	// MaxBodyBytes caps an HTTP request body. Default 1 MiB.
	MaxBodyBytes int64
	// SweepInterval is how often expired keys are freed. Decisions never
	// depend on it; it only bounds how long dead keys hold memory.
	// Default 10s.
	SweepInterval time.Duration

	// Logger receives the node's structured logs. Default: text to stderr.
	Logger *slog.Logger
	// Now is the node's clock. Default time.Now.
	Now func() time.Time
}

// DefaultConfig returns production defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		ID:              host,
		GRPCAddr:        ":9090",
		HTTPAddr:        ":8080",
		GossipAddr:      ":7946",
		Limiter:         limiter.DefaultConfig(),
		MaxBatch:        1000,
		MaxRecvMsgBytes: 4 << 20,
		MaxBodyBytes:    1 << 20,
		SweepInterval:   10 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Now:             time.Now,
	}
}

// DefaultLocalConfig is DefaultConfig on loopback free ports, for tests and
// single-host clusters.
func DefaultLocalConfig(id string) Config {
	c := DefaultConfig()
	c.ID = id
	c.GRPCAddr, c.HTTPAddr, c.GossipAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.SweepInterval = time.Second
	return c
}

// Validate reports every unusable field.
func (c Config) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("ID must not be empty"))
	}
	if c.GRPCAddr == "" || c.HTTPAddr == "" {
		errs = append(errs, errors.New("GRPCAddr and HTTPAddr must be set"))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("MaxBatch must be ≥ 1, got %d", c.MaxBatch))
	}
	if c.MaxRecvMsgBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxRecvMsgBytes must be ≥ 1024, got %d", c.MaxRecvMsgBytes))
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes must be ≥ 1024, got %d", c.MaxBodyBytes))
	}
	if c.SweepInterval <= 0 {
		errs = append(errs, fmt.Errorf("SweepInterval must be positive, got %s", c.SweepInterval))
	}
	if c.Logger == nil || c.Now == nil {
		errs = append(errs, errors.New("Logger and Now must not be nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node config: %w", err)
	}
	return nil
}
