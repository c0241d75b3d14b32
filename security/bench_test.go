package security

import "testing"

// The per-call cost of the checks on the request path.

func BenchmarkClientAuthCheck(b *testing.B) {
	toks, _ := NewTokens([]string{tokA, tokB})
	auth := NewClientAuth(toks, false)
	header := "Bearer " + tokB
	b.ReportAllocs()
	for b.Loop() {
		if auth.Check(header, false) != OK {
			b.Fatal("refused")
		}
	}
}

func BenchmarkPeerAuthCheck(b *testing.B) {
	p, err := NewPeerAuth(PeerAuthConfig{SelfID: "a", RequireCert: true, Secrets: [][]byte{secretNew, secretOld}})
	if err != nil {
		b.Fatal(err)
	}
	p.SetMembers([]string{"a", "b", "c"})
	tok := PeerToken(secretNew, "c")
	b.ReportAllocs()
	for b.Loop() {
		if p.Check("c", tok, true) != OK {
			b.Fatal("refused")
		}
	}
}
