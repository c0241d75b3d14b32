package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/node"
)

func ExampleClient_Check() {
	// A one-node cluster for the example; in production, the endpoints are
	// your cluster's nodes (any one is enough to learn the others).
	cfg := node.DefaultLocalConfig("n1")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(cfg)
	if err != nil {
		panic(err)
	}
	defer n.Kill()

	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: []string{n.GRPCAddr()}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	login := client.Limit{Limit: 1, Window: time.Minute, Algorithm: client.SlidingWindowLog}
	for range 2 {
		d, err := c.Check(ctx, "login:alice", login)
		if err != nil {
			panic(err) // no node answered in time: the caller decides (fail open or closed)
		}
		if d.Allowed {
			fmt.Println("welcome")
		} else {
			fmt.Printf("too many attempts; retry in %s\n", d.RetryAfter.Round(time.Minute))
		}
	}
	// Output:
	// welcome
	// too many attempts; retry in 1m0s
}

func ExampleClient_Reserve() {
	cfg := node.DefaultLocalConfig("n1")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(cfg)
	if err != nil {
		panic(err)
	}
	defer n.Kill()
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: []string{n.GRPCAddr()}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// An LLM call may use up to 500 tokens of alice's 1,000 per minute.
	tokens := client.Limit{Limit: 1000, Window: time.Minute, Algorithm: client.SlidingWindowLog}
	r, err := c.Reserve(ctx, "tokens:alice", tokens, 500, 0)
	if err != nil {
		panic(err)
	}
	if !r.Allowed {
		fmt.Printf("over budget; retry in %s\n", r.RetryAfter)
		return
	}
	fmt.Printf("reserved 500, %d left\n", r.Remaining)
	// ... the call streams its answer: 120 tokens.
	s, err := c.Settle(ctx, r, 120)
	if err != nil {
		panic(err) // the reservation counts as used when it expires
	}
	fmt.Printf("settled: %d refunded, %d left\n", s.Refunded, s.Remaining)
	// Output:
	// reserved 500, 500 left
	// settled: 380 refunded, 880 left
}
