package node

import (
	"net"
	"net/netip"
	"strings"

	"github.com/peerlimit/peerlimit/cluster"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/rpc"
	"github.com/peerlimit/peerlimit/security"
)

// The node's credentials are package security's (security.Credentials,
// from Config.Security). What is here is what crosses the node's other
// settings: the rules a configuration must follow given its addresses
// and gossip key, and the gRPC guard made of the credentials' rules.

// securityErrs reports what Security allows that the node's other
// settings do not, each a *field.Error naming the field from Config.
func (c Config) securityErrs() []error {
	var errs []error
	s := c.Security
	// Protected mode: a port beyond loopback is reachable by processes that
	// are no members, and Peer calls change counts. The public API's rule
	// (security.Config.Validate) says the same when it applies, so it is
	// said once.
	if !s.PeerAuthOn() && !s.OpenPeers && !s.ClientAuthOn() && !onLoopback(c.GRPCAddr) {
		errs = append(errs, field.Errorf("GRPCAddr", "is %q, beyond loopback, and Peer calls are not authenticated: whoever reaches the port could feed this node checks, "+
			"overwrite counts with a handoff or reset keys. Set a cluster secret of %d+ bytes, the same on every node (%s or %s); "+
			"or mutual TLS between peers (%s, with %s and %s); or, to serve Peer calls to anyone on purpose, %s",
			c.GRPCAddr, security.MinSecretBytes, field.Ref("Security.ClusterSecretFile"), field.Ref("Security.ClusterSecrets"),
			field.Ref("Security.PeerCAFile"), field.Ref("Security.TLSCertFile"), field.Ref("Security.TLSKeyFile"), field.Ref("Security.OpenPeers")))
	}
	if s.GossipKeyringFile != "" && len(c.GossipKey) > 0 {
		errs = append(errs, field.Errorf("GossipKey", "or %s, not both", field.Ref("Security.GossipKeyringFile")))
	}
	return errs
}

// onLoopback reports whether the listen address addr binds loopback only:
// 127.0.0.0/8, ::1 or the name localhost. An empty or unspecified host
// binds every interface, and any other name may resolve to anything. An
// address that is no host:port counts as loopback here: nothing will
// listen on it, and the listener's error says why.
func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// guardOf is the gRPC access control of c's rules, nil when nothing is
// guarded: the request path then pays nothing.
func guardOf(c *security.Credentials) *rpc.Guard {
	if c.Client() == nil && c.Peer() == nil {
		return nil
	}
	return &rpc.Guard{Client: c.Client(), Peer: c.Peer(), Rejections: c.Rejections()}
}

// memberIDs are the ids of members, for the Peer rule.
func memberIDs(members []cluster.Member) []string {
	ids := make([]string, len(members))
	for i, m := range members {
		ids[i] = m.ID
	}
	return ids
}
