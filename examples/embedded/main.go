// Command embedded runs a peerlimit node inside an application process,
// joins a cluster (or starts one), and checks a key through it.
//
//	go run ./examples/embedded                                  # a cluster of one
//	go run ./examples/embedded -join 127.0.0.1:7946 -id app-1   # join `make run`
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/peerlimit/peerlimit/client"
	"github.com/peerlimit/peerlimit/node"
)

func main() {
	id := flag.String("id", "embedded-1", "node id, unique in the cluster")
	join := flag.String("join", "", "comma-separated gossip addresses of cluster members")
	flag.Parse()

	cfg := node.DefaultLocalConfig(*id) // loopback, free ports, fast gossip
	if *join != "" {
		cfg.Join = strings.Split(*join, ",")
	}
	n, err := node.Start(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil { // leave gracefully: keys go to their new owners
			log.Print(err)
		}
	}()
	fmt.Printf("node %s: gRPC %s, HTTP %s, gossip %s\n", n.ID(), n.GRPCAddr(), n.HTTPAddr(), n.GossipAddr())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := client.New(ctx, client.Config{Endpoints: []string{n.GRPCAddr()}})
	if err != nil {
		log.Print(err)
		return
	}
	defer c.Close()

	t := time.NewTicker(time.Second)
	defer t.Stop()
	for i := 0; i < 10; i++ {
		d, err := c.Check(ctx, "embedded:demo", client.Limit{Limit: 5, Window: 10 * time.Second})
		if err != nil {
			log.Print(err)
			return
		}
		fmt.Printf("check %d: allowed=%v remaining=%d owner=%s members=%d\n", i+1, d.Allowed, d.Remaining, d.Owner, len(n.Members()))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
