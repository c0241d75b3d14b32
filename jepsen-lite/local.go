package jepsenlite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Local returns the backend of node processes started from bin, node i on
// baseIP + i (127.0.0.11, .12, …), every node given args. Partitions are
// iptables rules between the nodes' addresses (see Firewall).
func Local(bin, baseIP string, args []string) BackendFactory {
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
		if sc.Needs != NeedNothing {
			chain := "PLJEPSEN-" + strings.ReplaceAll(baseIP, ".", "-")[len("127-"):]
			if b.fw, err = NewFirewall(chain); err != nil {
				b.fwErr = err
			}
		}
		return b, nil
	}
}

type localBackend struct {
	procs *Procs
	fw    *Firewall // nil without root or iptables; fwErr says why
	fwErr error
	ids   []string
}

func (b *localBackend) Nodes() []string { return b.ids }

func (b *localBackend) Supports(n Need) error {
	if n != NeedNothing && b.fw == nil {
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

func (b *localBackend) Heal(context.Context) error {
	if b.fw == nil {
		return ErrUnsupported
	}
	return b.fw.Heal()
}

func (b *localBackend) Answering(id string) bool  { return b.procs.State(id) == Running }
func (b *localBackend) GRPCAddr(id string) string { return b.procs.Spec(id).GRPCAddr() }

func (b *localBackend) Close() error {
	b.procs.Close()
	if b.fw != nil {
		return b.fw.Close()
	}
	return nil
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
