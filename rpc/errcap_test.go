package rpc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/internal/grpcapi"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Over real gRPC, an error names the field and repeats at most 128 bytes
// of the value the caller sent, in a message of at most 1 KiB
// (grpcapi.MaxMessage): a 900 KB value once came back whole (issue 38,
// item 8).
func TestGRPCErrorsCapWhatTheyEcho(t *testing.T) {
	cl := pb.NewRateLimiterClient(newEnv(t).serveGRPC(t))
	long := strings.Repeat("x", 900_000)
	for field, req := range map[string]*pb.CheckRequest{
		"policy":      {Key: "a", Policy: long},
		"key":         {Key: long, Limit: 1, WindowMs: 1000},
		"time_zone":   {Key: "a", Limit: 1, Calendar: pb.CalendarUnit_DAY, TimeZone: long},
		"reservation": {Key: "a", Limit: 1, WindowMs: 1000, Op: pb.Op_SETTLE, Reservation: long, Hits: ptr(int64(1))},
	} {
		_, err := cl.Check(context.Background(), req)
		st := status.Convert(err)
		assert.Equal(t, codes.InvalidArgument, st.Code(), "%s: %v", field, st.Message())
		assert.Equal(t, field, grpcapi.Field(st))
		assert.LessOrEqual(t, len(st.Message()), grpcapi.MaxMessage, field)
		assert.NotContains(t, st.Message(), strings.Repeat("x", 129), "%s: at most 128 bytes of the value", field)
	}
}
