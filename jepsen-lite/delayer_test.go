package jepsenlite

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// A fixed delay releases each packet exactly its delay after it arrived,
// in arrival order; nothing is due before.
func TestHoldQueueFixedDelay(t *testing.T) {
	q := newHoldQueue(10, 1)
	l := Link{Delay: 20 * time.Millisecond}
	require.True(t, q.Offer(1, l, t0))
	require.True(t, q.Offer(2, l, t0.Add(5*time.Millisecond)))
	require.True(t, q.Offer(3, l, t0.Add(5*time.Millisecond)))

	next, ok := q.Next()
	require.True(t, ok)
	assert.Equal(t, t0.Add(20*time.Millisecond), next)
	assert.Empty(t, q.Due(t0.Add(19*time.Millisecond), nil))
	assert.Equal(t, []uint32{1}, q.Due(t0.Add(20*time.Millisecond), nil))
	assert.Empty(t, q.Due(t0.Add(24*time.Millisecond), nil))
	assert.Equal(t, []uint32{2, 3}, q.Due(t0.Add(25*time.Millisecond), nil), "ties in arrival order")
	_, ok = q.Next()
	assert.False(t, ok)
	assert.Equal(t, DelayStats{Held: 3, MaxQueued: 3}, q.Stats())
}

// Jitter spreads the delays uniformly over [delay−jitter, delay+jitter],
// reorders packets, and is the same for the same seed.
func TestHoldQueueJitter(t *testing.T) {
	l := Link{Delay: 20 * time.Millisecond, Jitter: 10 * time.Millisecond}
	run := func(seed uint64) (delays []time.Duration, order []uint32) {
		q := newHoldQueue(2000, seed)
		for i := range uint32(1000) {
			require.True(t, q.Offer(i, l, t0.Add(time.Duration(i)*time.Millisecond)))
		}
		arrived := func(id uint32) time.Time { return t0.Add(time.Duration(id) * time.Millisecond) }
		for now := t0; q.Len() > 0; now = now.Add(100 * time.Microsecond) {
			for _, id := range q.Due(now, nil) {
				delays = append(delays, now.Sub(arrived(id)))
				order = append(order, id)
			}
		}
		return delays, order
	}
	delays, order := run(7)
	require.Len(t, delays, 1000)
	var low, high int
	for _, d := range delays {
		// Released at the first 100 µs step at or after it is due.
		require.GreaterOrEqual(t, d, 10*time.Millisecond)
		require.Less(t, d, 30*time.Millisecond+100*time.Microsecond)
		if d < 20*time.Millisecond {
			low++
		} else {
			high++
		}
	}
	assert.InDelta(t, 500, low, 80, "uniform: about half below the mean")
	assert.False(t, slices.IsSorted(order), "jitter reorders")
	again, orderAgain := run(7)
	assert.Equal(t, delays, again, "same seed, same delays")
	assert.Equal(t, order, orderAgain)
	other, _ := run(8)
	assert.NotEqual(t, delays, other)
}

// Loss drops about its share; a full queue drops and counts the rest;
// Drain releases everything held.
func TestHoldQueueLossAndCapacity(t *testing.T) {
	q := newHoldQueue(1<<16, 3)
	lossy := Link{Delay: time.Millisecond, Loss: 0.02}
	for i := range uint32(10000) {
		q.Offer(i, lossy, t0)
	}
	st := q.Stats()
	assert.InDelta(t, 200, st.Lost, 60)
	assert.Equal(t, 10000-int(st.Lost), q.Len())

	small := newHoldQueue(3, 1)
	l := Link{Delay: time.Second}
	for i := range uint32(5) {
		assert.Equal(t, i < 3, small.Offer(i, l, t0), "packet %d", i)
	}
	assert.Equal(t, DelayStats{Full: 2, MaxQueued: 3}, small.Stats())
	assert.Equal(t, []uint32{0, 1, 2}, small.Drain(nil))
	assert.True(t, small.Offer(9, l, t0), "room again")
	assert.Equal(t, int64(2), small.Stats().Dropped())
}

func TestLinkValidate(t *testing.T) {
	assert.NoError(t, Link{Delay: 20 * time.Millisecond, Jitter: 10 * time.Millisecond, Loss: 0.02}.Validate())
	assert.ErrorContains(t, Link{Delay: -1}.Validate(), "negative")
	assert.ErrorContains(t, Link{Loss: 1.5}.Validate(), "loss")
	assert.ErrorContains(t, Link{Delay: time.Minute}.Validate(), "10 s")
}

// newTestDelayer makes a delayer, or skips the test saying why it cannot.
func newTestDelayer(t *testing.T, chain string) *Delayer {
	t.Helper()
	d, err := NewDelayer(DefaultDelayerConfig(chain, 1))
	if errors.Is(err, ErrNoDelayer) {
		t.Skipf("skipped, not passed: %v", err)
	}
	require.NoError(t, err)
	return d
}

// udpEcho answers every datagram on addr until the test ends.
func udpEcho(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(mustAddrPort(t, addr)))
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

// rtt sends n datagrams from src to the echo, one at a time, and returns
// the shortest round trip and how many came back.
func rtt(t *testing.T, src string, echo *net.UDPConn, n int) (time.Duration, int) {
	return rttWithin(t, src, echo, n, time.Second)
}

func rttWithin(t *testing.T, src string, echo *net.UDPConn, n int, wait time.Duration) (time.Duration, int) {
	t.Helper()
	c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(mustAddrPort(t, src)), echo.LocalAddr().(*net.UDPAddr))
	require.NoError(t, err)
	defer c.Close()
	best, got := time.Duration(1<<62), 0
	buf := make([]byte, 64)
	for i := range n {
		start := time.Now()
		_, err := c.Write([]byte{byte(i)})
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(start.Add(wait)))
		for { // skip a late answer to an earlier datagram
			m, err := c.Read(buf)
			if err != nil {
				break
			}
			if m == 1 && buf[0] == byte(i) {
				best, got = min(best, time.Since(start)), got+1
				break
			}
		}
	}
	return best, got
}

// testAddr is 127.a.b.host, with a and b from the pid as the chaos
// test's nodes have: concurrent root test runs delay, and clean up, their
// own addresses and chains.
func testAddr(host int) string {
	pid := os.Getpid()
	return fmt.Sprintf("127.%d.%d.%d", 1+pid/250%250, pid%250, host)
}

// testChain is the chain name prefix with the pid.
func testChain(prefix string) string { return fmt.Sprintf("%s-%d", prefix, os.Getpid()) }

// The delayer really delays loopback packets, one way or both, only
// between the addresses it is given, and leaves no rule when closed.
func TestDelayerDelaysLoopbackUDP(t *testing.T) {
	// Registered first, run last: after the echo's cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	chain := testChain("PLDELAY-TEST")
	d := newTestDelayer(t, chain)
	defer d.Close()
	a, b, c := testAddr(61), testAddr(62), testAddr(63)

	echo := udpEcho(t, b+":0")
	fast, got := rtt(t, a, echo, 5)
	require.Equal(t, 5, got)
	require.Less(t, fast, 15*time.Millisecond, "undelayed round trip")

	oneWay := Link{Delay: 30 * time.Millisecond}
	require.NoError(t, d.Delay([]string{a}, []string{b}, oneWay))
	slow, got := rtt(t, a, echo, 5)
	assert.Equal(t, 5, got)
	assert.GreaterOrEqual(t, slow, 30*time.Millisecond, "one way delayed")
	other, _ := rtt(t, c, echo, 5)
	assert.Less(t, other, 15*time.Millisecond, "another address is not delayed")

	// TCP too (the peers' traffic): the SYN waits, so does the connect.
	ln, err := net.Listen("tcp", b+":0")
	require.NoError(t, err)
	defer ln.Close()
	start := time.Now()
	require.NoError(t, dialFrom(a, ln.Addr().String()))
	assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond, "a TCP connect, one way delayed")

	require.NoError(t, d.Delay([]string{b}, []string{a}, oneWay))
	both, _ := rtt(t, a, echo, 5)
	assert.GreaterOrEqual(t, both, 60*time.Millisecond, "both ways delayed")

	require.NoError(t, d.Heal())
	healed, _ := rtt(t, a, echo, 5)
	assert.Less(t, healed, 15*time.Millisecond, "healed")

	require.NoError(t, d.Delay([]string{a}, []string{b}, Link{Loss: 1}))
	_, got = rttWithin(t, a, echo, 3, 200*time.Millisecond)
	assert.Zero(t, got, "a link that loses everything")
	st := d.Stats()
	assert.GreaterOrEqual(t, st.Held, int64(15), "5 datagrams one way, 5 both ways")
	assert.GreaterOrEqual(t, st.Lost, int64(3))
	assert.Zero(t, st.Full)
	errs, lastErr := d.Errors()
	assert.Zero(t, errs, "no verdict refused, no overrun: %v", lastErr)

	require.NoError(t, d.Close())
	out, _ := exec.Command("iptables", "-S", "OUTPUT").CombinedOutput()
	assert.NotContains(t, string(out), chain, "Close removes the jump")
	assert.Error(t, exec.Command("iptables", "-n", "-L", chain).Run(), "Close removes the chain")
	require.NoError(t, d.Close(), "Close twice is fine")
}

// Rules a killed run left behind are removed, not stacked, and a chain
// nobody reads lets packets pass (--queue-bypass).
func TestDelayerRemovesLeftovers(t *testing.T) {
	chain := testChain("PLDELAY-LEFT")
	a, b := testAddr(64), testAddr(65)
	first := newTestDelayer(t, chain)
	require.NoError(t, first.Delay([]string{a}, []string{b}, Link{Delay: time.Second}))
	killTestDelayer(t, first)
	echo := udpEcho(t, b+":0")
	bypass, got := rtt(t, a, echo, 3)
	assert.Equal(t, 3, got, "no reader: the rule is bypassed")
	assert.Less(t, bypass, 15*time.Millisecond)

	second := newTestDelayer(t, chain)
	defer second.Close()
	rules, err := exec.Command("iptables", "-S", chain).CombinedOutput()
	require.NoError(t, err)
	assert.NotContains(t, string(rules), a)
	out, err := exec.Command("iptables", "-S", "OUTPUT").CombinedOutput()
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(out), "-j "+chain), "one jump to the chain: %s", out)
}

// killTestDelayer stops d as a kill would: its queue goes, its rules stay.
func killTestDelayer(t *testing.T, d *Delayer) {
	t.Helper()
	close(d.stop)
	d.wg.Wait()
	require.NoError(t, d.q.Close())
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	if !strings.Contains(s, ":") {
		s += ":0"
	}
	ap, err := netip.ParseAddrPort(s)
	require.NoError(t, err)
	return ap
}
