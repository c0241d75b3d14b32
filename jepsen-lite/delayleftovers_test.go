package jepsenlite

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The jumps a delayer tagged are found in iptables -S's listing, with the
// pid and queue of the run that added them when the comment says.
func TestParseDelayJumps(t *testing.T) {
	rules := `-P OUTPUT ACCEPT
-A OUTPUT -m comment --comment "peerlimit-jepsen-delay:pid=4242:queue=4100" -j PLDELAY-0-0-11-4242
-A OUTPUT -m comment --comment "peerlimit-jepsen-delay" -j PLDELAY-0-0-11
-A OUTPUT -m comment --comment "peerlimit-jepsen-delay:pid=oops" -j PLDELAY-ODD
-A OUTPUT -j PLDELAY-HAND
-A OUTPUT -m comment --comment "peerlimit-jepsen-delayed but not ours" -j OTHER
-A OUTPUT -s 10.0.0.1/32 -m comment --comment "a b" -j DROP
`
	assert.Equal(t, []delayJump{
		{chain: "PLDELAY-0-0-11-4242", comment: "peerlimit-jepsen-delay:pid=4242:queue=4100", pid: 4242, queue: 4100},
		{chain: "PLDELAY-0-0-11", comment: "peerlimit-jepsen-delay", queue: -1},
		{chain: "PLDELAY-ODD", comment: "peerlimit-jepsen-delay:pid=oops", queue: -1},
	}, parseDelayJumps(rules))
	assert.Equal(t, []string{"-A", "OUTPUT", "--comment", "a b", "-j", "DROP"}, ruleFields(`-A OUTPUT  --comment "a b" -j DROP`))
}

// The bound queues are the first column of the kernel's table.
func TestParseBoundQueues(t *testing.T) {
	text := " 4100  31337     0 2    20     0     0        7  1\n 4163 -41234     3 2    20     0     0      901  1\n"
	assert.Equal(t, map[int]bool{4100: true, 4163: true}, parseBoundQueues(text))
	assert.Empty(t, parseBoundQueues(""))
}

// A jump is a killed run's only when its process is gone and its queue
// is read by nobody; one that names no process is never taken for one.
func TestOrphanJumps(t *testing.T) {
	jumps := []delayJump{
		{chain: "KILLED", pid: 10, queue: 4100},
		{chain: "LIVE", pid: 11, queue: 4101},
		{chain: "OTHER-PID-NAMESPACE", pid: 12, queue: 4102},
		{chain: "LIVE-BETWEEN-SCENARIOS", pid: 11, queue: 4103},
		{chain: "OLDER-HARNESS", queue: -1},
	}
	alive := func(pid int) bool { return pid == 11 }
	bound := map[int]bool{4101: true, 4102: true}
	got := orphanJumps(jumps, bound, alive)
	assert.Equal(t, []delayJump{{chain: "KILLED", pid: 10, queue: 4100}}, got)
	assert.True(t, processAlive(os.Getpid()))
}

// At start a delayer removes what a killed run left, whatever its chain,
// and keeps what a live run reads, whatever its pid says.
func TestDelayerRemovesAKilledRunsChainWhateverItsName(t *testing.T) {
	killedChain, liveChain := testChain("PLDELAY-KILLED"), testChain("PLDELAY-LIVE")
	killed := newTestDelayer(t, killedChain)
	t.Cleanup(func() { _ = killed.remove() }) // should the test fail
	require.NoError(t, killed.Delay([]string{testAddr(66)}, []string{testAddr(67)}, Link{Delay: time.Second}))
	killTestDelayer(t, killed)
	// It was another process's, one that has exited.
	gone := exitedPid(t)
	require.NoError(t, killed.run("-D", "OUTPUT", "-m", "comment", "--comment", jumpComment(os.Getpid(), killed.queue), "-j", killedChain))
	require.NoError(t, killed.run("-I", "OUTPUT", "1", "-m", "comment", "--comment", jumpComment(gone, killed.queue), "-j", killedChain))

	live := newTestDelayer(t, liveChain)
	defer live.Close()
	// A run in another pid namespace: its pid looks gone, its queue is read.
	require.NoError(t, live.run("-I", "OUTPUT", "1", "-m", "comment", "--comment", jumpComment(gone, live.queue), "-j", liveChain))

	next := newTestDelayer(t, testChain("PLDELAY-NEXT"))
	defer next.Close()
	out, err := iptablesList("-S", "OUTPUT")
	require.NoError(t, err)
	assert.NotContains(t, out, killedChain, "the killed run's jump is removed")
	assert.Error(t, exec.Command("iptables", "-n", "-L", killedChain).Run(), "and its chain")
	assert.Equal(t, 2, strings.Count(out, "-j "+liveChain), "the live run's jumps stay: %s", out)

	require.NoError(t, live.Close())
	out, err = iptablesList("-S", "OUTPUT")
	require.NoError(t, err)
	assert.NotContains(t, out, liveChain, "Close removes every jump to its chain")
}

// exitedPid is the pid of a process that has run and been reaped.
func exitedPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}
