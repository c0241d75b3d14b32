package jepsenlite

import (
	"context"
	"errors"
)

// Backend runs the nodes of one scenario and applies faults to them: node
// processes on loopback addresses (Local), or the containers of a compose
// project (Docker). Node ids are the harness's slots, n1, n2, …; each is
// also the node's --id.
type Backend interface {
	// Nodes lists every slot, in order: the scenario's nodes, then its
	// extras (for steps that add nodes).
	Nodes() []string
	// Supports says whether the backend can apply a scenario's faults,
	// with the reason when not.
	Supports(n Need) error
	// Start starts a node, or restarts it with the same id, and waits
	// until it is healthy. Starting a node that runs is a no-op.
	Start(ctx context.Context, id string) error
	Kill(ctx context.Context, id string) error   // SIGKILL: no leave, state lost
	Pause(ctx context.Context, id string) error  // frozen: sockets open, no answers
	Resume(ctx context.Context, id string) error // unfrozen, state intact
	Leave(ctx context.Context, id string) error  // SIGTERM: leave, hand off, exit
	// KillAll kill -9s every node of ids as nearly at once as the
	// backend can: every signal is sent before any exit is awaited.
	KillAll(ctx context.Context, ids []string) error
	// StopAll sends SIGTERM to every node of ids at once, as a whole
	// cluster stopped together (an upgrade, a host shut down), and waits
	// for each to leave, hand off what it can and exit; one still running
	// past its grace period is killed, and the error says so.
	StopAll(ctx context.Context, ids []string) error
	// Partition cuts every link between nodes of different groups.
	Partition(ctx context.Context, groups [][]string) error
	// Cut cuts the link between two nodes only.
	Cut(ctx context.Context, a, b string) error
	// Lose drops each packet between two nodes with probability p.
	Lose(ctx context.Context, a, b string, p float64) error
	// Delay slows every link from a node of from to one of to, one way,
	// as l says (Link: delay, jitter, loss), until Heal.
	Delay(ctx context.Context, from, to []string, l Link) error
	// Heal restores every link, cut or slowed.
	Heal(ctx context.Context) error
	// Answering reports whether the harness can reach the node: it runs,
	// is not paused, and its published API is reachable.
	Answering(id string) bool
	// GRPCAddr is where the harness's clients reach the node.
	GRPCAddr(id string) string
	// Close stops what the backend started for the scenario and undoes
	// every fault, whatever happened.
	Close() error
}

// Need is a kind of fault a scenario cannot do without.
type Need int

const (
	NeedNothing   Need = iota
	NeedPartition      // cut a group of nodes off from the rest
	NeedLinkCut        // cut one link, the others intact
	NeedSlowLink       // delay, jitter and lose the packets of chosen links (Delayer)
)

// BackendFactory makes a scenario's backend; dir is the scenario's output
// directory (logs).
type BackendFactory func(ctx context.Context, sc Scenario, dir string) (Backend, error)

// ErrUnsupported is returned by faults a backend cannot apply.
var ErrUnsupported = errors.New("not supported by this backend")
