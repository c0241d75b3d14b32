package rpc_test

import (
	"context"
	"testing"

	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Every bad GCRA or CONCURRENCY combination over gRPC is INVALID_ARGUMENT
// naming its field, before any store decides anything.
func TestGCRAAndConcurrencyInvalidArgumentsNameTheField(t *testing.T) {
	e := newEnv(t, withPolicies(t, testPolicies+"upload: {algorithm: GCRA, limit: 10, window: 1s, burst: 50}\n"))
	ctx := context.Background()
	gcra := func(burst int64) *pb.CheckRequest {
		return &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Burst: ptr(burst)}
	}
	conc := func(op pb.Op) *pb.CheckRequest {
		return &pb.CheckRequest{Key: "c", Limit: 5, WindowMs: 1000, Algorithm: pb.Algorithm_CONCURRENCY, Op: op}
	}
	for _, c := range []struct {
		name  string
		req   *pb.CheckRequest
		field string
	}{
		{"explicit burst 0", gcra(0), "burst"},
		{"negative burst", gcra(-5), "burst"},
		{"burst on a counter", &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Burst: ptr(int64(5))}, "burst"},
		{"hits over the burst", &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Algorithm: pb.Algorithm_GCRA, Burst: ptr(int64(2)), Hits: ptr(int64(3))}, "hits"},
		{"policy and burst", &pb.CheckRequest{Key: "k", Policy: "upload", Burst: ptr(int64(5))}, "burst"},
		{"unknown algorithm", &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Algorithm: 4}, "algorithm"},
		{"ACQUIRE on a counter", &pb.CheckRequest{Key: "k", Limit: 10, WindowMs: 1000, Op: pb.Op_ACQUIRE}, "op"},
		{"RESERVE on CONCURRENCY", conc(pb.Op_RESERVE), "op"},
		{"RELEASE without its token", conc(pb.Op_RELEASE), "reservation"},
		{"unknown op", conc(8), "op"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.srv.Check(ctx, c.req)
			requireInvalid(t, err, c.field)
		})
	}
}
