package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// runHealthcheck is `peerlimit-node healthcheck`: GET <addr>/healthz and
// exit 0 when the node answers 200, 1 when it answers anything else or
// not at all, 2 on bad flags. The container image is FROM scratch, with
// no shell or curl, so its HEALTHCHECK runs the binary itself.
func runHealthcheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("peerlimit-node healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "http://127.0.0.1:8080", "base URL of the node's HTTP API")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "peerlimit-node healthcheck: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	u, err := url.Parse(*addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "peerlimit-node healthcheck: --addr: want http://host:port, got %q\n", *addr)
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "peerlimit-node healthcheck: --timeout: must be positive, got %s\n", *timeout)
		return 2
	}
	target := strings.TrimSuffix(u.String(), "/") + "/healthz"

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		fmt.Fprintf(stderr, "peerlimit-node healthcheck: %v\n", err)
		return 2
	}
	// No proxy from the environment: the check is about this node.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "unhealthy: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	status := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "unhealthy: %s answered %s %s\n", target, resp.Status, status)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %s\n", target, status)
	return 0
}
