package peerrpc

import (
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/peerlimit/peerlimit/internal/field"
)

// Config holds the settings of a node's calls to other members. Start
// from DefaultConfig.
type Config struct {
	// BatchLimit is the most checks one batch of forwarded checks carries.
	// 1 turns batching off: every check is its own Forward call. Default
	// 128.
	BatchLimit int
	// MaxInflight is the most batches out to one peer at once, sent and
	// not yet answered. While they are out, checks bound there gather, and
	// go together as soon as one is answered: under load a batch carries
	// what arrived during the one before it. Default 1.
	MaxInflight int
	// Timeout bounds every call to a peer, and the wait for each batch's
	// answer. Past it the owner counts as unreachable and the fallback
	// policy answers. Default 500ms.
	Timeout time.Duration
	// KeepaliveTimeout bounds how long a dead or stalled link to a peer
	// (a cut, a frozen host, a half-open connection after a heal) goes
	// unnoticed: data sent on it and not acknowledged within it closes
	// the connection (grpc-go sets TCP_USER_TIMEOUT to it, on Linux), and
	// so does a keepalive ping left unanswered as long. Forwards then fail
	// at once, to a relay or the fallback, instead of each waiting for
	// Timeout, and the connection is redialled. Default 1 s.
	//
	// KeepaliveTime is how long a connection may be idle before it is
	// pinged: an idle dead link is noticed within KeepaliveTime +
	// KeepaliveTimeout. grpc-go allows no less than 10 s. Default 10 s.
	// The server side must permit pings this often (ServerKeepalive).
	KeepaliveTime, KeepaliveTimeout time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{BatchLimit: 128, MaxInflight: 1, Timeout: 500 * time.Millisecond, KeepaliveTime: 10 * time.Second, KeepaliveTimeout: time.Second}
}

// Validate reports every unusable field, each a *field.Error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.BatchLimit < 1 {
		errs = append(errs, field.Errorf("BatchLimit", "must be ≥ 1 (1 turns batching off), got %d", c.BatchLimit))
	}
	if c.MaxInflight < 1 {
		errs = append(errs, field.Errorf("MaxInflight", "must be ≥ 1, got %d", c.MaxInflight))
	}
	if c.Timeout <= 0 {
		errs = append(errs, field.Errorf("Timeout", "must be positive, got %s", c.Timeout))
	}
	if c.KeepaliveTime < 10*time.Second { // grpc-go would raise it, silently
		errs = append(errs, field.Errorf("KeepaliveTime", "must be ≥ 10s (grpc-go's minimum), got %s", c.KeepaliveTime))
	}
	if c.KeepaliveTimeout <= 0 {
		errs = append(errs, field.Errorf("KeepaliveTimeout", "must be positive, got %s", c.KeepaliveTimeout))
	}
	return errors.Join(errs...)
}

// keepalive is the dial option that pings a silent peer connection.
func (c Config) keepalive() grpc.DialOption {
	return grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout, PermitWithoutStream: true})
}

// ServerKeepalive is the server option that lets peers ping as often as
// c.KeepaliveTime: grpc-go's default policy answers a ping more often
// than every 5 minutes by closing the connection ("too_many_pings").
func (c Config) ServerKeepalive() grpc.ServerOption {
	return grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.KeepaliveTime / 2, PermitWithoutStream: true})
}
