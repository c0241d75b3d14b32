// Command peerlimit-node runs one peerlimit node. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	// The time zone database, in the binary (~450 KB): calendar limits
	// name IANA zones, and a FROM scratch image has no /usr/share/zoneinfo.
	_ "time/tzdata"

	"go.opentelemetry.io/otel"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/faultclock"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/internal/wallclock"
	"github.com/peerlimit/peerlimit/node"
	"github.com/peerlimit/peerlimit/tracing"
)

func main() {
	args := os.Args[1:]
	// Started as /bin/ratelimit, as envoyproxy/ratelimit's image is.
	if filepath.Base(os.Args[0]) == "ratelimit" {
		args = append([]string{"ratelimit"}, args...)
	}
	os.Exit(dispatch(args, os.Getenv, os.Stdout, os.Stderr))
}

// run serves a node until SIGTERM or SIGINT; SIGHUP reloads.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	return runWith(args, getenv, stderr, mode{})
}

// mode is what a way of starting the node adds to its flags: the
// ratelimit mode's notes on upstream's variables (logged once the logger
// exists), and its own check of the options they made.
type mode struct {
	notes []string
	check func(options) error
}

// runWith is run, started as m says.
func runWith(args []string, getenv func(string) string, stderr io.Writer, m mode) int {
	opts, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && m.check != nil {
		err = m.check(opts)
	}
	if err != nil {
		fmt.Fprintln(stderr, "peerlimit-node:", err)
		return 2
	}
	prepare(&opts, stderr, m)

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
	stopSide, err := serveSideListeners(opts, n)
	if err != nil {
		opts.node.Logger.Error("start failed", "err", err)
		n.Kill()
		return 1
	}
	defer stopSide()
	serveUntilSignal(ctx, hup, n, opts.node.Logger)
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

// prepare sets opts' logger and clock, and logs what the operator must
// see at once: the mode's notes, deprecated flags, an injected fault.
func prepare(opts *options, stderr io.Writer, m mode) {
	opts.node.Logger = slog.New(logHandler(stderr, opts.logFormat, opts.logLevel))
	if opts.node.Tracing.Enabled { // the SDK's export errors, otherwise on the standard logger
		otel.SetErrorHandler(tracing.LogErrors(opts.node.Logger))
	}
	for _, note := range m.notes {
		// Warn: upstream's default level, so that what a variable no
		// longer does is seen without asking for more.
		opts.node.Logger.Warn("ratelimit mode: " + note)
	}
	for _, why := range opts.deprecated {
		opts.node.Logger.Warn("deprecated flag", "why", why)
	}
	if fc := opts.faultClock; fc.Enabled() {
		opts.node.Now = wallclock.Steady(faultclock.New(fc, wallclock.System()), wallclock.DefaultMaxSlew)
		opts.node.Logger.Warn("FAULT INJECTION: this node's wall clock is wrong on purpose; never serve real traffic so",
			"offset", fc.Offset, "drift", fc.Drift, "step", fc.Step, "step_after", fc.StepAfter)
	}
}

// serveUntilSignal reloads on each SIGHUP until ctx ends (SIGINT,
// SIGTERM). Reloads run beside this loop, one at a time, so that a
// SIGTERM is seen at once even while one is under way: a reload must
// never hold the node up (the loaders refuse what could block them, a
// named pipe or a device; a file system that hangs is not theirs to
// refuse). A reload under way when it returns finishes on its own, or
// not: the shutdown does not wait for it.
func serveUntilSignal(ctx context.Context, hup <-chan os.Signal, n *node.Node, log *slog.Logger) {
	reloads := make(chan struct{}, 1)
	defer close(reloads)
	go func() {
		for range reloads {
			// Policies, credentials, Envoy RLS config, in turn. Each part
			// logs (and counts) its own outcome and keeps the old settings
			// when a file is unusable, so the error needs nothing more here.
			_ = n.Reload()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			select {
			case reloads <- struct{}{}:
				log.Info("SIGHUP: reloading")
			default:
				log.Info("SIGHUP: a reload is waiting already; it will read the files as they are then")
			}
		}
	}
}

// serveSideListeners serves, each alone on an address of its own and
// without authentication, n's metrics (--metrics-addr, upstream's
// PROMETHEUS_ADDR) and upstream's debug page (--debug-addr, its
// DEBUG_PORT: /rlconfig), until the returned stop is called.
func serveSideListeners(opts options, n *node.Node) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, l := range []struct {
		flag, addr, path, what string
		h                      http.Handler
	}{
		{"--metrics-addr", opts.metricsAddr, "GET /metrics", "metrics served", n.MetricsHandler()},
		{"--debug-addr", opts.debugAddr, "GET /rlconfig", "debug page served", httpapi.RLConfigHandler(envoyrls.Viewer(n.Configs().EnvoyRLSInForce))},
	} {
		if l.addr == "" {
			continue
		}
		s, err := serveAlone(l.addr, l.path, l.h, opts.node.Logger)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", l.flag, err)
		}
		opts.node.Logger.Info(l.what, "addr", s.addr)
		stops = append(stops, s.stop)
	}
	return stop, nil
}

// sideListener is one of serveSideListeners' servers.
type sideListener struct {
	addr string
	stop func()
}

// serveAlone serves h at pattern, and nothing else, on addr.
func serveAlone(addr, pattern string, h http.Handler, log *slog.Logger) (sideListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return sideListener{}, err
	}
	mux := http.NewServeMux()
	mux.Handle(pattern, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("side listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return sideListener{addr: ln.Addr().String(), stop: func() { srv.Close(); <-done }}, nil
}
