package node_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/node"
)

// An application can run a node inside its own process: it joins the
// cluster (here it starts one), serves its share of the keys, and the
// application checks through a client like any other.
func ExampleStart() {
	cfg := node.DefaultLocalConfig("app-1") // loopback, free ports
	// cfg.Join = []string{"10.0.0.5:7946"} // to join an existing cluster
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(cfg)
	if err != nil {
		panic(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx) // leaves the cluster and hands its keys off
	}()

	c, err := client.New(context.Background(), client.Config{Endpoints: []string{n.GRPCAddr()}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for range 3 {
		d, err := c.Check(context.Background(), "user:42", client.Limit{Limit: 2, Window: time.Minute})
		if err != nil {
			panic(err)
		}
		fmt.Println("allowed:", d.Allowed, "remaining:", d.Remaining, "owner:", d.Owner)
	}
	// Output:
	// allowed: true remaining: 1 owner: app-1
	// allowed: true remaining: 0 owner: app-1
	// allowed: false remaining: 0 owner: app-1
}
