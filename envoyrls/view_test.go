package envoyrls

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// No rules, no view: httpapi answers 404 on a nil view. Rules never put
// in force (a control plane's placeholder) have no load time.
func TestViewOfNoRulesAndOfAPlaceholder(t *testing.T) {
	assert.Nil(t, Viewer(func() (*RuleSet, time.Time) { return nil, time.Time{} })())

	rs, err := Parse("rls.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3}\n"), LoadOptions{})
	require.NoError(t, err)
	v := rs.View(time.Time{})
	require.NotNil(t, v)
	assert.Zero(t, v.LoadedAtMS)
	assert.Equal(t, []string{"d"}, v.Domains)
	assert.Empty(t, v.AllOrNothingDomains)
	require.Len(t, v.Rules, 1)
	assert.Equal(t, "d.k", v.Rules[0].Key)
	assert.Equal(t, int64(1000), v.Rules[0].WindowMS)
	assert.Equal(t, int64(1_700_000_000_123), rs.View(time.UnixMilli(1_700_000_000_123)).LoadedAtMS)
}
