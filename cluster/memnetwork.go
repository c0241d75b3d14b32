package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemNetwork is an in-memory network for the gossip of members in one
// process: memberlist runs over it as over UDP and TCP, with no socket,
// so that a whole cluster can run inside a testing/synctest bubble (the
// simulation, package sim). What becomes of each packet and connection is
// its Links' to decide: delivered at once, later, or lost. Safe for
// concurrent use.
type MemNetwork struct {
	links Links

	mu     sync.Mutex
	byAddr map[string]*memTransport
	ips    map[string]net.IP // by member id: a member back after a restart keeps its address
	next   int
}

// Links decides the fate of the gossip between two members, by id: a
// packet (UDP) or a connection (TCP) from one to the other is lost when
// deliver is false, else delivered after delay. Safe for concurrent use,
// and fast: every packet asks.
type Links interface {
	Gossip(from, to string) (deliver bool, delay time.Duration)
}

// NewMemNetwork returns an empty network whose links decides every
// packet's fate (nil: all delivered at once).
func NewMemNetwork(links Links) *MemNetwork {
	if links == nil {
		links = openLinks{}
	}
	return &MemNetwork{links: links, byAddr: map[string]*memTransport{}, ips: map[string]net.IP{}}
}

type openLinks struct{}

func (openLinks) Gossip(string, string) (bool, time.Duration) { return true, 0 }

// transport returns a member's end of the network, at an address of its
// own (10.0.x.y:7946), the one it had before if it restarts, as a process
// restarted in place, or a pod on its old address, comes back.
func (n *MemNetwork) transport(id string) *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	ip := n.ips[id]
	if ip == nil {
		n.next++
		ip = net.IPv4(10, 0, byte(n.next>>8), byte(n.next))
		n.ips[id] = ip
	}
	t := &memTransport{net: n, id: id, ip: ip, port: 7946,
		packets: make(chan *memberlist.Packet, 1024), streams: make(chan net.Conn, 64), done: make(chan struct{})}
	n.byAddr[t.addr()] = t
	return t
}

// memTransport is one member's end of a MemNetwork (memberlist.Transport).
type memTransport struct {
	net     *MemNetwork
	id      string
	ip      net.IP
	port    int
	packets chan *memberlist.Packet
	streams chan net.Conn
	done    chan struct{}
	once    sync.Once
	// connMu orders a connection's arrival with the shutdown, which
	// closes what arrived unread: net.Pipe's writes wait for a reader,
	// and a member gone must not leave its dialers waiting.
	connMu sync.Mutex
	closed bool
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

func (t *memTransport) addr() string { return net.JoinHostPort(t.ip.String(), strconv.Itoa(t.port)) }

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) { return t.ip, t.port, nil }

// WriteTo implements memberlist.Transport.
func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport: as UDP, a
// packet to nobody, or that the links lose, is lost without an error,
// and a receiver that does not keep up loses what overflows its queue.
func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	dest := t.net.lookup(a.Addr)
	if dest == nil {
		return now, nil
	}
	deliver, delay := t.net.links.Gossip(t.id, dest.id)
	if !deliver {
		return now, nil
	}
	p := &memberlist.Packet{Buf: append([]byte(nil), b...), From: &net.UDPAddr{IP: t.ip, Port: t.port}}
	send := func() {
		p.Timestamp = time.Now()
		select {
		case dest.packets <- p:
		case <-dest.done:
		default: // its queue is full: lost, as UDP would be
		}
	}
	if delay > 0 {
		time.AfterFunc(delay, send)
	} else {
		send()
	}
	return now, nil
}

// PacketCh implements memberlist.Transport.
func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout implements memberlist.Transport.
func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport: a
// connection the links lose times out, as a connection to a host cut off
// does; one they delay is established after the delay.
func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest := t.net.lookup(a.Addr)
	if dest == nil {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errors.New("connection refused"))
	}
	deliver, delay := t.net.links.Gossip(t.id, dest.id)
	if !deliver || delay >= timeout {
		time.Sleep(timeout)
		return nil, fmt.Errorf("dial %s: %w", a.Addr, os.ErrDeadlineExceeded)
	}
	time.Sleep(delay)
	local, remote := net.Pipe()
	if dest.accept(remote) {
		return local, nil
	}
	local.Close()
	remote.Close()
	return nil, fmt.Errorf("dial %s: %w", a.Addr, errors.New("connection refused"))
}

// accept queues a connection for memberlist to read, unless the
// transport is shut down or its queue is full.
func (t *memTransport) accept(c net.Conn) bool {
	t.connMu.Lock()
	defer t.connMu.Unlock()
	if t.closed {
		return false
	}
	select {
	case t.streams <- c:
		return true
	default:
		return false
	}
}

// StreamCh implements memberlist.Transport.
func (t *memTransport) StreamCh() <-chan net.Conn { return t.streams }

// IngestPacket implements memberlist.NodeAwareTransport; unused here.
func (t *memTransport) IngestPacket(conn net.Conn, addr net.Addr, now time.Time, shouldClose bool) error {
	return errors.New("cluster: MemNetwork ingests nothing")
}

// IngestStream implements memberlist.NodeAwareTransport; unused here.
func (t *memTransport) IngestStream(conn net.Conn) error {
	return errors.New("cluster: MemNetwork ingests nothing")
}

// Shutdown implements memberlist.Transport: the member's address is
// gone; what was on its way to it is dropped.
func (t *memTransport) Shutdown() error {
	t.once.Do(func() {
		close(t.done)
		t.net.mu.Lock()
		delete(t.net.byAddr, t.addr())
		t.net.mu.Unlock()
		t.connMu.Lock()
		t.closed = true
		t.connMu.Unlock()
		for {
			select {
			case c := <-t.streams: // nobody will read it: its dialer's writes fail
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (n *MemNetwork) lookup(addr string) *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byAddr[addr]
}
