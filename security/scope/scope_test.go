package scope_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
	"github.com/peerlimit/peerlimit/security/scope"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]scope.Set{
		"check":                 scope.Check,
		"check,reserve":         scope.Application,
		"application":           scope.Check | scope.Reserve,
		"refund, charge  reset": scope.Refund | scope.Charge | scope.Reset,
		"operator":              scope.Operator,
		"all":                   scope.All,
		"application,inspect":   scope.Application | scope.Inspect,
		"check,check":           scope.Check,
	} {
		got, err := scope.Parse(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", ",", "admin", "check,Refund", "check;reserve"} {
		_, err := scope.Parse(bad)
		assert.Error(t, err, "%q", bad)
	}
	assert.Equal(t, "check,reserve", scope.Application.String())
	assert.Equal(t, "none", scope.Set(0).String())
}

func TestAllowOp(t *testing.T) {
	app := scope.Application
	for _, op := range []limiter.Op{limiter.OpCheck, limiter.OpReserve, limiter.OpHold, limiter.OpSettle, limiter.OpRelease} {
		assert.NoError(t, app.AllowOp(op), op.String())
	}
	for _, op := range []limiter.Op{limiter.OpRefund, limiter.OpCharge} {
		err := app.AllowOp(op)
		require.Error(t, err, op.String())
		assert.Equal(t, peer.PermissionDenied, peer.CodeOf(err))
		assert.Equal(t, "op", peer.FieldOf(err))
		assert.Contains(t, err.Error(), op.String())
	}
	err := scope.Check.Need(scope.Reset, "Reset", "")
	assert.EqualError(t, err, "permission denied: Reset needs the token scope reset; this token has check")
	assert.NoError(t, scope.All.Need(scope.Reset, "Reset", ""))
}

func TestContext(t *testing.T) {
	assert.Equal(t, scope.All, scope.FromContext(context.Background()), "no scopes said: a node without tokens")
	assert.Equal(t, scope.Check, scope.FromContext(scope.WithContext(context.Background(), scope.Check)))
}
