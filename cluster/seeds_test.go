package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
)

// fakeDNS maps names to addresses, like a headless Service or a compose
// network alias. answer, when set, decides each answer from the call
// number (1, 2, ...), so a test can change what the name resolves to.
type fakeDNS struct {
	mu     sync.Mutex
	calls  map[string]int
	answer func(host string, call int) ([]net.IPAddr, error)
}

func (f *fakeDNS) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[host]++
	n := f.calls[host]
	f.mu.Unlock()
	return f.answer(host, n)
}

func (f *fakeDNS) count(host string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[host]
}

func ips(addrs ...string) []net.IPAddr {
	out := make([]net.IPAddr, len(addrs))
	for i, a := range addrs {
		out[i] = net.IPAddr{IP: net.ParseIP(a)}
	}
	return out
}

var errNoSuchHost = &net.DNSError{Err: "no such host", IsNotFound: true}

// startOn starts a member on ip:port with the given resolver and seeds.
func startOn(t *testing.T, id, ip string, port int, dns Resolver, join ...string) (*Cluster, *recorder, error) {
	t.Helper()
	rec := &recorder{}
	c, err := Start(Config{
		ID: id, BindAddr: net.JoinHostPort(ip, strconv.Itoa(port)), GRPCAddr: ip + ":1", Join: join,
		Resolver: dns, Profile: ProfileLocal, OnChange: rec.onChange,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id),
	})
	if err == nil {
		t.Cleanup(func() { _ = c.Shutdown() })
	}
	return c, rec, err
}

// samePortOn starts one member on each of ips, all on one gossip port:
// a DNS name gives addresses, not ports, so the members behind one name
// share the port, as pods and containers do. The port is found free on
// the first address and retried if another process takes it meanwhile.
func samePortOn(t *testing.T, dns Resolver, ipList ...string) ([]*Cluster, []*recorder, int) {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		ln, err := net.Listen("tcp", ipList[0]+":0")
		require.NoError(t, err, "127.0.0.0/8 is loopback on Linux")
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		var cs []*Cluster
		var rs []*recorder
		for i, ip := range ipList {
			c, r, err := startOn(t, fmt.Sprintf("node-%d", i+1), ip, port, dns)
			if err != nil {
				t.Logf("port %d busy on %s (%v); another port", port, ip, err)
				for _, c := range cs {
					_ = c.Shutdown()
				}
				cs = nil
				break
			}
			cs, rs = append(cs, c), append(rs, r)
		}
		if cs != nil {
			return cs, rs, port
		}
	}
	t.Fatal("no gossip port free on every address")
	return nil, nil, 0
}

// Node 3 is given one seed, a name that resolves to a dead address and to
// nodes 1 and 2, which know nothing of each other. All three converge:
// every answer was tried, the dead one did not stop the rest, and the
// join through node 2 is what tells node 1 about node 2.
func TestJoinThroughANameThatResolvesToSeveralAddresses(t *testing.T) {
	dns := &fakeDNS{answer: func(host string, _ int) ([]net.IPAddr, error) {
		if host != "peers.test" {
			return nil, errNoSuchHost
		}
		return ips("127.0.0.34", "127.0.0.31", "127.0.0.32"), nil // .34: nothing listens
	}}
	cs, rs, port := samePortOn(t, dns, "127.0.0.31", "127.0.0.32")
	require.Len(t, cs[0].Members(), 1, "nodes 1 and 2 start apart")
	_, r3, err := startOn(t, "node-3", "127.0.0.33", port, dns, "peers.test:"+strconv.Itoa(port))
	require.NoError(t, err)
	for _, r := range append(rs, r3) {
		eventually(t, 10*time.Second, func() bool { return r.ids() == "node-1,node-2,node-3" }, "members: %s", r.ids)
	}
	assert.GreaterOrEqual(t, dns.count("peers.test"), 1)
}

// The first answer lists only a dead address (the seed pod is restarting);
// the reconnector resolves the name again on its next round, gets the
// live member's new address, and joins.
func TestSeedNameIsResolvedAgainOnEveryRetry(t *testing.T) {
	dns := &fakeDNS{answer: func(host string, call int) ([]net.IPAddr, error) {
		switch {
		case host != "seed.test":
			return nil, errNoSuchHost
		case call == 1:
			return ips("127.0.0.44"), nil // the old, dead address
		case call == 2:
			return nil, errors.New("server misbehaving") // a transient DNS error is retried too
		default:
			return ips("127.0.0.44", "127.0.0.41"), nil
		}
	}}
	cs, rs, port := samePortOn(t, dns, "127.0.0.41")
	_, r2, err := startOn(t, "node-2", "127.0.0.42", port, dns, "seed.test:"+strconv.Itoa(port))
	require.NoError(t, err)
	require.Len(t, cs[0].Members(), 1, "the first answer held no live member")
	for _, r := range []*recorder{rs[0], r2} {
		eventually(t, 10*time.Second, func() bool { return r.ids() == "node-1,node-2" }, "members: %s", r.ids)
	}
	assert.GreaterOrEqual(t, dns.count("seed.test"), 3, "resolved again on each retry")
}

// Two pairs formed apart at bootstrap (each pair's first answer listed
// only itself, as cached or incomplete DNS answers can) are not alone, so
// they no longer retry their seeds; the periodic refresh of the seed name
// finds the other pair's addresses and merges the groups.
func TestSeedRefreshMergesGroupsThatFormedApart(t *testing.T) {
	var (
		mu      sync.Mutex
		partial = true
	)
	dns := &fakeDNS{answer: func(host string, _ int) ([]net.IPAddr, error) {
		mu.Lock()
		defer mu.Unlock()
		if partial {
			return nil, errNoSuchHost
		}
		return ips("127.0.0.61", "127.0.0.62", "127.0.0.63", "127.0.0.64"), nil
	}}
	port := freePort(t, "127.0.0.61", "127.0.0.62", "127.0.0.63", "127.0.0.64")
	p := strconv.Itoa(port)
	var recs []*recorder
	pair := func(a, b string, idA, idB string) {
		ca, ra := startRefreshing(t, idA, a, port, dns, "peers.test:"+p)
		_, rb := startRefreshing(t, idB, b, port, dns, "peers.test:"+p, ca.GossipAddr())
		recs = append(recs, ra, rb)
	}
	pair("127.0.0.61", "127.0.0.62", "node-a1", "node-a2")
	pair("127.0.0.63", "127.0.0.64", "node-b1", "node-b2")
	eventually(t, 5*time.Second, func() bool { return recs[0].ids() == "node-a1,node-a2" && recs[2].ids() == "node-b1,node-b2" },
		"pairs formed: %s and %s", recs[0].ids, recs[2].ids)

	mu.Lock()
	partial = false // the name now lists all four
	mu.Unlock()
	for _, r := range recs {
		eventually(t, 10*time.Second, func() bool { return r.ids() == "node-a1,node-a2,node-b1,node-b2" }, "members: %s", r.ids)
	}
}

// freePort finds a port free for TCP and UDP on every one of ipList.
func freePort(t *testing.T, ipList ...string) int {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		ln, err := net.Listen("tcp", ipList[0]+":0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		free := true
		for _, ip := range ipList {
			a := net.JoinHostPort(ip, strconv.Itoa(port))
			tl, err := net.Listen("tcp", a)
			if err != nil {
				free = false
				break
			}
			ul, err := net.ListenPacket("udp", a)
			tl.Close()
			if err != nil {
				free = false
				break
			}
			ul.Close()
		}
		if free {
			return port
		}
	}
	t.Fatal("no port free on every address")
	return 0
}

// startRefreshing starts a member that refreshes its seed names every 300 ms.
func startRefreshing(t *testing.T, id, ip string, port int, dns Resolver, join ...string) (*Cluster, *recorder) {
	t.Helper()
	rec := &recorder{}
	c, err := Start(Config{
		ID: id, BindAddr: net.JoinHostPort(ip, strconv.Itoa(port)), GRPCAddr: ip + ":1", Join: join,
		Resolver: dns, Profile: ProfileLocal, OnChange: rec.onChange, SeedRefreshInterval: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testlog.New(t), &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown() })
	return c, rec
}

// A member behind a name that lists it is not its own seed: it stays alone,
// says so, and keeps resolving until another address appears.
func TestResolveSeedsSkipsSelfAndDuplicates(t *testing.T) {
	dns := &fakeDNS{answer: func(host string, _ int) ([]net.IPAddr, error) {
		switch host {
		case "all.test":
			return ips("127.0.0.51", "127.0.0.52", "127.0.0.52"), nil
		case "v6.test":
			return ips("::1"), nil
		}
		return nil, errNoSuchHost
	}}
	cs, _, port := samePortOn(t, dns, "127.0.0.51")
	c := cs[0]
	p := strconv.Itoa(port)
	got, err := c.resolveSeeds(t.Context(), []string{
		"all.test:" + p,     // self and .52 twice
		"127.0.0.51:" + p,   // self, by IP
		"127.0.0.52:" + p,   // already there
		"all.test",          // no port: our own gossip port
		"127.0.0.51:7",      // our IP, another port: someone else
		"v6.test:" + p,      // IPv6 answers keep their brackets
		"missing.test:" + p, // reported, does not hide the others
		"[::1]:" + p,        // IPv6 literal
		"127.0.0.53",        // IP without port
	})
	assert.Equal(t, []string{"127.0.0.52:" + p, "127.0.0.51:7", "[::1]:" + p, "127.0.0.53:" + p}, got)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing.test")
	var dnsErr *net.DNSError
	assert.ErrorAs(t, err, &dnsErr, "the resolver's error is wrapped, not flattened")
	assert.Len(t, c.Members(), 1)
}

// The default resolver is the real one: "localhost" comes from /etc/hosts.
func TestJoinThroughLocalhostWithTheDefaultResolver(t *testing.T) {
	a, ra := start(t, "node-1", "127.0.0.1:0")
	_, port, err := net.SplitHostPort(a.GossipAddr())
	require.NoError(t, err)
	_, rb := start(t, "node-2", "127.0.0.1:0", "localhost:"+port)
	for _, r := range []*recorder{ra, rb} {
		eventually(t, 5*time.Second, func() bool { return r.ids() == "node-1,node-2" }, "members: %s", r.ids)
	}
}

func TestSplitSeed(t *testing.T) {
	for _, tc := range []struct {
		seed, host string
		port       int
		err        string
	}{
		{seed: "n1:7946", host: "n1", port: 7946},
		{seed: "peerlimit-gossip.default.svc.cluster.local:7946", host: "peerlimit-gossip.default.svc.cluster.local", port: 7946},
		{seed: "[fd00::1]:7946", host: "fd00::1", port: 7946},
		{seed: "n1", host: "n1"},
		{seed: "10.0.0.1", host: "10.0.0.1"},
		{seed: "fd00::1", host: "fd00::1"},
		{seed: "", err: "want host:port"},
		{seed: ":7946", err: "no host"},
		{seed: "n1:http", err: "bad port"},
		{seed: "n1:70000", err: "bad port"},
		{seed: "n1:0", err: "bad port"},
		{seed: "a:b:c", err: "want host:port"},
		{seed: "name/n1:7946", err: "want host:port"},
	} {
		host, port, err := splitSeed(tc.seed)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.seed)
			continue
		}
		require.NoError(t, err, tc.seed)
		assert.Equal(t, tc.host, host, tc.seed)
		assert.Equal(t, tc.port, port, tc.seed)
	}
	_, err := Start(Config{ID: "x", BindAddr: "127.0.0.1:0", GRPCAddr: "x:1", Join: []string{"ok:1", "n1:http"}})
	assert.ErrorContains(t, err, `Join: seed "n1:http": bad port`)
}
