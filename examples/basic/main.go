// Command basic checks a key against a peerlimit cluster with the Go client.
//
//	make run   # in another shell: a 3-node cluster on loopback
//	go run ./examples/basic -key user:42 -limit 5 -window 1m -n 7
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/peerlimit/peerlimit/client"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:9090", "comma-separated gRPC addresses of any cluster nodes")
	key := flag.String("key", "user:42", "key to check")
	limit := flag.Int64("limit", 5, "requests allowed per window")
	window := flag.Duration("window", time.Minute, "window")
	algo := flag.String("algorithm", "SLIDING_WINDOW_COUNTER", "SLIDING_WINDOW_COUNTER or SLIDING_WINDOW_LOG")
	n := flag.Int("n", 7, "how many checks to make")
	flag.Parse()

	a, err := client.ParseAlgorithm(*algo)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: strings.Split(*endpoints, ",")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for i := range *n {
		d, err := c.Check(ctx, *key, client.Limit{Limit: *limit, Window: *window, Algorithm: a})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d: allowed=%-5v remaining=%d retry_after=%s owner=%s degraded=%v\n",
			i+1, d.Allowed, d.Remaining, d.RetryAfter, d.Owner, d.Degraded)
	}
}
