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
	if len(args) > 0 && args[0] == "healthcheck" {
		return runHealthcheck(args[1:], os.Stdout, stderr)
	}
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
	n, err := node.Start(opts.node)
	if err != nil {
		opts.node.Logger.Error("start failed", "err", err)
		return 1
	}
	<-ctx.Done()
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
