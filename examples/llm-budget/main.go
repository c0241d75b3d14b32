// Command llm-budget is an HTTP proxy that holds each user to a
// tokens-per-minute budget in front of a streaming model server (a fake
// one, in this process): it reserves the request's max_tokens, streams
// the answer, and settles the tokens the model actually sent. See
// README.md.
//
//	go run ./examples/llm-budget      # a peerlimit node, the fake model and the proxy, all in this process
//	curl -N 127.0.0.1:8089/v1/completions -H 'X-User: alice' -d '{"prompt":"hi","max_tokens":300}'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/node"
)

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		os.Exit(2) // the flag package said why
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log, nil); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// config is the command line's settings.
type config struct {
	endpoints string
	addr      string
	tpm       int64
	delay     time.Duration
	timeout   time.Duration
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("llm-budget", flag.ContinueOnError)
	fs.StringVar(&c.endpoints, "endpoints", "", "comma-separated gRPC addresses of a peerlimit cluster; empty runs a node in this process")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8089", "the proxy's HTTP listen address")
	fs.Int64Var(&c.tpm, "tpm", 2000, "each user's budget, in tokens per minute")
	fs.DurationVar(&c.delay, "token-delay", 5*time.Millisecond, "the fake model's time between two tokens")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "bounds each reservation and each settle")
	return c, fs.Parse(args)
}

// run serves the proxy until ctx ends; listening, when not nil, is told
// the proxy's address once it listens (cfg.addr may have port 0).
func run(ctx context.Context, cfg config, log *slog.Logger, listening func(addr string)) error {
	endpoints := cfg.endpoints
	if endpoints == "" {
		n, err := node.Start(node.DefaultLocalConfig("llm-budget-1"))
		if err != nil {
			return err
		}
		defer shutdown(n.Shutdown)
		endpoints = n.GRPCAddr()
	}
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := client.New(nctx, client.Config{Endpoints: strings.Split(endpoints, ","), AttemptTimeout: 300 * time.Millisecond, Logger: log})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	model := &http.Server{Handler: NewModel(uint64(time.Now().UnixNano()), cfg.delay), ReadHeaderTimeout: 5 * time.Second}
	go model.Serve(ln)
	defer shutdown(model.Shutdown)

	proxy, err := NewProxy(c, "http://"+ln.Addr().String(), Budget(cfg.tpm), cfg.timeout)
	if err != nil {
		return err
	}
	defer proxy.Close()
	pln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	addr := pln.Addr().String()
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(pln) }()
	fmt.Printf("proxy on http://%s/v1/completions: %d tokens per minute per X-User, key tpm:<X-User> (cluster %s, model %s)\n",
		addr, cfg.tpm, endpoints, ln.Addr())
	fmt.Printf("try:  curl -N %s/v1/completions -H 'X-User: alice' -d '{\"prompt\":\"hi\",\"max_tokens\":300}'\n", addr)
	if listening != nil {
		listening(addr)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown(srv.Shutdown) // streams in flight end, and settle, first
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	st := &proxy.Stats
	log.Info("proxy stopped", "admitted", st.Admitted.Load(), "denied", st.Denied.Load(),
		"tokens_reserved", st.Reserved.Load(), "tokens_settled", st.Settled.Load())
	return nil
}

// shutdown runs a Shutdown(ctx) with 10 seconds to finish.
func shutdown(f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = f(ctx)
}
