package jepsenlite

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// ErrNoFirewall means partitions cannot be made here: not root, or no
// iptables and no way to install it. Partition scenarios are then skipped,
// and say so.
var ErrNoFirewall = errors.New("partitions need root and iptables")

// Firewall cuts links between node addresses with iptables DROP rules. All
// of its rules live in one chain of its own, jumped to from INPUT (on
// loopback every packet passes INPUT), so that healing is flushing the
// chain and cleaning up is deleting it: nothing else in the host's rules is
// touched. A chain left behind by a crashed run is removed on the next
// start.
type Firewall struct {
	chain string
	mu    sync.Mutex
	cuts  map[[2]string]bool
	run   func(args ...string) error
}

// NewFirewall creates the chain. It installs iptables from Debian's
// packages if missing. Without root it returns ErrNoFirewall.
func NewFirewall(chain string) (*Firewall, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: running as uid %d", ErrNoFirewall, os.Geteuid())
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		if err := installIptables(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoFirewall, err)
		}
	}
	f := &Firewall{chain: chain, cuts: map[[2]string]bool{}, run: iptables}
	f.remove() // a previous run's leftovers
	if err := f.run("-N", chain); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoFirewall, err)
	}
	if err := f.run("-I", "INPUT", "1", "-j", chain); err != nil {
		_ = f.run("-X", chain)
		return nil, fmt.Errorf("%w: %v", ErrNoFirewall, err)
	}
	return f, nil
}

// Cut drops every packet between a and b, both ways.
func (f *Firewall) Cut(a, b string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range [][2]string{{a, b}, {b, a}} {
		if f.cuts[d] {
			continue
		}
		if err := f.run("-A", f.chain, "-s", d[0], "-d", d[1], "-j", "DROP"); err != nil {
			return err
		}
		f.cuts[d] = true
	}
	return nil
}

// Lose drops each packet between a and b, both ways, with probability p:
// a lossy link (iptables' statistic match; the kernel here has no netem).
func (f *Firewall) Lose(a, b string, p float64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	prob := strconv.FormatFloat(p, 'f', -1, 64)
	for _, d := range [][2]string{{a, b}, {b, a}} {
		if err := f.run("-A", f.chain, "-s", d[0], "-d", d[1], "-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// Partition cuts every link between nodes of different groups.
func (f *Firewall) Partition(groups [][]string) error {
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					if err := f.Cut(a, b); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// Heal removes every cut.
func (f *Firewall) Heal() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.run("-F", f.chain); err != nil {
		return err
	}
	clear(f.cuts)
	return nil
}

// Close removes the chain and the jump to it. It is safe to call more
// than once.
func (f *Firewall) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.remove()
}

// remove deletes every jump to the chain, then the chain. Errors from
// rules that are not there are expected and ignored; what is left is
// checked at the end.
func (f *Firewall) remove() error {
	for f.run("-D", "INPUT", "-j", f.chain) == nil {
	}
	_ = f.run("-F", f.chain)
	_ = f.run("-X", f.chain)
	if f.run("-n", "-L", f.chain) == nil {
		return fmt.Errorf("iptables chain %s is still there; remove it by hand: iptables -D INPUT -j %[1]s; iptables -F %[1]s; iptables -X %[1]s", f.chain)
	}
	return nil
}

// Rules lists the chain's rules, for tests and reports.
func (f *Firewall) Rules() (string, error) {
	out, err := exec.Command("iptables", "-S", f.chain).CombinedOutput()
	return string(out), err
}

func iptables(args ...string) error {
	// -w: wait for the xtables lock instead of failing when another
	// iptables (docker, a parallel test) holds it.
	out, err := exec.Command("iptables", append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func installIptables() error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return errors.New("iptables is missing and apt-get is not available to install it")
	}
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "iptables"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_, err := exec.LookPath("iptables")
	return err
}
