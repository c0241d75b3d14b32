package grpcapi

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Drain lets a node stop serving without cutting work in hand and without
// waiting for its clients to hang up. grpc's GracefulStop waits for every
// call to end, and a stream (ForwardStream, CheckStream) ends only when
// its client closes it, which a peer or a Go client never does while it
// has traffic: a node would wait for its whole shutdown timeout.
//
// So calls and stream messages count as under way while they are
// served; once Start is called, every stream ends after answering the
// message in hand, and Quiet is closed as soon as nothing is under way.
// The node then cuts what is left: idle streams, with nothing in flight.
// A message or call that arrives after that point is refused, not
// decided, so a sender that falls back for it does not count it twice.
// The zero Drain is not usable; NewDrain makes one. Safe for concurrent
// use.
type Drain struct {
	mu      sync.Mutex
	started bool
	busy    int
	quiet   chan struct{}
	closed  bool // quiet is closed
}

// NewDrain returns a Drain not started.
func NewDrain() *Drain { return &Drain{quiet: make(chan struct{})} }

// ErrDraining refuses what arrives after the node stopped taking work.
var ErrDraining = status.Error(codes.Unavailable, "peerlimit: node shutting down")

// Enter counts a call or message as under way, and reports false once
// the node no longer takes any.
func (d *Drain) Enter() bool {
	if d == nil {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.busy++
	return true
}

// Leave ends what Enter counted.
func (d *Drain) Leave() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.busy--
	d.closeIfQuiet()
}

// closeIfQuiet closes quiet once draining with nothing under way.
// Requires d.mu held.
func (d *Drain) closeIfQuiet() {
	if d.started && d.busy == 0 && !d.closed {
		d.closed = true
		close(d.quiet)
	}
}

// Draining reports whether Start was called: a stream ends after the
// message in hand.
func (d *Drain) Draining() bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.started
}

// Start stops taking new work once what is under way is done, and
// returns a channel closed at that moment.
func (d *Drain) Start() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.started = true
	d.closeIfQuiet()
	return d.quiet
}

// Unary is a unary server interceptor counting calls as under way.
func (d *Drain) Unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !d.Enter() {
		return nil, ErrDraining
	}
	defer d.Leave()
	return h(ctx, req)
}

// EndOfStream is what a stream handler returns when Recv fails: nothing
// when the caller closed its side, else the error.
func EndOfStream(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
