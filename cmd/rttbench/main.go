// Command rttbench measures the floor under a forwarding hop: what one
// round trip between two processes costs over loopback, over raw TCP and
// over gRPC, at the concurrency a node's forwarder runs. It is the other
// half of scripts/hop-bench.sh (docs/benchmarks.md, "The hop between two
// processes"), which runs it beside two nodes and reads both processes'
// CPU time from /proc.
//
// One process serves, another calls:
//
//	rttbench -mode serve -transport tcp  -addr 127.0.0.1:7100
//	rttbench -mode call  -transport tcp  -addr 127.0.0.1:7100 -workers 4 -duration 6s -size 128
//
// The transports:
//
//   - tcp: a connection per worker, each round trip one write and one read
//     of -size bytes on each side (the floor no protocol goes under);
//   - grpc-stream: grpc-go's own benchmark service (BenchmarkService, the
//     service of its benchmark suite), a stream per worker on one
//     connection, one message each way per round trip, with the flow
//     control window the nodes use (internal/wire): a member's forwards
//     travel as messages on one such stream;
//   - grpc-unary: the same service's UnaryCall, a call per round trip.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/benchmark"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/peerlimit/peerlimit/internal/proccpu"
	"github.com/peerlimit/peerlimit/internal/wire"
)

// config is one run's settings, from the flags.
type config struct {
	Mode, Transport, Addr, JSON string
	Workers, Size               int
	Duration                    time.Duration
}

// result is what a caller measured; the JSON the script reads.
type result struct {
	Transport  string  `json:"transport"`
	Workers    int     `json:"workers"`
	Size       int     `json:"size"`
	RoundTrips int64   `json:"round_trips"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"round_trips_per_s"`
	CPUSeconds float64 `json:"cpu_seconds"` // this process's, the caller's side only
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rttbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Mode == "serve" {
		err = serve(ctx, cfg)
	} else {
		err = call(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rttbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	cfg := config{Mode: "call", Transport: "tcp", Addr: "127.0.0.1:7100", Workers: 4, Size: 128, Duration: 6 * time.Second}
	fs := flag.NewFlagSet("rttbench", flag.ContinueOnError)
	fs.StringVar(&cfg.Mode, "mode", cfg.Mode, "serve (echo what arrives) or call (measure round trips)")
	fs.StringVar(&cfg.Transport, "transport", cfg.Transport, "tcp, grpc-stream or grpc-unary")
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "address to listen on (serve) or to dial (call)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "concurrent round trips (call)")
	fs.IntVar(&cfg.Size, "size", cfg.Size, "bytes of each message, both ways")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to call")
	fs.StringVar(&cfg.JSON, "json", "", `write the result as JSON here ("": a line on stdout)`)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case cfg.Mode != "serve" && cfg.Mode != "call":
		return cfg, fmt.Errorf("-mode %q: want serve or call", cfg.Mode)
	case cfg.Transport != "tcp" && cfg.Transport != "grpc-stream" && cfg.Transport != "grpc-unary":
		return cfg, fmt.Errorf("-transport %q: want tcp, grpc-stream or grpc-unary", cfg.Transport)
	case cfg.Workers < 1 || cfg.Workers > 10000:
		return cfg, fmt.Errorf("-workers %d: want 1 to 10000", cfg.Workers)
	case cfg.Size < 1 || cfg.Size > 1<<20:
		return cfg, fmt.Errorf("-size %d: want 1 to 1048576", cfg.Size)
	case cfg.Duration <= 0 || cfg.Duration > time.Hour:
		return cfg, fmt.Errorf("-duration %v: want more than 0, at most 1h", cfg.Duration)
	}
	return cfg, nil
}

// serve echoes until ctx ends: tcp by hand, gRPC by grpc-go's benchmark
// server (which answers streaming and unary calls alike).
func serve(ctx context.Context, cfg config) error {
	lis, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	if cfg.Transport != "tcp" {
		stopServer := benchmark.StartServer(benchmark.ServerInfo{Type: "protobuf", Listener: lis}, wire.ServerWindow()...)
		<-ctx.Done()
		stopServer()
		return nil
	}
	var conns sync.WaitGroup
	defer conns.Wait()
	go func() { <-ctx.Done(); lis.Close() }()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			defer c.Close()
			echo(c, cfg.Size)
		}()
	}
}

// echo writes back each -size message it reads, until the connection ends.
func echo(c net.Conn, size int) {
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// roundTripper makes one round trip per call; each worker has its own.
type roundTripper func() error

// call runs cfg.Workers round-trip loops for cfg.Duration and reports
// what they did and what this process spent.
func call(ctx context.Context, cfg config) error {
	trips, closeAll, err := dialWorkers(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeAll()
	cpu0, _ := proccpu.Self()
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(trips))
	for i, rt := range trips {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if err := rt(); err != nil {
					errs[i] = err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := proccpu.Self()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("round trip: %w", err)
	}
	r := result{Transport: cfg.Transport, Workers: cfg.Workers, Size: cfg.Size, RoundTrips: n.Load(),
		Seconds: elapsed.Seconds(), CPUSeconds: (cpu1 - cpu0).Seconds()}
	r.PerSecond = float64(r.RoundTrips) / r.Seconds
	return report(cfg.JSON, r)
}

// dialWorkers opens what each worker calls over: a TCP connection each,
// or a gRPC stream each on one connection, or one connection for unary
// calls.
func dialWorkers(ctx context.Context, cfg config) ([]roundTripper, func(), error) {
	trips := make([]roundTripper, cfg.Workers)
	if cfg.Transport == "tcp" {
		var conns []net.Conn
		closeAll := func() {
			for _, c := range conns {
				c.Close()
			}
		}
		for i := range trips {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", cfg.Addr)
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("dial %s: %w", cfg.Addr, err)
			}
			conns = append(conns, c)
			buf := make([]byte, cfg.Size)
			trips[i] = func() error {
				if _, err := c.Write(buf); err != nil {
					return err
				}
				_, err := io.ReadFull(c, buf)
				return err
			}
		}
		return trips, closeAll, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(wire.Window), grpc.WithInitialConnWindowSize(wire.Window)}
	conn, err := grpc.NewClient(cfg.Addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", cfg.Addr, err)
	}
	tc := testpb.NewBenchmarkServiceClient(conn)
	for i := range trips {
		if cfg.Transport == "grpc-unary" {
			trips[i] = func() error { return benchmark.DoUnaryCall(tc, cfg.Size, cfg.Size) }
			continue
		}
		stream, err := tc.StreamingCall(ctx)
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("open stream %d: %w", i, err)
		}
		trips[i] = streamTrip(stream, cfg.Size)
	}
	return trips, func() { conn.Close() }, nil
}

// streamTrip sends one request of size bytes on stream and reads its
// answer, the request built once (as a forwarder reuses its buffers).
func streamTrip(stream testpb.BenchmarkService_StreamingCallClient, size int) roundTripper {
	pl := benchmark.NewPayload(testpb.PayloadType_COMPRESSABLE, size)
	req := &testpb.SimpleRequest{ResponseType: pl.Type, ResponseSize: int32(size), Payload: pl}
	return func() error {
		if err := stream.Send(req); err != nil {
			return err
		}
		_, err := stream.Recv()
		return err
	}
}

func report(path string, r result) error {
	if path == "" {
		fmt.Printf("%s: %d round trips in %.2f s (%.0f/s), %d workers, %d bytes; caller CPU %.1f µs per round trip\n",
			r.Transport, r.RoundTrips, r.Seconds, r.PerSecond, r.Workers, r.Size, r.CPUSeconds*1e6/float64(max(r.RoundTrips, 1)))
		return nil
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if path == "-" {
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
