package grpcapi

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	"github.com/peerlimit/peerlimit/limiter"
)

// An error's message is answered at most MaxMessage bytes long, "…"
// included, and so is its BadRequest detail's description, cut at a
// character's start; the field is named still. A short message is whole.
func TestStatusCapsTheMessage(t *testing.T) {
	st := Status(&limiter.ArgumentError{Field: "key", Reason: strings.Repeat("é", 5000)})
	assert.Equal(t, codes.InvalidArgument, st.Code())
	assert.LessOrEqual(t, len(st.Message()), MaxMessage)
	assert.True(t, strings.HasSuffix(st.Message(), "…"), st.Message())
	assert.True(t, utf8.ValidString(st.Message()))
	assert.Equal(t, "key", Field(st))
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			assert.LessOrEqual(t, len(br.GetFieldViolations()[0].GetDescription()), MaxMessage)
		}
	}

	short := Status(&limiter.ArgumentError{Field: "limit", Reason: "must be positive, got 0"})
	assert.Equal(t, "invalid limit: must be positive, got 0", short.Message())
}
