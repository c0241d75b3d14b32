// Package testcluster starts real peerlimit nodes in-process on loopback
// free ports (real memberlist gossip, real gRPC) for tests. A Cluster is a
// value: nothing global, every node stopped through t.Cleanup, logs through
// t.Log, and convergence awaited by polling a condition with a deadline.
package testcluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/internal/testkit/testlog"
	"github.com/peerlimit/peerlimit/node"

	"github.com/peerlimit/peerlimit/internal/testkit/wait"
)

// Cluster is a set of in-process nodes.
type Cluster struct {
	t     testing.TB
	edit  func(*node.Config)
	logs  *testlog.Writer
	mu    sync.Mutex
	nodes []*node.Node // index = node number; stopped ones stay, see live
	live  []bool
}

// New starts n nodes that join through the first and waits until they
// agree on membership and ring. edit, if not nil, adjusts every node's
// config (after the harness's own settings).
func New(t testing.TB, n int, edit func(*node.Config)) *Cluster {
	t.Helper()
	c := &Cluster{t: t, edit: edit, logs: testlog.New(t)}
	t.Cleanup(c.stopAll) // runs before the log writer's cleanup: LIFO
	for range n {
		c.Add()
	}
	c.WaitConverged()
	return c
}

// Add starts one more node, joined through a live one, without waiting
// for convergence.
func (c *Cluster) Add() *node.Node {
	c.t.Helper()
	c.mu.Lock()
	i := len(c.nodes)
	c.mu.Unlock()
	n := c.start(fmt.Sprintf("node-%d", i))
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.live = append(c.live, true)
	c.mu.Unlock()
	return n
}

// Restart starts a new process of stopped node i: same id, new ports,
// joined through a live node, as a restarted container would be.
func (c *Cluster) Restart(i int) *node.Node {
	c.t.Helper()
	c.mu.Lock()
	if c.live[i] {
		c.mu.Unlock()
		c.t.Fatalf("testcluster: node %d is running", i)
	}
	id := c.nodes[i].ID()
	c.mu.Unlock()
	n := c.start(id)
	c.mu.Lock()
	c.nodes[i], c.live[i] = n, true
	c.mu.Unlock()
	return n
}

// RestartAll starts a new process of every stopped node, the first
// alone and the others joined through it, as a whole cluster starts
// again after it was stopped or killed at once; it waits for
// convergence.
func (c *Cluster) RestartAll() {
	c.t.Helper()
	c.mu.Lock()
	var stopped []int
	for i, live := range c.live {
		if !live {
			stopped = append(stopped, i)
		}
	}
	c.mu.Unlock()
	for _, i := range stopped {
		c.Restart(i)
	}
	c.WaitConverged()
}

func (c *Cluster) start(id string) *node.Node {
	c.t.Helper()
	c.mu.Lock()
	var seeds []string
	for j, n := range c.nodes {
		if c.live[j] {
			seeds = append(seeds, n.GossipAddr())
			break
		}
	}
	c.mu.Unlock()

	cfg := node.DefaultLocalConfig(id)
	cfg.Join = seeds
	// Under the race detector on a loaded 2-core machine a forward can
	// take longer than the default 500ms, and the fallback would then
	// decide a check away from its owner: exactness tests would fail for
	// load, not for a bug. Fault tests do not need short deadlines: a
	// stopped node refuses connections at once.
	cfg.Peers.Timeout = 5 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", cfg.ID)
	if c.edit != nil {
		c.edit(&cfg)
	}
	n, err := node.Start(cfg)
	if err != nil {
		c.t.Fatalf("testcluster: start %s: %v", cfg.ID, err)
	}
	return n
}

// Node returns node i, live or not.
func (c *Cluster) Node(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Live returns the nodes that have not been stopped.
func (c *Cluster) Live() []*node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*node.Node
	for i, n := range c.nodes {
		if c.live[i] {
			out = append(out, n)
		}
	}
	return out
}

// Leave stops node i gracefully: it leaves and hands its keys off.
func (c *Cluster) Leave(i int) {
	c.t.Helper()
	n := c.markStopped(i)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		c.t.Errorf("testcluster: graceful leave of %s: %v", n.ID(), err)
	}
}

// StopAll stops every live node gracefully and at once, as SIGTERM to
// all of them would (a node-pool upgrade, docker compose down), and
// returns their errors: each leaves while the others do, so that a leave
// that finds nobody left to tell is to be expected.
func (c *Cluster) StopAll() []error {
	c.mu.Lock()
	var live []int
	for i, l := range c.live {
		if l {
			live = append(live, i)
		}
	}
	c.mu.Unlock()
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for j, i := range live {
		wg.Go(func() {
			n := c.markStopped(i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs[j] = n.Shutdown(ctx)
		})
	}
	wg.Wait()
	return errs
}

// Kill stops node i at once, as a crash would.
func (c *Cluster) Kill(i int) { c.markStopped(i).Kill() }

func (c *Cluster) markStopped(i int) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live[i] = false
	return c.nodes[i]
}

// WaitConverged waits until every live node sees exactly the live nodes
// as members, all hold the same ring over them, none waits for a handoff,
// and none marks every answer degraded.
func (c *Cluster) WaitConverged() {
	c.t.Helper()
	c.Eventually(15*time.Second, func() (bool, string) {
		live := c.Live()
		want := make([]string, len(live))
		for i, n := range live {
			want[i] = n.ID()
		}
		slices.Sort(want)
		for _, n := range live {
			var got []string
			for _, m := range n.Members() {
				got = append(got, m.ID)
			}
			if !slices.Equal(got, want) {
				return false, fmt.Sprintf("%s sees members %v, want %v", n.ID(), got, want)
			}
			var ringIDs []string
			for _, m := range n.Ring().Members() {
				ringIDs = append(ringIDs, m.ID)
			}
			if !slices.Equal(ringIDs, want) {
				return false, fmt.Sprintf("%s's ring has %v, want %v", n.ID(), ringIDs, want)
			}
			if !n.Ring().Equal(live[0].Ring()) {
				return false, fmt.Sprintf("%s and %s disagree on owners", n.ID(), live[0].ID())
			}
			if w := n.HandoffsWaiting(); w > 0 {
				return false, fmt.Sprintf("%s waits for the handoff of %d partitions", n.ID(), w)
			}
			// A node whose probes failed under load (memberlist's timeouts on
			// a busy machine) marks every answer degraded until they succeed
			// again: the same members, but not converged yet.
			if n.AnswersDegraded() {
				return false, fmt.Sprintf("%s marks every answer degraded (a member out of its ring on its evidence alone, alone, or cut off)", n.ID())
			}
		}
		return true, ""
	})
}

// Eventually polls cond until it holds, failing the test with cond's last
// explanation after within.
func (c *Cluster) Eventually(within time.Duration, cond func() (bool, string)) {
	c.t.Helper()
	wait.For(c.t, within, cond)
}

func (c *Cluster) stopAll() {
	for i, n := range c.nodes {
		if c.live[i] {
			c.live[i] = false
			n.Kill() // fast: graceful leave is what Leave tests
		}
	}
}
