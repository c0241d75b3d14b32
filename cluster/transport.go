package cluster

import (
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// boundTransport is memberlist's own NetTransport, except that its TCP
// connections leave from the address the node binds to.
//
// memberlist sends UDP from its bound socket, so probes already carry the
// node's address, but it dials TCP (push-pull sync, the TCP fallback
// probe) with a bare net.Dialer, so the kernel picks the source: on a
// host with several addresses, and on loopback where 127.0.0.1 is the
// source of every connection to 127.0.0.x, traffic between two nodes then
// does not come from either node's address. Firewall rules that should
// separate two nodes (iptables by address, as jepsen-lite uses) miss it,
// and a cut that blocks UDP but not TCP is no cut: the TCP fallback probe
// keeps a partitioned member alive.
type boundTransport struct {
	*memberlist.NetTransport
	dialer net.Dialer
}

// newBoundTransport binds memberlist's transport to host:port and makes
// its outbound TCP leave from host. Port 0 picks a free port (retried as
// memberlist itself does: TCP and UDP must get the same one); the port
// chosen is returned.
func newBoundTransport(host string, port int, logOut io.Writer) (*boundTransport, int, error) {
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return nil, 0, fmt.Errorf("cluster: a bound transport needs a specific IP, got %q", host)
	}
	cfg := &memberlist.NetTransportConfig{
		BindAddrs: []string{host},
		BindPort:  port,
		Logger:    log.New(logOut, "", 0),
	}
	attempts := 1
	if port == 0 {
		attempts = 10
	}
	var err error
	for range attempts {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(cfg); err == nil {
			if port == 0 {
				port = nt.GetAutoBindPort()
			}
			return &boundTransport{
				NetTransport: nt,
				dialer:       net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}},
			}, port, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, 0, fmt.Errorf("cluster: gossip transport on %s: %w", net.JoinHostPort(host, fmt.Sprint(port)), err)
}

// DialTimeout implements memberlist.Transport.
func (t *boundTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *boundTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	d := t.dialer // a copy: Timeout differs per call
	d.Timeout = timeout
	return d.Dial("tcp", a.Addr)
}
