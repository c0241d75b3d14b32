package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The offsets of a reservation token's fields before base64url, as
// limiter/token.go lays them out (version 2): what a caller without the
// key can rewrite, the MAC kept.
const (
	tokenIDAt      = 1  // 8 bytes
	tokenHitsAt    = 17 // 8 bytes, big endian
	tokenExpiresAt = 25 // 8 bytes, big endian, unix ms
	tokenFlagsAt   = 33 // 1 byte: bit 0 a HOLD, the others unknown
)

// tokenRewrites are what a caller could change in a token without the
// key: its hits (3 → 10), its expiry (an hour later), its flags (a HOLD,
// an unknown flag), its id (a reservation that never was).
var tokenRewrites = []func(b []byte){
	func(b []byte) { binary.BigEndian.PutUint64(b[tokenHitsAt:], 10) },
	func(b []byte) {
		binary.BigEndian.PutUint64(b[tokenExpiresAt:], binary.BigEndian.Uint64(b[tokenExpiresAt:])+uint64(time.Hour.Milliseconds()))
	},
	func(b []byte) { b[tokenFlagsAt] |= 1 },
	func(b []byte) { b[tokenFlagsAt] |= 2 },
	func(b []byte) { b[tokenIDAt] ^= 0xff },
}

// seedLimit is the limit the token bodies reserve and settle on.
const seedLimit = `"key":"tok","limit":10,"window_ms":60000`

// tokenBodies reserves 3 hits through h and returns /v1/check bodies of
// the reservation's token, a current one (version 2, with its MAC):
// rewritten ones (tokenRewrites), each settled and released; bodies with
// a key twice (the token as issued, then a rewritten one; hits twice);
// and the token as issued, settled at 2 then released.
func tokenBodies(t testing.TB, h http.Handler) (rewritten, duplicate, valid []string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check",
		strings.NewReader(`{`+seedLimit+`,"op":"RESERVE","hits":3,"ttl_ms":3600000}`)))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var r CheckResponse
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
	require.NotEmpty(t, r.Reservation, "the seed reservation was admitted: %s", rec.Body.String())
	raw, err := base64.RawURLEncoding.DecodeString(r.Reservation)
	require.NoError(t, err)
	body := func(op, tok, more string) string {
		return fmt.Sprintf(`{%s,"op":%q,"reservation":%q%s}`, seedLimit, op, tok, more)
	}
	var bad string
	for _, edit := range tokenRewrites {
		b := bytes.Clone(raw)
		edit(b)
		bad = base64.RawURLEncoding.EncodeToString(b)
		rewritten = append(rewritten, body("SETTLE", bad, `,"hits":3`), body("RELEASE", bad, ""))
	}
	duplicate = []string{
		body("SETTLE", r.Reservation, `,"hits":2,"reservation":"`+bad+`"`),
		body("SETTLE", r.Reservation, `,"hits":2,"hits":3`),
		body("SETTLE", r.Reservation, `,"hits":2,"Reservation":"`+bad+`"`),
	}
	return rewritten, duplicate, []string{body("SETTLE", r.Reservation, `,"hits":2`), body("RELEASE", r.Reservation, "")}
}

// tokenBatchBodies are tokenBodies as /v1/check:batch bodies: the
// rewritten items, then the valid ones, in one batch; each duplicate in
// a batch of its own.
func tokenBatchBodies(rewritten, duplicate, valid []string) []string {
	out := []string{`{"checks":[` + strings.Join(append(append([]string(nil), rewritten...), valid...), ",") + `]}`}
	for _, d := range duplicate {
		out = append(out, `{"checks":[`+d+`]}`)
	}
	return out
}

// A rewritten current token is refused, 400 naming reservation; a body
// with the token or the cost twice is refused naming the field, nothing
// decided; the token as issued settles once. These are the HTTP fuzzers'
// token seeds, answered as they must be.
func TestTokenSeedsAnswerAsTheyMust(t *testing.T) {
	h := newFuzzHandler(t)
	rewritten, duplicate, valid := tokenBodies(t, h)
	post := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
		return rec
	}
	for _, body := range rewritten {
		rec := post(body)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", body, rec.Body.String())
		assert.Equal(t, "reservation", fuzzError(t, rec.Body.Bytes()).Field, body)
	}
	for i, body := range duplicate {
		rec := post(body)
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", body, rec.Body.String())
		assert.Equal(t, []string{"reservation", "hits", "Reservation"}[i], fuzzError(t, rec.Body.Bytes()).Field, body)
	}
	for i, want := range []string{"SETTLED_NOW", "SETTLED_BEFORE"} {
		rec := post(valid[i])
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var r CheckResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
		assert.Equal(t, want, r.Settled, valid[i])
		assert.EqualValues(t, 1, r.Refunded, "reserved 3, settled at 2: %s", valid[i])
	}
}
