package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// resolveTimeout bounds one seed's DNS lookup, so a slow resolver delays
// neither Start nor the reconnector's next round by much.
const resolveTimeout = 5 * time.Second

// splitSeed parses a seed: host:port, or a host alone (port 0: the
// caller's own gossip port, as memberlist does).
func splitSeed(seed string) (host string, port int, err error) {
	if h, p, err := net.SplitHostPort(seed); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("seed %q: bad port %q", seed, p)
		}
		if h == "" {
			return "", 0, fmt.Errorf("seed %q: no host", seed)
		}
		if strings.ContainsAny(h, "[]/ ") {
			return "", 0, fmt.Errorf("seed %q: want host:port", seed)
		}
		return h, n, nil
	}
	h := strings.TrimSuffix(strings.TrimPrefix(seed, "["), "]")
	if h == "" || strings.ContainsAny(h, "[]/ ") || (strings.Contains(h, ":") && net.ParseIP(h) == nil) {
		return "", 0, fmt.Errorf("seed %q: want host:port", seed)
	}
	return h, 0, nil
}

// resolveSeeds turns seeds into the gossip addresses to contact: IPs as
// given, host names resolved to every address they have, each address
// once and never this member's own (a headless Service or a compose alias
// lists the asking member too, and joining oneself would count as a
// successful join while still alone). It resolves afresh on every call:
// a restarted pod comes back with a new IP. Names that fail to resolve are
// reported in the error; the other seeds are still returned.
//
// memberlist's Join resolves names too, to every address, but through the
// process-wide resolver, which a test cannot point at loopback nodes, and
// it does not skip this member: so names are resolved here and memberlist
// only ever sees IPs.
func (c *Cluster) resolveSeeds(ctx context.Context, seeds []string) ([]string, error) {
	selfHost, selfPortS, _ := net.SplitHostPort(c.gossipAddr)
	selfIP := net.ParseIP(selfHost)
	selfPort, _ := strconv.Atoi(selfPortS)
	var (
		out  []string
		errs []error
		seen = map[string]bool{}
	)
	add := func(ip net.IP, port int) {
		if ip.Equal(selfIP) && port == selfPort {
			return
		}
		a := net.JoinHostPort(ip.String(), strconv.Itoa(port))
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, seed := range seeds {
		host, port, err := splitSeed(seed)
		if err != nil { // Validate rejects these; a failed member's address is always IP:port
			errs = append(errs, err)
			continue
		}
		if port == 0 {
			port = selfPort
		}
		if ip := net.ParseIP(host); ip != nil {
			add(ip, port)
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		ips, err := c.cfg.Resolver.LookupIPAddr(lctx, host)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("resolve seed %s: %w", seed, err))
			continue
		}
		for _, ip := range ips {
			add(ip.IP, port)
		}
	}
	return out, errors.Join(errs...)
}
