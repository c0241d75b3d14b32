package jepsenlite

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// boundQueuesFile lists the netfilter queues some process has bound, one
// a line, the queue number first (net/netfilter/nfnetlink_queue.c).
const boundQueuesFile = "/proc/net/netfilter/nfnetlink_queue"

// jumpComment tags a delayer's jump from OUTPUT with who made it: the
// process and the queue its rules hand packets to. A later run (any
// chain name) can then tell a killed run's jump, whose process is gone
// and whose queue nobody reads, from a live one's.
func jumpComment(pid int, queue uint16) string {
	return fmt.Sprintf("%s:pid=%d:queue=%d", DelayComment, pid, queue)
}

// delayJump is a rule in OUTPUT tagged DelayComment that jumps to a
// delayer's chain.
type delayJump struct {
	chain, comment string
	// pid and queue are those of the run that added it; 0 and -1 when
	// the comment does not say (an older harness's jump, or one added by
	// hand).
	pid, queue int
}

// parseDelayJumps reads the output of iptables -S OUTPUT: the jumps a
// delayer tagged.
func parseDelayJumps(rules string) []delayJump {
	var out []delayJump
	for line := range strings.Lines(rules) {
		f := ruleFields(strings.TrimSpace(line))
		var j delayJump
		for i := 0; i+1 < len(f); i++ {
			switch f[i] {
			case "--comment":
				j.comment = f[i+1]
			case "-j":
				j.chain = f[i+1]
			}
		}
		if j.chain == "" || (j.comment != DelayComment && !strings.HasPrefix(j.comment, DelayComment+":")) {
			continue
		}
		j.queue = -1
		var q uint16
		if _, err := fmt.Sscanf(j.comment, DelayComment+":pid=%d:queue=%d", &j.pid, &q); err == nil && j.pid > 0 {
			j.queue = int(q)
		} else {
			j.pid = 0
		}
		out = append(out, j)
	}
	return out
}

// ruleFields splits a rule as iptables -S prints it: by spaces, but a
// "quoted" value (a comment) is one field, without its quotes.
func ruleFields(line string) []string {
	var out []string
	for line != "" {
		line = strings.TrimLeft(line, " ")
		if rest, ok := strings.CutPrefix(line, `"`); ok {
			v, after, _ := strings.Cut(rest, `"`)
			out, line = append(out, v), after
			continue
		}
		v, after, _ := strings.Cut(line, " ")
		if v != "" {
			out = append(out, v)
		}
		line = after
	}
	return out
}

// parseBoundQueues reads boundQueuesFile: the queue numbers bound.
func parseBoundQueues(text string) map[int]bool {
	bound := map[int]bool{}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if n, err := strconv.Atoi(f[0]); err == nil {
			bound[n] = true
		}
	}
	return bound
}

// orphanJumps are the jumps of killed runs: their process is gone and
// their queue is bound by nobody. Both must hold: a process in another
// pid namespace looks gone but still reads its queue, and a live
// process's queue is unbound between two of its scenarios. A jump that
// names no process is left alone: its chain may be a live run's (an
// older harness), and only its own chain name finds it (Delayer.remove).
func orphanJumps(jumps []delayJump, bound map[int]bool, alive func(pid int) bool) []delayJump {
	var out []delayJump
	for _, j := range jumps {
		if j.pid > 0 && !bound[j.queue] && !alive(j.pid) {
			out = append(out, j)
		}
	}
	return out
}

// processAlive reports whether pid runs (a zombie counts: it is not
// reaped yet, and its jump is removed next time).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// removeOrphans deletes the jumps and chains of killed runs, whatever
// their chain names (a killed go test's chain carries its pid). The rules
// are listed before the bound queues are read: a chain made after the
// listing is not seen, and one listed whose run then ends is gone already.
// Each run's chain has a name of its own, so flushing an orphan's chain
// touches no live run's rules.
func (d *Delayer) removeOrphans() error {
	rules, err := d.list("-S", "OUTPUT")
	if err != nil {
		return err
	}
	jumps := parseDelayJumps(rules)
	if len(jumps) == 0 {
		return nil
	}
	queues, err := os.ReadFile(boundQueuesFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) { // not there: no queue is bound
		return fmt.Errorf("bound netfilter queues: %w", err)
	}
	var errs []error
	for _, j := range orphanJumps(jumps, parseBoundQueues(string(queues)), processAlive) {
		if err := d.run("-D", "OUTPUT", "-m", "comment", "--comment", j.comment, "-j", j.chain); err != nil {
			errs = append(errs, err)
			continue
		}
		_ = d.run("-F", j.chain)
		_ = d.run("-X", j.chain) // fails, and keeps it, while another jump still leads to it
	}
	return errors.Join(errs...)
}

// iptablesList runs iptables for a listing and returns what it printed
// on stdout (this iptables warns on stderr about legacy tables).
func iptablesList(args ...string) (string, error) {
	var stderr strings.Builder
	cmd := exec.Command("iptables", append([]string{"-w", "5"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
