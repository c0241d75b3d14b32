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
	endpoints := flag.String("endpoints", "", "comma-separated gRPC addresses of a peerlimit cluster; empty runs a node in this process")
	addr := flag.String("addr", "127.0.0.1:8089", "the proxy's HTTP listen address")
	tpm := flag.Int64("tpm", 2000, "each user's budget, in tokens per minute")
	delay := flag.Duration("token-delay", 5*time.Millisecond, "the fake model's time between two tokens")
	timeout := flag.Duration("timeout", time.Second, "bounds each reservation and each settle")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *endpoints, *addr, *tpm, *delay, *timeout, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, endpoints, addr string, tpm int64, delay, timeout time.Duration, log *slog.Logger) error {
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
	model := &http.Server{Handler: NewModel(uint64(time.Now().UnixNano()), delay), ReadHeaderTimeout: 5 * time.Second}
	go model.Serve(ln)
	defer shutdown(model.Shutdown)

	proxy, err := NewProxy(c, "http://"+ln.Addr().String(), Budget(tpm), timeout)
	if err != nil {
		return err
	}
	defer proxy.Close()
	srv := &http.Server{Addr: addr, Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("proxy on http://%s/v1/completions: %d tokens per minute per X-User (cluster %s, model %s)\n", addr, tpm, endpoints, ln.Addr())
	fmt.Printf("try:  curl -N %s/v1/completions -H 'X-User: alice' -d '{\"prompt\":\"hi\",\"max_tokens\":300}'\n", addr)
	select {
	case err := <-errc:
		return err // could not listen
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
