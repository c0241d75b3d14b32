// Package xdsconfig subscribes to the Envoy rate limit service's
// configuration from an xDS control plane, as envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW does: one Aggregated Discovery Service stream,
// state of the world, for ratelimit.config.ratelimit.v3.RateLimitConfig
// resources. This is how Envoy Gateway and Envoy AI Gateway configure
// the rate limit service they deploy.
//
// Every response holds every resource (state of the world). The
// Subscriber turns each resource into the YAML document a file with the
// same limits would hold (Document), hands the whole set to its Target,
// and acknowledges it (ACK) if the Target put it in force, or refuses it
// (NACK) with the Target's error, keeping the configuration in force. A
// broken stream is opened again after a jittered exponential backoff,
// and the control plane resends the state of the world on the new one.
package xdsconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/tlsfiles"
)

// Config says where the control plane is and how to talk to it.
type Config struct {
	// ServerAddr is the control plane's gRPC address, host:port (Envoy
	// Gateway's is envoy-gateway.envoy-gateway-system:18001). Empty: no
	// subscription.
	ServerAddr string
	// NodeID and NodeMetadata identify this client to the control plane
	// (the xDS Node's id and metadata). A control plane serves each id
	// its own snapshot, and nothing to an id it does not know: Envoy
	// Gateway keys its snapshot cache by node id (go-control-plane's
	// IDHash) and sets a snapshot for "envoy-ratelimit" only, the id it
	// gives every replica of its rate limit service. Default "default",
	// as upstream's; see NoResponseWarning for a mismatch.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are added to the stream's gRPC metadata (upstream's
	// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS), e.g. a bearer token.
	Headers map[string]string

	// TLS: with UseTLS the connection is TLS, verified against CAFile
	// (the system roots when empty) for ServerName (the host of
	// ServerAddr when empty); CertFile and KeyFile, both or neither, are
	// this client's certificate for mutual TLS. The files are read at
	// every connect, so rotated certificates are picked up on the next
	// reconnect.
	UseTLS             bool
	CAFile             string
	CertFile, KeyFile  string
	ServerName         string
	InsecureSkipVerify bool // tests only; logged loudly

	// BackoffInitial and BackoffMax bound the wait before reconnecting:
	// it doubles from BackoffInitial up to BackoffMax, each wait drawn
	// at random between half and the whole (full jitter would let every
	// node of a cluster reconnect at once after a control plane
	// restart). A stream that delivered a configuration resets it.
	// Defaults 500ms and 30s.
	BackoffInitial, BackoffMax time.Duration
	// MaxRecvMsgBytes caps one response. Default 16 MiB: the state of
	// the world for every domain arrives in one message.
	MaxRecvMsgBytes int
	// NackPause is how long the same refused configuration, sent again,
	// waits for its NACK (see refusal). Default 1s.
	NackPause time.Duration
	// KeepaliveTime, when not zero, pings the open stream after that
	// long without traffic, so that a control plane that vanished
	// without closing the connection is noticed (without pings only the
	// operating system's TCP keepalive notices it, hours later on Linux's
	// defaults; the configuration in force stays meanwhile). It must not
	// be more frequent than the server's keepalive enforcement allows:
	// a gRPC server's default policy (Envoy Gateway's xDS server keeps
	// it) answers pings more often than every 5 minutes with GOAWAY
	// too_many_pings and drops the stream. gRPC would raise anything
	// under 10s to 10s; Validate refuses it instead. Default 0, no
	// pings, as upstream.
	KeepaliveTime time.Duration
	// NoResponseWarning is how long an open stream may go without a
	// first response before a warning is logged, once per stream: a
	// control plane sends nothing to a node id it has no snapshot for,
	// so a wrong NodeID looks like a healthy, silent stream. Silence
	// after a response is normal (a state-of-the-world server sends
	// only changes). Default 30s.
	NoResponseWarning time.Duration
}

// minKeepaliveTime is gRPC's floor on client keepalive pings: a shorter
// KeepaliveTime would be raised to it, silently.
const minKeepaliveTime = 10 * time.Second

// DefaultConfig is no subscription; set ServerAddr to subscribe.
func DefaultConfig() Config {
	return Config{
		NodeID:          "default",
		BackoffInitial:  500 * time.Millisecond,
		BackoffMax:      30 * time.Second,
		MaxRecvMsgBytes: 16 << 20,
		NackPause:       time.Second,
		// No keepalive pings: see KeepaliveTime.
		NoResponseWarning: 30 * time.Second,
	}
}

// Enabled reports whether a control plane is configured.
func (c Config) Enabled() bool { return c.ServerAddr != "" }

// Validate reports every bad field, named.
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, path, format string, args ...any) {
		if bad {
			errs = append(errs, field.Errorf(path, format, args...))
		}
	}
	check(c.NodeID == "", "NodeID", "must not be empty")
	check(c.BackoffInitial <= 0, "BackoffInitial", "must be positive, got %s", c.BackoffInitial)
	check(c.BackoffMax < c.BackoffInitial, "BackoffMax", "must be ≥ BackoffInitial (%s), got %s", c.BackoffInitial, c.BackoffMax)
	check(c.NackPause <= 0, "NackPause", "must be positive, got %s", c.NackPause)
	check(c.MaxRecvMsgBytes < 1024, "MaxRecvMsgBytes", "must be ≥ 1024, got %d", c.MaxRecvMsgBytes)
	check(c.KeepaliveTime != 0 && c.KeepaliveTime < minKeepaliveTime, "KeepaliveTime", "must be 0 (no pings) or ≥ %s (gRPC's minimum), got %s", minKeepaliveTime, c.KeepaliveTime)
	check(c.NoResponseWarning <= 0, "NoResponseWarning", "must be positive, got %s", c.NoResponseWarning)
	check((c.CertFile == "") != (c.KeyFile == ""), "CertFile", "and KeyFile go together")
	tlsFiles := c.CAFile != "" || c.CertFile != "" || c.ServerName != "" || c.InsecureSkipVerify
	check(tlsFiles && !c.UseTLS, "UseTLS", "must be set with CAFile, CertFile, ServerName or InsecureSkipVerify")
	return errors.Join(errs...)
}

// tlsConfig reads the TLS files, for one connect.
func (c Config) tlsConfig() (*tls.Config, error) {
	t, err := tlsfiles.Client(c.CAFile, c.CertFile, c.KeyFile, c.ServerName)
	if err != nil {
		return nil, fmt.Errorf("xds: %w", err)
	}
	t.InsecureSkipVerify = c.InsecureSkipVerify
	return t, nil
}

// Source names the control plane, for RuleSet.Source and logs.
func (c Config) Source() string { return "xds://" + c.ServerAddr }
