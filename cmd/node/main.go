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

	"github.com/peerlimit/peerlimit/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

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

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Before Start: SIGHUP's default action would end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	n, err := node.Start(opts.node)
	if err != nil {
		opts.node.Logger.Error("start failed", "err", err)
		return 1
	}
	// SIGHUP runs every reload hook in turn; each logs its own outcome.
	onHUP := []func(){func() { reloadSecurity(n) }}
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-hup:
			opts.node.Logger.Info("SIGHUP: reloading")
			for _, f := range onHUP {
				f()
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

// reloadSecurity is the SIGHUP hook of the credentials: the node re-reads
// its TLS, token, cluster secret and gossip keyring files, logs what it
// reloaded and what failed, and keeps the old value of anything whose file
// is unusable.
func reloadSecurity(n *node.Node) { _ = n.ReloadSecurity() }
