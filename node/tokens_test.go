package node_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/peerlimit/peerlimit/httpapi"
	"github.com/peerlimit/peerlimit/internal/grpcapi"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
	pb "github.com/peerlimit/peerlimit/proto/peerlimit/v1"
)

// Reservation tokens on real nodes with a cluster secret, each settle
// sent to the node that does not own the key, so that the refusals
// travel back from the owner with their code and field: a rewritten
// token is INVALID_ARGUMENT on reservation (nothing refunded), a settle
// retried at another cost FAILED_PRECONDITION on hits (HTTP 409) with the
// first one's numbers, and a release after the settle SETTLED_BEFORE.
func TestReservationTokensOnRealNodes(t *testing.T) {
	c := testcluster.New(t, 2, func(cfg *node.Config) {
		cfg.Security.ClusterSecrets = [][]byte{[]byte("the cluster secret of this test")}
	})
	ctx := context.Background()
	via := c.Node(0)
	client := apiClient(t, via)
	key := keyOwnedBy(t, via, c.Node(1).ID(), "tokens")
	limit := func(op pb.Op, hits int64, tok string) *pb.CheckRequest {
		return &pb.CheckRequest{Key: key, Limit: 10, WindowMs: 60_000, Op: op, Hits: &hits, Reservation: tok}
	}
	_, err := client.Check(ctx, limit(pb.Op_CHECK, 7, ""))
	require.NoError(t, err)
	resp, err := client.Check(ctx, limit(pb.Op_RESERVE, 3, ""))
	require.NoError(t, err)
	require.True(t, resp.Allowed)
	tok := resp.Reservation

	// The hits rewritten from 3 to 10 (byte 24 is the low byte of hits).
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	require.NoError(t, err)
	raw[24] = 10
	_, err = client.Check(ctx, limit(pb.Op_SETTLE, 3, base64.RawURLEncoding.EncodeToString(raw)))
	st := status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	assert.Equal(t, "reservation", grpcapi.Field(st))
	peek, err := client.Check(ctx, limit(pb.Op_CHECK, 0, ""))
	require.NoError(t, err)
	assert.EqualValues(t, 10, peek.CurrentCount, "nothing refunded")

	got, err := client.Check(ctx, limit(pb.Op_SETTLE, 1, tok))
	require.NoError(t, err)
	assert.Equal(t, pb.Settled_SETTLED_NOW, got.Settled)
	assert.EqualValues(t, 2, got.Refunded)

	_, err = client.Check(ctx, limit(pb.Op_SETTLE, 3, tok))
	st = status.Convert(err)
	require.Equal(t, codes.FailedPrecondition, st.Code(), "%v", err)
	assert.Equal(t, "hits", grpcapi.Field(st))
	assert.Contains(t, st.Message(), "cost of 1 (refunded 2, over 0)")

	body, err := json.Marshal(httpapi.CheckRequest{Key: key, Limit: 10, WindowMS: 60_000, Op: "SETTLE", Hits: ptr(int64(3)), Reservation: tok})
	require.NoError(t, err)
	hr, err := http.Post("http://"+via.HTTPAddr()+"/v1/check", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer hr.Body.Close()
	assert.Equal(t, http.StatusConflict, hr.StatusCode)
	var e struct{ Error httpapi.Error }
	require.NoError(t, json.NewDecoder(hr.Body).Decode(&e))
	assert.Equal(t, "FAILED_PRECONDITION", e.Error.Code)
	assert.Equal(t, "hits", e.Error.Field)

	got, err = client.Check(ctx, limit(pb.Op_RELEASE, 0, tok))
	require.NoError(t, err)
	assert.Equal(t, pb.Settled_SETTLED_BEFORE, got.Settled)
	assert.EqualValues(t, 2, got.Refunded, "the first answer's numbers")
	peek, err = client.Check(ctx, limit(pb.Op_CHECK, 0, ""))
	require.NoError(t, err)
	assert.EqualValues(t, 8, peek.CurrentCount)
}

// The reservation tokens' key follows the cluster secrets through a
// reload (SIGHUP): a token signed by a secret still listed settles, one
// signed by a secret removed is refused.
func TestReservationTokensFollowTheSecretsThroughAReload(t *testing.T) {
	secrets := filepath.Join(t.TempDir(), "secrets")
	writeSecrets := func(lines ...string) {
		require.NoError(t, os.WriteFile(secrets, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	}
	const oldSecret, newSecret = "the old secret of this cluster", "the new secret of this cluster"
	writeSecrets(oldSecret)
	c := testcluster.New(t, 1, func(cfg *node.Config) { cfg.Security.ClusterSecretFile = secrets })
	n := c.Node(0)
	client := apiClient(t, n)
	ctx := context.Background()
	req := func(op pb.Op, hits int64, tok string) *pb.CheckRequest {
		return &pb.CheckRequest{Key: "rotate", Limit: 100, WindowMs: 60_000, Op: op, Hits: &hits, Reservation: tok}
	}
	reserve := func() string {
		resp, err := client.Check(ctx, req(pb.Op_RESERVE, 5, ""))
		require.NoError(t, err)
		require.True(t, resp.Allowed)
		return resp.Reservation
	}
	underOld, kept := reserve(), reserve()

	writeSecrets(newSecret, oldSecret) // the switch: the new one signs, the old one is accepted
	require.NoError(t, n.Reload())
	underNew := reserve()
	_, err := client.Check(ctx, req(pb.Op_SETTLE, 1, underOld))
	require.NoError(t, err, "signed by a secret still listed")

	writeSecrets(newSecret) // the old one removed
	require.NoError(t, n.Reload())
	_, err = client.Check(ctx, req(pb.Op_SETTLE, 1, underNew))
	require.NoError(t, err)
	_, err = client.Check(ctx, req(pb.Op_SETTLE, 1, kept))
	st := status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "signed by a secret removed: %v", err)
	assert.Contains(t, st.Message(), "not authentic")
}
