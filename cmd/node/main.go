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

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Caught from the start: SIGHUP's default action would kill the node.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	n, err := node.Start(opts.node)
	if err != nil {
		opts.node.Logger.Error("start failed", "err", err)
		return 1
	}
	// SIGHUP runs every reload hook in turn; each logs its own outcome.
	onHUP := []func(){func() { reloadPolicies(n) }, func() { reloadSecurity(n) }, func() { reloadEnvoyRLS(n) }}
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

// reloadPolicies is the SIGHUP hook of --policies. The node logs the
// outcome (on error, the file's bad line, keeping the policies in force)
// and counts it in peerlimit_policy_reloads_total; other reloadable
// settings add their own hook next to this one.
func reloadPolicies(n *node.Node) { _ = n.ReloadPolicies() }

// reloadSecurity is the SIGHUP hook of the credentials: the node re-reads
// its TLS, token, cluster secret and gossip keyring files, logs what it
// reloaded and what failed, and keeps the old value of anything whose file
// is unusable.
func reloadSecurity(n *node.Node) { _ = n.ReloadSecurity() }

// reloadEnvoyRLS is the SIGHUP hook of --envoy-rls-config. The node logs
// the outcome (on error, the bad file and line, keeping the configuration
// in force) and counts it in peerlimit_envoy_rls_config_reloads_total; a
// node without the flag has nothing to reload and says nothing.
func reloadEnvoyRLS(n *node.Node) { _ = n.ReloadEnvoyRLS() }
