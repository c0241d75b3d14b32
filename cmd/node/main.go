// Command peerlimit-node runs one peerlimit node. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/peerlimit/peerlimit/internal/faultclock"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/wallclock"
	"github.com/peerlimit/peerlimit/node"
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run serves a node until SIGTERM or SIGINT; SIGHUP reloads.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	opts, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "peerlimit-node:", err)
		return 2
	}
	hopts := &slog.HandlerOptions{Level: opts.logLevel}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if opts.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	opts.node.Logger = slog.New(h)
	for _, why := range opts.deprecated {
		opts.node.Logger.Warn("deprecated flag", "why", why)
	}
	if fc := opts.faultClock; fc.Enabled() {
		opts.node.Now = wallclock.Steady(faultclock.New(fc, wallclock.System()), wallclock.DefaultMaxSlew)
		opts.node.Logger.Warn("FAULT INJECTION: this node's wall clock is wrong on purpose; never serve real traffic so",
			"offset", fc.Offset, "drift", fc.Drift, "step", fc.Step, "step_after", fc.StepAfter)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Caught from the start: SIGHUP's default action would kill the node.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	n, err := node.Start(opts.node)
	if err != nil {
		opts.node.Logger.Error("start failed", "err", field.Render(err, opts.fieldName))
		return 1
	}
	// SIGHUP runs every reload hook in turn: policies, credentials, Envoy
	// RLS config. Each logs (and counts) its own outcome and keeps the old
	// settings when a file is unusable, so its error needs nothing more here.
	onHUP := []func() error{n.ReloadPolicies, n.ReloadSecurity, n.ReloadEnvoyRLS}
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-hup:
			opts.node.Logger.Info("SIGHUP: reloading")
			for _, f := range onHUP {
				_ = f()
			}
		}
	}
	stop() // a second signal now kills the process at once
	opts.node.Logger.Info("signal received, shutting down", "timeout", opts.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), opts.shutdownTimeout)
	defer cancel()
	if err := n.Shutdown(sctx); err != nil {
		opts.node.Logger.Error("shutdown", "err", err)
		return 1
	}
	return 0
}
