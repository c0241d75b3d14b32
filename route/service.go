// Package route is a node's request path, whatever the transport. It has
// three roles, each a type of its own over one shared core:
//
//   - Ingress is what the faces call (the gRPC API, package rpc; the HTTP
//     API, httpapi; Envoy's rate limit service, envoyrls): it finds each
//     check's owner and decides it on this node's store, stamped with this
//     node's clock, or takes it to the owner through the chain of
//     chain.go (a budget lease, the forward, a relay, the heir, the
//     fallback policy). It also resolves named policies and resets keys
//     cluster-wide.
//   - Handler is what other members call (peer.Handler): forwarded and
//     relayed checks, handoffs, replicas, leases, resets, reports.
//   - Queries answers the console's questions: a key's state on its owner.
//
// peerrpc carries the calls between members over gRPC,
// internal/testkit/memnet over an in-memory network with injected faults.
package route

import (
	"fmt"
)

// FallbackPolicy says how to answer a check whose owner is unreachable.
// Every such answer is marked Degraded and counted in
// peerlimit_owner_unreachable_total.
type FallbackPolicy uint8

const (
	// FallbackLocal decides on this node's own store, as if it owned the
	// key. The state it builds is handed to the owner when it is back (or
	// kept, if this node inherits the key), so admissions made meanwhile
	// still count: at most one limit per side while the owner is cut off.
	FallbackLocal FallbackPolicy = iota
	// FallbackAllow lets the request through (fail open).
	FallbackAllow
	// FallbackDeny refuses it (fail closed), with a retry after of one
	// second.
	FallbackDeny
	// FallbackShare decides on this node's own store, as FallbackLocal
	// does, but against this node's share of the limit, so that the sides
	// of a partition together stay near one limit instead of one each. A
	// check of an unreachable owner gets limit ÷ the members this node
	// knows (live and recently failed: Deps.Share); while members have
	// failed, every check this node decides, its own keys' too, gets
	// limit × live ÷ known. Such answers are marked Degraded.
	FallbackShare
)

// String returns the policy's flag spelling.
func (f FallbackPolicy) String() string {
	return [...]string{"local", "allow", "deny", "share"}[min(int(f), 3)]
}

// ParseFallbackPolicy reads "local", "allow", "deny" or "share".
func ParseFallbackPolicy(s string) (FallbackPolicy, error) {
	for p := FallbackLocal; p <= FallbackShare; p++ {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown fallback policy %q; want local, allow, deny or share", s)
}

// Service is a node's request path, by role. The faces call its Ingress
// (embedded: svc.Check), other members its Peer, the console its
// Queries. Each is safe for concurrent use.
type Service struct {
	*Ingress
	// Peer handles the calls of other members.
	Peer *Handler
	// Queries answers the console's questions.
	Queries *Queries
}

// NewService returns a node's request path with cfg's settings over deps.
// It assembles the parts that serve only the request path: the receiver
// of handoffs and the resetter; the node assembles what runs on its own
// (leases, replicas, the handoff sender) and passes it in deps.
func NewService(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := newCore(cfg, deps)
	if err != nil {
		return nil, err
	}
	return &Service{Ingress: &Ingress{core: c, chain: chain{c}}, Peer: &Handler{c}, Queries: &Queries{c}}, nil
}
