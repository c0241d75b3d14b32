// Package scope says what a caller of the public API may do: the scopes
// its API token was given in the token file (docs/security.md, "Token
// scopes"). The API layers (rpc, httpapi) put the caller's scopes in the
// request's context once its credentials are checked, and ask them before
// they decide anything.
//
// Scopes split the API by what a caller can do to the counts others rely
// on. An application checks and reserves: it spends its own budget.
// Giving budget back (REFUND), forcing it past the limit (CHARGE),
// clearing a key (reset) and reading other callers' keys (Inspect, Top,
// the console) are an operator's.
package scope

import (
	"context"
	"fmt"
	"strings"

	"github.com/peerlimit/peerlimit/limiter"
	"github.com/peerlimit/peerlimit/peer"
)

// Set is a set of scopes. The zero Set allows nothing.
type Set uint8

const (
	// Check allows CHECK (peeks included) and Envoy's ShouldRateLimit:
	// what every application does.
	Check Set = 1 << iota
	// Reserve allows RESERVE, SETTLE, RELEASE and HOLD: the reservation's
	// life, which an application reserving budget needs to close.
	Reserve
	// Refund allows REFUND: giving hits back.
	Refund
	// Charge allows CHARGE: counting hits past the limit.
	Charge
	// Reset allows Reset: clearing a key's counts.
	Reset
	// Inspect allows Inspect, Top and the console's /v1/cluster: reading
	// any key's state and the hot keys.
	Inspect

	// Application is what an application needs.
	Application = Check | Reserve
	// Operator is what an operator's tools need beyond it.
	Operator = Refund | Charge | Reset | Inspect
	// All is every scope: a token the file gives none (the file's format
	// before scopes), PEERLIMIT_API_TOKEN, and every caller of a node
	// without tokens.
	All = Application | Operator
)

var names = [...]string{"check", "reserve", "refund", "charge", "reset", "inspect"}

// groups are names for several scopes at once.
var groups = map[string]Set{"application": Application, "operator": Operator, "all": All}

// Parse reads scopes separated by commas or spaces: the names above, or
// application, operator and all. Empty is an error: a token with no scope
// is written without any, and means All (the caller decides that).
func Parse(s string) (Set, error) {
	var out Set
	for name := range strings.FieldsFuncSeq(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		if g, ok := groups[name]; ok {
			out |= g
			continue
		}
		found := false
		for i, n := range names {
			if n == name {
				out |= 1 << i
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown scope %q; want %s, or application, operator or all", clip(name), strings.Join(names[:], ", "))
		}
	}
	if out == 0 {
		return 0, fmt.Errorf("no scope in %q", clip(s))
	}
	return out, nil
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// String lists the scopes, comma-separated, in the order above; "none"
// for the zero Set.
func (s Set) String() string {
	var parts []string
	for i, n := range names {
		if s&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// Has reports whether s holds every scope of t.
func (s Set) Has(t Set) bool { return s&t == t }

// ForOp is the scope an op needs.
func ForOp(op limiter.Op) Set {
	switch op {
	case limiter.OpCheck:
		return Check
	case limiter.OpRefund:
		return Refund
	case limiter.OpCharge:
		return Charge
	}
	return Reserve // RESERVE, HOLD, SETTLE, RELEASE
}

// Need returns nil when s holds need, or a PermissionDenied error naming
// what, the operation refused ("REFUND", "Reset"), and the scope it
// needs, on field ("op"; "" for a whole call).
func (s Set) Need(need Set, what, field string) error {
	if s.Has(need) {
		return nil
	}
	return &peer.Error{Code: peer.PermissionDenied, Field: field,
		Message: fmt.Sprintf("permission denied: %s needs the token scope %s; this token has %s", what, need&^s, s)}
}

// AllowOp is Need for an op, on field "op".
func (s Set) AllowOp(op limiter.Op) error {
	if s.Has(ForOp(op)) { // the common case, without building an error
		return nil
	}
	return s.Need(ForOp(op), op.String(), "op")
}

type ctxKey struct{}

// WithContext returns ctx carrying the caller's scopes.
func WithContext(ctx context.Context, s Set) context.Context {
	return context.WithValue(ctx, ctxKey{}, s)
}

// FromContext returns the caller's scopes: All when ctx carries none (a
// node without tokens, an embedded caller, a call from another member,
// whose ingress checked its caller's scopes).
func FromContext(ctx context.Context) Set {
	if s, ok := ctx.Value(ctxKey{}).(Set); ok {
		return s
	}
	return All
}
