package rpc_test

import (
	"context"
	"testing"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// BenchmarkServerCheck is the public API's conversion and decision for one
// check, in-process: inline numbers (the hot path, which must not pay for
// policies) and a policy name (one lock-free lookup more).
func BenchmarkServerCheck(b *testing.B) {
	e := newEnv(b, withPolicies(b, testPolicies))
	ctx := context.Background()
	for _, c := range []struct {
		name string
		req  *pb.CheckRequest
	}{
		{"inline", &pb.CheckRequest{Key: "user:42", Limit: 1 << 40, WindowMs: 60_000}},
		{"policy", &pb.CheckRequest{Key: "user:43", Policy: "search"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.srv.Check(ctx, c.req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
