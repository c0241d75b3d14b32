package httpapi

import (
	"strings"

	"google.golang.org/grpc/codes"
)

// codeName spells a gRPC code as google.rpc.Code does (INVALID_ARGUMENT),
// which is what HTTP/JSON clients of gRPC-style APIs expect.
func codeName(c codes.Code) string {
	if c == codes.Canceled {
		return "CANCELLED" // google.rpc.Code's spelling; grpc-go's is "Canceled"
	}
	s := c.String() // "InvalidArgument"
	var b strings.Builder
	prevLower := false
	for _, r := range s {
		upper := r >= 'A' && r <= 'Z'
		if upper && prevLower {
			b.WriteByte('_')
		}
		b.WriteRune(r)
		prevLower = !upper
	}
	return strings.ToUpper(b.String())
}
