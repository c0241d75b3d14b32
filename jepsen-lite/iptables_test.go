package jepsenlite

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func dialFrom(src, dst string) error {
	d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", dst)
	if err == nil {
		c.Close()
	}
	return err
}

// A cut blocks exactly the traffic between the two addresses, Heal
// restores it, and Close leaves no rule or chain behind.
func TestFirewallCutsExactlyOneLink(t *testing.T) {
	const chain = "PLJEPSEN-TEST"
	fw, err := NewFirewall(chain)
	if errors.Is(err, ErrNoFirewall) {
		t.Skipf("skipped, not passed: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = fw.Close() })

	ln, err := net.Listen("tcp", "127.0.0.52:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() { // ends when ln closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dst := ln.Addr().String()

	require.NoError(t, dialFrom("127.0.0.51", dst))
	require.NoError(t, fw.Cut("127.0.0.51", "127.0.0.52"))
	assert.Error(t, dialFrom("127.0.0.51", dst), "the cut link")
	assert.NoError(t, dialFrom("127.0.0.53", dst), "another node")
	assert.NoError(t, dialFrom("127.0.0.1", dst), "the harness's clients")
	rules, err := fw.Rules()
	require.NoError(t, err)
	assert.Contains(t, rules, "-s 127.0.0.51/32 -d 127.0.0.52/32 -j DROP")
	assert.Contains(t, rules, "-s 127.0.0.52/32 -d 127.0.0.51/32 -j DROP")

	require.NoError(t, fw.Heal())
	assert.NoError(t, dialFrom("127.0.0.51", dst))

	require.NoError(t, fw.Cut("127.0.0.51", "127.0.0.52"))
	require.NoError(t, fw.Close())
	assert.NoError(t, dialFrom("127.0.0.51", dst), "Close removes the rules")
	assert.Error(t, exec.Command("iptables", "-n", "-L", chain).Run(), "Close removes the chain")
	require.NoError(t, fw.Close(), "Close twice is fine")
}

// A chain left by a crashed run is replaced, not stacked.
func TestFirewallRemovesLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped, not passed: needs root for iptables")
	}
	const chain = "PLJEPSEN-LEFT"
	first, err := NewFirewall(chain)
	if errors.Is(err, ErrNoFirewall) {
		t.Skipf("skipped, not passed: %v", err)
	}
	require.NoError(t, err)
	require.NoError(t, first.Cut("127.0.0.54", "127.0.0.55"))
	// No Close: the run "crashed".
	second, err := NewFirewall(chain)
	require.NoError(t, err)
	defer second.Close()
	rules, err := second.Rules()
	require.NoError(t, err)
	assert.NotContains(t, rules, "127.0.0.54")
	out, err := exec.Command("iptables", "-S", "INPUT").CombinedOutput()
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(out), "-j "+chain), "one jump to the chain: %s", out)
}
