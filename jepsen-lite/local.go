package jepsenlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// Local returns the backend of node processes started from bin, node i on
// baseIP + i (127.0.0.11, .12, …), every node given args. Partitions are
// iptables rules between the nodes' addresses (see Firewall); slow links
// are a Delayer's, seeded with seed.
func Local(bin, baseIP string, args []string, seed uint64) BackendFactory {
	return func(ctx context.Context, sc Scenario, dir string) (Backend, error) {
		procs, err := NewProcs(bin, dir, append(slices.Clone(args), sc.Args...))
		if err != nil {
			return nil, err
		}
		procs.nodeArgs = sc.NodeArgs
		b := &localBackend{procs: procs}
		for i := range sc.Nodes + sc.Extra {
			ip, err := offsetIP(baseIP, i)
			if err != nil {
				return nil, err
			}
			id := fmt.Sprintf("n%d", i+1)
			if _, err := procs.Define(id, ip); err != nil {
				return nil, err
			}
			b.ids = append(b.ids, id)
		}
		suffix := strings.ReplaceAll(baseIP, ".", "-")[len("127-"):]
		switch sc.Needs {
		case NeedNothing:
		case NeedSlowLink:
			// The pid: a chain per process, which a later run may flush
			// once this process is gone (removeOrphans).
			chain := fmt.Sprintf("PLDELAY-%s-%d", suffix, os.Getpid())
			if b.delay, err = NewDelayer(DefaultDelayerConfig(chain, seed)); err != nil {
				b.fwErr = err
			}
		default:
			if b.fw, err = NewFirewall("PLJEPSEN-" + suffix); err != nil {
				b.fwErr = err
			}
		}
		return b, nil
	}
}

type localBackend struct {
	procs *Procs
	fw    *Firewall // nil without root or iptables; fwErr says why
	delay *Delayer  // only for slow links; nil without them, or fwErr says why
	fwErr error
	ids   []string
}

func (b *localBackend) Nodes() []string { return b.ids }

func (b *localBackend) Supports(n Need) error {
	switch {
	case n == NeedSlowLink && b.delay == nil, n != NeedNothing && n != NeedSlowLink && b.fw == nil:
		return b.fwErr
	}
	return nil
}

func (b *localBackend) Start(ctx context.Context, id string) error {
	if b.procs.State(id) == Running {
		return nil
	}
	// Every other node is a seed: a dead one is skipped, and the
	// reconnector retries until one answers.
	var seeds []string
	for _, o := range b.ids {
		if o != id {
			seeds = append(seeds, b.procs.Spec(o).GossipAddr())
		}
	}
	return b.procs.Start(ctx, id, seeds)
}

func (b *localBackend) Kill(_ context.Context, id string) error   { return b.procs.Kill(id) }
func (b *localBackend) Pause(_ context.Context, id string) error  { return b.procs.Pause(id) }
func (b *localBackend) Resume(_ context.Context, id string) error { return b.procs.Resume(id) }
func (b *localBackend) Leave(_ context.Context, id string) error {
	return b.procs.Leave(id, 15*time.Second)
}

func (b *localBackend) KillAll(_ context.Context, ids []string) error { return b.procs.KillAll(ids) }

func (b *localBackend) StopAll(_ context.Context, ids []string) error {
	return b.procs.LeaveAll(ids, 15*time.Second)
}

func (b *localBackend) Partition(_ context.Context, groups [][]string) error {
	if b.fw == nil {
		return ErrUnsupported
	}
	ips := make([][]string, len(groups))
	for i, g := range groups {
		for _, id := range g {
			ips[i] = append(ips[i], b.procs.Spec(id).IP)
		}
	}
	return b.fw.Partition(ips)
}

func (b *localBackend) Cut(_ context.Context, x, y string) error {
	if b.fw == nil {
		return ErrUnsupported
	}
	return b.fw.Cut(b.procs.Spec(x).IP, b.procs.Spec(y).IP)
}

func (b *localBackend) Lose(_ context.Context, x, y string, p float64) error {
	if b.fw == nil {
		return ErrUnsupported
	}
	return b.fw.Lose(b.procs.Spec(x).IP, b.procs.Spec(y).IP, p)
}

func (b *localBackend) Delay(_ context.Context, from, to []string, l Link) error {
	if b.delay == nil {
		return ErrUnsupported
	}
	return b.delay.Delay(b.ips(from), b.ips(to), l)
}

func (b *localBackend) ips(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = b.procs.Spec(id).IP
	}
	return out
}

func (b *localBackend) Heal(context.Context) error {
	switch {
	case b.delay != nil:
		return b.delay.Heal()
	case b.fw != nil:
		return b.fw.Heal()
	}
	return ErrUnsupported
}

// DelayerReport is what the delayer counted, for the report; ok false
// when the scenario slowed no link.
func (b *localBackend) DelayerReport() (DelayerReport, bool) {
	if b.delay == nil {
		return DelayerReport{}, false
	}
	r := DelayerReport{DelayStats: b.delay.Stats()}
	var last error
	if r.Errors, last = b.delay.Errors(); last != nil {
		r.LastError = last.Error()
	}
	return r, true
}

func (b *localBackend) Answering(id string) bool  { return b.procs.State(id) == Running }
func (b *localBackend) GRPCAddr(id string) string { return b.procs.Spec(id).GRPCAddr() }

// MetricsURL is where the node's metrics are, for the slow links' report.
func (b *localBackend) MetricsURL(id string) string {
	return "http://" + b.procs.Spec(id).HTTPAddr() + "/metrics"
}

func (b *localBackend) Close() error {
	b.procs.Close()
	var errs []error
	if b.fw != nil {
		errs = append(errs, b.fw.Close())
	}
	if b.delay != nil {
		errs = append(errs, b.delay.Close())
	}
	return errors.Join(errs...)
}

func offsetIP(base string, i int) (string, error) {
	var a, b, c, d int
	if _, err := fmt.Sscanf(base, "%d.%d.%d.%d", &a, &b, &c, &d); err != nil || a != 127 {
		return "", fmt.Errorf("base IP must be a 127.x.y.z loopback address, got %q", base)
	}
	if d+i > 254 {
		return "", errors.New("base IP " + base + " leaves no room for the nodes")
	}
	return fmt.Sprintf("%d.%d.%d.%d", a, b, c, d+i), nil
}
