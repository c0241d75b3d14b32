package jepsenlite

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrNoDelayer means slow links cannot be made here: not root, no
// iptables, or no netfilter queue in the kernel. Slow-link scenarios are
// then skipped, and say so.
var ErrNoDelayer = errors.New("slow links need root, iptables and the kernel's netfilter queue")

// DelayComment tags every iptables rule a Delayer adds. Its jump from
// OUTPUT adds the run's pid and queue (jumpComment), so that a later run
// finds what a killed one left, whatever its chain (removeOrphans).
const DelayComment = "peerlimit-jepsen-delay"

// DelayerConfig sizes a Delayer.
type DelayerConfig struct {
	// Chain is the iptables chain of its rules, jumped to from OUTPUT;
	// one per process (Local adds the pid): a later run flushes a killed
	// run's chain by its name (removeOrphans), which must be no live
	// run's.
	Chain string
	// Capacity is the most packets held at once; one more is dropped and
	// counted (DelayStats.Full). At 20 ms, 4096 packets are 200,000
	// packets a second, far above a jepsen-lite cluster's.
	Capacity int
	// Seed makes the jitter and the losses reproducible.
	Seed uint64
}

// DefaultDelayerConfig is the config of the local backend's delayer.
func DefaultDelayerConfig(chain string, seed uint64) DelayerConfig {
	return DelayerConfig{Chain: chain, Capacity: 4096, Seed: seed}
}

// Validate checks the config.
func (c DelayerConfig) Validate() error {
	switch {
	case c.Chain == "" || len(c.Chain) > 28:
		return fmt.Errorf("delayer: chain %q must have 1 to 28 characters", c.Chain)
	case c.Capacity < 1 || c.Capacity > 1<<16:
		return fmt.Errorf("delayer: capacity %d must be in [1, 65536]", c.Capacity)
	}
	return nil
}

// Delayer makes slow links on loopback without netem (this kernel has no
// sch_netem): iptables NFQUEUE rules in its own chain, jumped to from
// OUTPUT, hand it the packets between chosen addresses, UDP gossip and TCP
// peer traffic alike; it holds each for its link's delay (holdQueue) and
// gives it back to the kernel (NF_ACCEPT) when due, or drops it (NF_DROP)
// for the link's loss or when full. It hooks OUTPUT, before the
// Firewall's INPUT chain, so a delayed packet still meets the cuts.
//
// The rules say --queue-bypass: if the delayer dies, packets pass
// undelayed rather than being dropped. Two goroutines (reading, releasing)
// run until Close.
type Delayer struct {
	cfg   DelayerConfig
	q     *nfqueue
	queue uint16
	run   func(args ...string) error
	list  func(args ...string) (string, error) // what iptables prints

	mu      sync.Mutex
	hq      *holdQueue
	links   map[[2][4]byte]Link
	errs    int64 // verdicts the kernel refused, buffers overrun
	lastErr error
	closed  bool

	wake chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
}

// NewDelayer removes what killed runs left behind (the jumps of any
// chain whose run is gone and whose queue nobody reads, and the chain
// cfg.Chain), binds a free netfilter queue and creates the chain. Without
// root, iptables or the queue it returns an error wrapping ErrNoDelayer.
func NewDelayer(cfg DelayerConfig) (*Delayer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: running as uid %d", ErrNoDelayer, os.Geteuid())
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDelayer, err)
	}
	d := &Delayer{cfg: cfg, run: iptables, list: iptablesList, hq: newHoldQueue(cfg.Capacity, cfg.Seed),
		links: map[[2][4]byte]Link{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	// Killed runs' leftovers, best effort: their rules are bypassed
	// (no reader), they only slow OUTPUT down. Ours is checked below.
	_ = d.removeOrphans()
	_ = d.remove()
	q, num, err := bindFreeQueue(cfg.Chain, uint32(2*cfg.Capacity))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDelayer, err)
	}
	d.q, d.queue = q, num
	if err := d.run("-N", cfg.Chain); err != nil {
		q.Close()
		return nil, fmt.Errorf("%w: %v", ErrNoDelayer, err)
	}
	// A rule no packet matches: iptables without the NFQUEUE target (or
	// the comment match) fails here, and the scenario is skipped, rather
	// than at its first step.
	probe := []string{d.cfg.Chain, "-s", "127.255.255.254", "-d", "127.255.255.254", "-m", "comment", "--comment", DelayComment,
		"-j", "NFQUEUE", "--queue-num", strconv.Itoa(int(num)), "--queue-bypass"}
	if err := d.run(append([]string{"-A"}, probe...)...); err != nil {
		_ = d.run("-X", cfg.Chain)
		q.Close()
		return nil, fmt.Errorf("%w: %v", ErrNoDelayer, err)
	}
	_ = d.run(append([]string{"-D"}, probe...)...)
	if err := d.run("-I", "OUTPUT", "1", "-m", "comment", "--comment", jumpComment(os.Getpid(), num), "-j", cfg.Chain); err != nil {
		_ = d.run("-X", cfg.Chain)
		q.Close()
		return nil, fmt.Errorf("%w: %v", ErrNoDelayer, err)
	}
	d.wg.Add(2)
	go d.read()
	go d.release()
	return d, nil
}

// bindFreeQueue binds the first free queue number of 64 derived from
// chain: concurrent runs (make chaos beside the test command) each get
// their own.
func bindFreeQueue(chain string, maxLen uint32) (*nfqueue, uint16, error) {
	h := fnv.New32a()
	h.Write([]byte(chain))
	base := 4096 + uint16(h.Sum32()%1024)*64
	var last error
	for i := range uint16(64) {
		q, err := openNFQueue(base+i, maxLen)
		if err == nil {
			return q, base + i, nil
		}
		if !errors.Is(err, errQueueBusy) {
			return nil, 0, err
		}
		last = err
	}
	return nil, 0, last
}

// Delay slows every link from an address of from to one of to (one way:
// call it again the other way for both) as l says, replacing what was set
// for those links.
func (d *Delayer) Delay(from, to []string, l Link) error {
	if err := l.Validate(); err != nil {
		return err
	}
	type pair struct {
		k    [2][4]byte
		s, t string
	}
	var pairs []pair
	for _, a := range from {
		for _, b := range to {
			x, err := netip.ParseAddr(a)
			y, err2 := netip.ParseAddr(b)
			if err != nil || err2 != nil || !x.Is4() || !y.Is4() || !x.IsLoopback() || !y.IsLoopback() {
				return fmt.Errorf("delay %s → %s: loopback IPv4 addresses only", a, b)
			}
			pairs = append(pairs, pair{[2][4]byte{x.As4(), y.As4()}, a, b})
		}
	}
	// The links are set before their rules exist, and the rules are
	// added without the lock: iptables takes milliseconds, and the
	// reader must not wait for it.
	d.mu.Lock()
	var add []pair
	for _, p := range pairs {
		if _, ok := d.links[p.k]; !ok {
			add = append(add, p)
		}
		d.links[p.k] = l
	}
	d.mu.Unlock()
	for _, p := range add {
		if err := d.run("-A", d.cfg.Chain, "-s", p.s, "-d", p.t, "-m", "comment", "--comment", DelayComment,
			"-j", "NFQUEUE", "--queue-num", strconv.Itoa(int(d.queue)), "--queue-bypass"); err != nil {
			return err
		}
	}
	return nil
}

// Heal makes every link fast again. Packets held already are released
// when due.
func (d *Delayer) Heal() error {
	if err := d.run("-F", d.cfg.Chain); err != nil {
		return err
	}
	d.mu.Lock()
	clear(d.links)
	d.mu.Unlock()
	return nil
}

// Stats are the delayer's counters so far.
func (d *Delayer) Stats() DelayStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hq.Stats()
}

// Errors counts what went wrong with the queue (verdicts refused, the
// socket's buffer overrun), with the last error.
func (d *Delayer) Errors() (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.errs, d.lastErr
}

// Close removes the rules, releases every held packet at once and
// unbinds the queue. It is safe to call more than once.
func (d *Delayer) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	err := d.remove()
	d.mu.Unlock()
	close(d.stop)
	d.wg.Wait()
	d.mu.Lock()
	ids := d.hq.Drain(nil)
	d.mu.Unlock()
	for _, id := range ids {
		_ = d.q.Verdict(id, true)
	}
	return errors.Join(err, d.q.Close())
}

// remove deletes every jump to the chain, then the chain. Rules that are
// not there fail and are ignored; what is left is checked at the end.
func (d *Delayer) remove() error {
	if rules, err := d.list("-S", "OUTPUT"); err == nil {
		for _, j := range parseDelayJumps(rules) {
			if j.chain == d.cfg.Chain {
				_ = d.run("-D", "OUTPUT", "-m", "comment", "--comment", j.comment, "-j", j.chain)
			}
		}
	}
	for range 100 { // should the listing have failed: an older harness's jump
		if d.run("-D", "OUTPUT", "-m", "comment", "--comment", DelayComment, "-j", d.cfg.Chain) != nil {
			break
		}
	}
	for range 100 { // a jump added without the comment, by hand
		if d.run("-D", "OUTPUT", "-j", d.cfg.Chain) != nil {
			break
		}
	}
	_ = d.run("-F", d.cfg.Chain)
	_ = d.run("-X", d.cfg.Chain)
	if d.run("-n", "-L", d.cfg.Chain) == nil {
		return fmt.Errorf("iptables chain %s is still there; remove it by hand: iptables -D OUTPUT each rule that iptables -S OUTPUT | grep -- '-j %[1]s$' lists, then iptables -F %[1]s; iptables -X %[1]s", d.cfg.Chain)
	}
	return nil
}

// read hands each queued packet to the hold queue, or back to the kernel
// at once when no link holds it (a rule removed by Heal while its packet
// was queued) or it is dropped.
func (d *Delayer) read() {
	defer d.wg.Done()
	var pkts []nfPacket
	var verdicts []pktVerdict
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		// The deadline bounds how long Close waits for this goroutine.
		var err error
		pkts, err = d.q.Read(pkts[:0], time.Now().Add(100*time.Millisecond))
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			d.count(err)
			if !errors.Is(err, syscall.ENOBUFS) && len(pkts) == 0 && !isKernelErr(err) {
				// A broken socket: wait a little rather than spin.
				select {
				case <-d.stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		if len(pkts) == 0 {
			continue
		}
		now := time.Now()
		verdicts = verdicts[:0]
		wake := false
		d.mu.Lock()
		for _, p := range pkts {
			l, ok := d.links[[2][4]byte{p.src, p.dst}]
			if !ok {
				verdicts = append(verdicts, pktVerdict{p.id, true})
				continue
			}
			before, had := d.hq.Next()
			if !d.hq.Offer(p.id, l, now) {
				verdicts = append(verdicts, pktVerdict{p.id, false})
				continue
			}
			if at, _ := d.hq.Next(); !had || at.Before(before) {
				wake = true
			}
		}
		d.mu.Unlock()
		d.send(verdicts)
		if wake {
			select {
			case d.wake <- struct{}{}:
			default:
			}
		}
	}
}

// release gives back each held packet when it is due.
func (d *Delayer) release() {
	defer d.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var ids []uint32
	var verdicts []pktVerdict
	for {
		d.mu.Lock()
		ids = d.hq.Due(time.Now(), ids[:0])
		next, ok := d.hq.Next()
		d.mu.Unlock()
		verdicts = verdicts[:0]
		for _, id := range ids {
			verdicts = append(verdicts, pktVerdict{id, true})
		}
		d.send(verdicts)
		wait := time.Hour
		if ok {
			wait = time.Until(next)
		}
		timer.Reset(wait)
		select {
		case <-d.stop:
			return
		case <-d.wake:
		case <-timer.C:
		}
	}
}

type pktVerdict struct {
	id     uint32
	accept bool
}

func (d *Delayer) send(vs []pktVerdict) {
	for _, v := range vs {
		if err := d.q.Verdict(v.id, v.accept); err != nil {
			d.count(err)
		}
	}
}

func (d *Delayer) count(err error) {
	d.mu.Lock()
	d.errs++
	d.lastErr = err
	d.mu.Unlock()
}

// isKernelErr reports whether err is the kernel's answer to a request (a
// verdict for a packet it no longer holds), not a broken socket.
func isKernelErr(err error) bool {
	var e syscall.Errno
	return errors.As(err, &e) && e != syscall.EBADF
}
