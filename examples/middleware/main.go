// Command middleware serves a hello handler limited by a peerlimit cluster
// to 5 requests per 10 seconds per client IP, with client.Middleware.
//
//	make build && ./scripts/run-local.sh   # in another shell: 3 nodes on loopback
//	go run ./examples/middleware
//	for i in 1 2 3 4 5 6; do curl -si 127.0.0.1:8088/; done   # the 6th is 429
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/peerlimit/peerlimit/client"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:9090,127.0.0.1:9091,127.0.0.1:9092", "comma-separated gRPC addresses of cluster nodes")
	addr := flag.String("addr", "127.0.0.1:8088", "HTTP listen address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*endpoints, *addr, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(endpoints, addr string, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	newCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := client.New(newCtx, client.Config{
		Endpoints: strings.Split(endpoints, ","),
		// Well under the middleware's 250ms per check, so that a node that
		// hangs still leaves time to ask another.
		AttemptTimeout: 100 * time.Millisecond,
		Logger:         log,
	})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()

	limit, err := client.Middleware(c, client.MiddlewareConfig{
		Limit:  client.Limit{Limit: 5, Window: 10 * time.Second},
		Key:    client.Prefix("hello:ip:", client.KeyByIP),
		Policy: "per-ip",
		// Fail open (the default): if the cluster is unreachable, serve
		// unlimited and say so in the log.
		OnError: func(r *http.Request, err error) {
			log.Warn("rate limit not checked", "remote", r.RemoteAddr, "err", err)
		},
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello\n")
	})))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("serving on http://%s/ : 5 requests per 10s per client IP (cluster %s)\n", addr, endpoints)
	fmt.Printf("try:  for i in 1 2 3 4 5 6; do curl -si http://%s/ | grep -iE '^(HTTP|ratelimit|retry-after)'; done\n", addr)
	fmt.Println("Ctrl-C stops.")

	select {
	case err := <-errc:
		return err // could not listen
	case <-ctx.Done():
	}
	stop() // a second Ctrl-C kills at once
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
