package route_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/route"
)

// The request path's refusals carry their codes, wrapped or not.
func TestRouteErrorsCarryTheirCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want peer.Code
	}{
		{fmt.Errorf("reset: %w: %w", peer.ErrOwnerUnreachable, &peer.Error{Code: peer.Unauthenticated}), peer.Unavailable},
		{route.ErrBatchTooLarge, peer.ResourceExhausted},
		{fmt.Errorf("forward refused: %w", route.ErrTooManyForwards), peer.ResourceExhausted},
	} {
		assert.Equal(t, tc.want, peer.CodeOf(tc.err), "%v", tc.err)
	}
}
