package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Each transport makes round trips between a server and a caller, and
// the server stops with its context, leaving no goroutine behind.
func TestEveryTransportMakesRoundTrips(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, transport := range []string{"tcp", "grpc-stream", "grpc-unary"} {
		t.Run(transport, func(t *testing.T) {
			addr := freeAddr(t)
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- serve(ctx, config{Transport: transport, Addr: addr, Size: 64}) }()
			out := filepath.Join(t.TempDir(), "r.json")
			cfg := config{Mode: "call", Transport: transport, Addr: addr, Workers: 2, Size: 64,
				Duration: 200 * time.Millisecond, JSON: out}
			var err error
			for range 50 { // the server may not listen yet
				if err = call(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "refused") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if err := <-served; err != nil {
				t.Fatalf("serve: %v", err)
			}
			var r result
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.RoundTrips == 0 || r.Transport != transport || r.Workers != 2 || r.Size != 64 {
				t.Fatalf("result %+v: want round trips over %s with 2 workers of 64 bytes", r, transport)
			}
		})
	}
}

func TestFlagsRefuseWhatCannotRun(t *testing.T) {
	for _, args := range [][]string{
		{"-mode", "both"}, {"-transport", "udp"}, {"-workers", "0"}, {"-size", "0"}, {"-duration", "0s"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		} else if !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: error %q does not name the flag", args, err)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
