package route

import (
	"context"

	"github.com/peerlimit/peerlimit/peer"
)

// idAttrs returns the log attributes naming a request and the call to
// another member that carried it: request_id is the client's id, else the
// call's; forward_id is the call's when it differs.
func idAttrs(ctx context.Context, callID string) []any {
	rid := peer.RequestIDFrom(ctx)
	switch {
	case rid == "" && callID == "":
		return nil
	case rid == "":
		return []any{"request_id", callID}
	case callID == "" || callID == rid:
		return []any{"request_id", rid}
	}
	return []any{"request_id", rid, "forward_id", callID}
}
