package security

import (
	"context"
	"testing"
	"time"

	"github.com/peerlimit/peerlimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	secretOld = []byte("old-secret-0123456789")
	secretNew = []byte("new-secret-0123456789")
)

func newPeerAuth(t *testing.T, cfg PeerAuthConfig) (*PeerAuth, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.At(time.Unix(1_000_000, 0))
	if cfg.SelfID == "" {
		cfg.SelfID = "a"
	}
	cfg.Now = clk.Now
	p, err := NewPeerAuth(cfg)
	require.NoError(t, err)
	return p, clk
}

func TestPeerAuthNeedsTheTokenOfAMember(t *testing.T) {
	p, _ := newPeerAuth(t, PeerAuthConfig{Secrets: [][]byte{secretOld}, Grace: time.Second})
	assert.Equal(t, NotMember, p.Check("b", PeerToken(secretOld, "b"), false), "nobody is a member before SetMembers")
	p.SetMembers([]string{"a", "b"})

	assert.Equal(t, OK, p.Check("b", PeerToken(secretOld, "b"), false))
	assert.Equal(t, MissingPeerToken, p.Check("b", "", false))
	assert.Equal(t, BadPeerToken, p.Check("b", PeerToken(secretNew, "b"), false), "another cluster's secret")
	assert.Equal(t, BadPeerToken, p.Check("b", PeerToken(secretOld, "a"), false), "a token is good for its own origin only")
	assert.Equal(t, NotMember, p.Check("intruder", PeerToken(secretOld, "intruder"), false), "the secret but not a member")
	assert.Equal(t, BadPeerToken, p.Check("intruder", "garbage", false))
	assert.Equal(t, NotMember, p.Check("", PeerToken(secretOld, ""), false))
}

func TestPeerAuthTrustsDepartedMembersForTheGraceOnly(t *testing.T) {
	p, clk := newPeerAuth(t, PeerAuthConfig{Secrets: [][]byte{secretOld}, Grace: 30 * time.Second})
	p.SetMembers([]string{"a", "b", "c"})
	tokB := PeerToken(secretOld, "b")

	p.SetMembers([]string{"a", "c"}) // b leaves
	clk.Advance(29 * time.Second)
	assert.Equal(t, OK, p.Check("b", tokB, false), "a leaving member hands off after the others saw it go")
	p.SetMembers([]string{"a"}) // another change must not restart b's grace
	clk.Advance(2 * time.Second)
	assert.Equal(t, NotMember, p.Check("b", tokB, false))
	p.SetMembers([]string{"a"})
	assert.Equal(t, NotMember, p.Check("b", tokB, false), "forgotten")

	p.SetMembers([]string{"a", "b"})
	assert.Equal(t, OK, p.Check("b", tokB, false), "rejoined")
}

func TestPeerAuthSecretRotation(t *testing.T) {
	// Three nodes, each with its own PeerAuth, rotate one step at a time;
	// after every node's step every node must accept every other's calls.
	ids := []string{"a", "b", "c"}
	nodes := map[string]*PeerAuth{}
	for _, id := range ids {
		nodes[id], _ = newPeerAuth(t, PeerAuthConfig{SelfID: id, Secrets: [][]byte{secretOld}})
		nodes[id].SetMembers(ids)
	}
	allAccept := func(step string) {
		t.Helper()
		for _, from := range ids {
			md, err := nodes[from].Credentials().GetRequestMetadata(context.Background())
			require.NoError(t, err)
			for _, to := range ids {
				assert.Equal(t, OK, nodes[to].Check(from, md[PeerTokenKey], false), "%s: %s → %s", step, from, to)
			}
		}
	}
	for _, step := range []struct {
		name    string
		secrets [][]byte
	}{
		{"add new", [][]byte{secretOld, secretNew}},
		{"use new", [][]byte{secretNew, secretOld}},
		{"remove old", [][]byte{secretNew}},
	} {
		for _, id := range ids {
			require.NoError(t, nodes[id].SetSecrets(step.secrets))
			allAccept(step.name + " on " + id)
		}
	}
	assert.Equal(t, BadPeerToken, nodes["a"].Check("b", PeerToken(secretOld, "b"), false), "the old secret is gone")
}

func TestPeerAuthCertificateRule(t *testing.T) {
	p, _ := newPeerAuth(t, PeerAuthConfig{RequireCert: true})
	p.SetMembers([]string{"a", "b"})
	assert.Equal(t, MissingPeerCert, p.Check("b", "", false))
	assert.Equal(t, OK, p.Check("b", "", true))
	assert.Equal(t, NotMember, p.Check("x", "", true))

	both, _ := newPeerAuth(t, PeerAuthConfig{RequireCert: true, Secrets: [][]byte{secretOld}})
	both.SetMembers([]string{"a", "b"})
	assert.Equal(t, MissingPeerToken, both.Check("b", "", true), "both configured: both needed")
	assert.Equal(t, MissingPeerCert, both.Check("b", PeerToken(secretOld, "b"), false))
	assert.Equal(t, OK, both.Check("b", PeerToken(secretOld, "b"), true))
}

func TestPeerAuthConfigErrors(t *testing.T) {
	for _, c := range []struct {
		cfg  PeerAuthConfig
		want string
	}{
		{PeerAuthConfig{Secrets: [][]byte{secretOld}}, "SelfID"},
		{PeerAuthConfig{SelfID: "a"}, "needs a peer certificate, cluster secrets, or both"},
		{PeerAuthConfig{SelfID: "a", Secrets: [][]byte{[]byte("short")}}, "secret 1 is 5 bytes"},
		{PeerAuthConfig{SelfID: "a", RequireCert: true, Grace: -time.Second}, "Grace"},
	} {
		_, err := NewPeerAuth(c.cfg)
		assert.ErrorContains(t, err, c.want)
	}
	p, _ := newPeerAuth(t, PeerAuthConfig{Secrets: [][]byte{secretOld}})
	assert.ErrorContains(t, p.SetSecrets(nil), "cannot be removed")
	c, _ := newPeerAuth(t, PeerAuthConfig{RequireCert: true})
	assert.ErrorContains(t, c.SetSecrets([][]byte{secretOld}), "cannot be turned on")
}

func TestPeerAuthCheckDoesNotAllocate(t *testing.T) {
	p, _ := newPeerAuth(t, PeerAuthConfig{RequireCert: true, Secrets: [][]byte{secretNew, secretOld}})
	p.SetMembers([]string{"a", "b", "c"})
	tok := PeerToken(secretOld, "c")
	allocs := testing.AllocsPerRun(1000, func() {
		if p.Check("c", tok, true) != OK {
			t.Fatal("refused")
		}
	})
	assert.Zero(t, allocs)
}
