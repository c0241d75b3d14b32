package field

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestInPrefixesEveryFieldAndKeepsTheRest(t *testing.T) {
	plain := errors.New("GRPCAddr and HTTPAddr must be set")
	err := errors.Join(Errorf("MaxKeys", "must be ≥ %d, got %d", 271, 5), plain,
		In("Hot", Errorf("Keys", "must be ≤ 64 with %s", Ref("Mode"))))
	got := In("Limiter", err)
	var paths []string
	var others []error
	Each(got, func(fe *Error, other error) {
		if fe != nil {
			paths = append(paths, fe.Error())
		} else {
			others = append(others, other)
		}
	})
	assert.Equal(t, []string{"Limiter.MaxKeys must be ≥ 271, got 5", "Limiter.Hot.Keys must be ≤ 64 with Limiter.Hot.Mode"}, paths)
	assert.Equal(t, []error{plain}, others)
	assert.Nil(t, In("Limiter", nil))
	assert.EqualError(t, Errorf("Timeout", "must be positive, got %s", "0s"), "Timeout must be positive, got 0s")
}

// Render names each field, and each field a reason names, its caller's
// way; the error underneath is still there.
func TestRender(t *testing.T) {
	flags := map[string]string{"Limiter.MaxKeys": "--max-keys", "Security.TLSCertFile": "--tls-cert-file"}
	name := func(p string) string {
		if f, ok := flags[p]; ok {
			return f
		}
		return p
	}
	err := In("Security", errors.Join(Errorf("TLSKeyFile", "needs %s", Ref("TLSCertFile")), Wrap("TLSCertFile", fs.ErrNotExist)))
	got := Render(errors.Join(In("Limiter", Errorf("MaxKeys", "must be ≥ 271")), err), name)
	assert.EqualError(t, got, "--max-keys must be ≥ 271\nSecurity.TLSKeyFile needs --tls-cert-file\n--tls-cert-file: file does not exist")
	assert.ErrorIs(t, got, fs.ErrNotExist)
	var fe *Error
	assert.ErrorAs(t, got, &fe)
}
