package jepsenlite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NodeSpec is where one node process listens. Every node has its own
// loopback address, so that a firewall rule can single it out.
type NodeSpec struct {
	ID         string
	IP         string
	GRPCPort   int
	HTTPPort   int
	GossipPort int
}

func (s NodeSpec) GRPCAddr() string   { return net.JoinHostPort(s.IP, strconv.Itoa(s.GRPCPort)) }
func (s NodeSpec) HTTPAddr() string   { return net.JoinHostPort(s.IP, strconv.Itoa(s.HTTPPort)) }
func (s NodeSpec) GossipAddr() string { return net.JoinHostPort(s.IP, strconv.Itoa(s.GossipPort)) }

// ProcState is what the harness last did to a node process.
type ProcState int

const (
	Stopped ProcState = iota // never started, exited, killed or left
	Running
	Paused
)

// Procs runs peerlimit node processes from one binary. Every process it
// starts, it stops: Close kills whatever is still running, and each child
// also dies with the harness (Pdeathsig) if the harness is killed first.
//
// Each node keeps its counts in a data directory of its own (--data-dir),
// dir/data/ID, kept across its restarts and made empty by NewProcs: a
// node restarted by a scenario restores what it wrote, a new scenario's
// cluster starts from nothing.
type Procs struct {
	bin  string
	dir  string   // one log file per node, appended across restarts
	data string   // the nodes' data directories, one each
	args []string // extra node flags, the same for every node
	// nodeArgs are flags one node gets after args, by id.
	nodeArgs map[string][]string
	timeout  time.Duration

	mu    sync.Mutex
	specs map[string]NodeSpec
	procs map[string]*proc
}

type proc struct {
	id    string
	cmd   *exec.Cmd
	state ProcState
	done  chan struct{} // closed when the process has exited and been reaped
	log   *os.File
}

// NewProcs prepares to run bin; logs go to dir. args are added to every
// node's command line (timings, fallback policy).
func NewProcs(bin, dir string, args []string) (*Procs, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("node binary: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	// An earlier run's, in the same output directory: its counts are not
	// this cluster's.
	data := filepath.Join(dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	return &Procs{bin: bin, dir: dir, data: data, args: args, timeout: 15 * time.Second,
		specs: map[string]NodeSpec{}, procs: map[string]*proc{}}, nil
}

// Define registers a node's addresses (ports chosen free on its IP) so that
// other nodes can be given it as a seed before it starts.
func (p *Procs) Define(id, ip string) (NodeSpec, error) {
	s := NodeSpec{ID: id, IP: ip}
	var err error
	if s.GRPCPort, err = freePort(ip, false); err != nil {
		return s, err
	}
	if s.HTTPPort, err = freePort(ip, false); err != nil {
		return s, err
	}
	if s.GossipPort, err = freePort(ip, true); err != nil {
		return s, err
	}
	p.mu.Lock()
	p.specs[id] = s
	p.mu.Unlock()
	return s, nil
}

// Spec returns a defined node's addresses.
func (p *Procs) Spec(id string) NodeSpec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.specs[id]
}

// State reports what the harness last did to the node.
func (p *Procs) State(id string) ProcState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.procs[id]; pr != nil {
		return pr.state
	}
	return Stopped
}

// Start starts the node, joining through seeds (gossip addresses), and
// waits until its HTTP API reports healthy. A port picked free but taken
// since (by another test's process) gets the node new ports and another
// try; the node advertises its addresses itself.
func (p *Procs) Start(ctx context.Context, id string, seeds []string) error {
	var err error
	for range 3 {
		if err = p.start(ctx, id, seeds); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		if _, derr := p.Define(id, p.Spec(id).IP); derr != nil {
			return errors.Join(err, derr)
		}
	}
	return err
}

func (p *Procs) start(ctx context.Context, id string, seeds []string) error {
	p.mu.Lock()
	s, ok := p.specs[id]
	if !ok {
		p.mu.Unlock()
		return fmt.Errorf("node %s is not defined", id)
	}
	if pr := p.procs[id]; pr != nil && pr.state != Stopped {
		p.mu.Unlock()
		return fmt.Errorf("node %s is already running", id)
	}
	p.mu.Unlock()

	dataDir := filepath.Join(p.data, id)
	if err := os.MkdirAll(dataDir, 0o700); err != nil { // the node wants it to exist
		return fmt.Errorf("data dir of %s: %w", id, err)
	}
	logf, err := os.OpenFile(filepath.Join(p.dir, id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	args := append([]string{
		"--id", id,
		"--grpc-addr", s.GRPCAddr(),
		"--http-addr", s.HTTPAddr(),
		"--gossip-addr", s.GossipAddr(),
		"--log-format", "json",
		"--data-dir", dataDir,
		"--cluster-name", "jepsen",
	}, p.args...)
	args = append(args, p.nodeArgs[id]...)
	if len(seeds) > 0 {
		args = append(args, "--join", strings.Join(seeds, ","))
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a terminal's Ctrl-C reaches the
	// harness, which then stops the nodes in order; and death with the
	// harness, so that a killed harness leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", id, err)
	}
	pr := &proc{id: id, cmd: cmd, state: Running, done: make(chan struct{}), log: logf}
	go func() { // owned by the process: ends when it exits
		_ = cmd.Wait()
		logf.Close()
		p.mu.Lock()
		pr.state = Stopped
		p.mu.Unlock()
		close(pr.done)
	}()
	p.mu.Lock()
	p.procs[id] = pr
	p.mu.Unlock()

	if err := waitHealthy(ctx, "http://"+s.HTTPAddr()+"/healthz", pr.done, p.timeout); err != nil {
		_ = p.signal(id, syscall.SIGKILL)
		<-pr.done
		return fmt.Errorf("node %s did not become healthy: %w; the end of %s:\n%s", id, err, logf.Name(), tail(logf.Name(), 5))
	}
	return nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Procs) Kill(id string) error { return p.stopWith([]string{id}, syscall.SIGKILL, p.timeout) }

// KillAll sends SIGKILL to every node of ids, then waits until they are
// all gone: the kills are microseconds apart.
func (p *Procs) KillAll(ids []string) error { return p.stopWith(ids, syscall.SIGKILL, p.timeout) }

// Leave sends SIGTERM (graceful leave with handoff) and waits for the
// process to exit; past timeout it is killed.
func (p *Procs) Leave(id string, timeout time.Duration) error {
	return p.LeaveAll([]string{id}, timeout)
}

// LeaveAll sends SIGTERM to every node of ids, then waits for them all
// to exit; past timeout, those still running are killed.
func (p *Procs) LeaveAll(ids []string, timeout time.Duration) error {
	err := p.stopWith(ids, syscall.SIGTERM, timeout)
	if err != nil {
		_ = p.KillAll(ids)
	}
	return err
}

// Pause stops the process (SIGSTOP): it keeps its sockets and state but
// answers nothing, like a long GC pause or a frozen VM.
func (p *Procs) Pause(id string) error {
	if err := p.signal(id, syscall.SIGSTOP); err != nil {
		return err
	}
	p.setState(id, Paused)
	return nil
}

// Resume continues a paused process (SIGCONT).
func (p *Procs) Resume(id string) error {
	if err := p.signal(id, syscall.SIGCONT); err != nil {
		return err
	}
	p.setState(id, Running)
	return nil
}

// Close kills every process still running and waits for them.
func (p *Procs) Close() {
	p.mu.Lock()
	ids := make([]string, 0, len(p.procs))
	for id := range p.procs {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		_ = p.Kill(id)
	}
}

// stopWith sends sig to every running node of ids, then waits until
// each has exited, all within one timeout.
func (p *Procs) stopWith(ids []string, sig syscall.Signal, timeout time.Duration) error {
	var errs []error
	var waiting []*proc
	p.mu.Lock()
	for _, id := range ids {
		pr := p.procs[id]
		if pr == nil {
			continue
		}
		select {
		case <-pr.done:
			continue
		default:
		}
		if err := pr.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("signal %s to %s: %w", sig, id, err))
			continue
		}
		if sig != syscall.SIGKILL && sig != syscall.SIGCONT {
			_ = pr.cmd.Process.Signal(syscall.SIGCONT) // a paused process cannot act on SIGTERM
		}
		waiting = append(waiting, pr)
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, pr := range waiting {
		select {
		case <-pr.done:
		case <-ctx.Done():
			select {
			case <-pr.done: // both ready: it did exit
			default:
				errs = append(errs, fmt.Errorf("%s did not exit within %s of %s", pr.id, timeout, sig))
			}
		}
	}
	return errors.Join(errs...)
}

func (p *Procs) signal(id string, sig syscall.Signal) error {
	p.mu.Lock()
	pr := p.procs[id]
	p.mu.Unlock()
	if pr == nil {
		return fmt.Errorf("node %s was never started", id)
	}
	if err := pr.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, id, err)
	}
	return nil
}

func (p *Procs) setState(id string, st ProcState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr := p.procs[id]; pr != nil && pr.state != Stopped {
		pr.state = st
	}
}

func waitHealthy(ctx context.Context, url string, exited <-chan struct{}, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	c := &http.Client{Timeout: 500 * time.Millisecond}
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// freePort finds a port free on ip for TCP (and UDP too when both is set:
// gossip uses the same port for both). Another process may take it before
// the node binds it; on loopback addresses of its own, the harness is the
// only likely taker.
func freePort(ip string, both bool) (int, error) {
	for range 20 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, fmt.Errorf("free port on %s: %w", ip, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if !both {
			ln.Close()
			return port, nil
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		ln.Close()
		if err == nil {
			pc.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free for both TCP and UDP on %s", ip)
}
