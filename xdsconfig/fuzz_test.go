package xdsconfig_test

import (
	"testing"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// Whatever a control plane sends, the node parses it or refuses it with
// an error; it never panics. Go's fuzzer mutates serialized resources.
func FuzzResource(f *testing.F) {
	for _, c := range []*rlsconfpb.RateLimitConfig{
		limitConfig("api", "api", 10),
		{Name: "x", Domain: "d", Descriptors: []*rlsconfpb.RateLimitDescriptor{{Key: "k", Value: "*", Descriptors: []*rlsconfpb.RateLimitDescriptor{
			{Key: "k2", RateLimit: &rlsconfpb.RateLimitPolicy{Unlimited: true, Replaces: []*rlsconfpb.RateLimitReplace{{Name: "n"}}}}}}}},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c rlsconfpb.RateLimitConfig
		if proto.Unmarshal(b, &c) != nil {
			return
		}
		doc, err := xdsconfig.Document(&c)
		if err != nil {
			return
		}
		_, _ = envoyrls.ParseDocuments("fuzz", []envoyrls.Document{doc}, envoyrls.LoadOptions{})
	})
}
