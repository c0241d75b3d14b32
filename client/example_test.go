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
