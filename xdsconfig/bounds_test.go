package xdsconfig

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// nested is a resource whose descriptors nest depth levels.
func nested(depth int) *rlsconfpb.RateLimitConfig {
	var d *rlsconfpb.RateLimitDescriptor
	for i := range depth {
		d = &rlsconfpb.RateLimitDescriptor{Key: "k", Value: string(rune('a' + i%26)), Descriptors: descriptorsOf(d)}
	}
	return &rlsconfpb.RateLimitConfig{Name: "deep", Domain: "d", Descriptors: descriptorsOf(d)}
}

func descriptorsOf(d *rlsconfpb.RateLimitDescriptor) []*rlsconfpb.RateLimitDescriptor {
	if d == nil {
		return nil
	}
	return []*rlsconfpb.RateLimitDescriptor{d}
}

// A few kilobytes of protobuf nested ten thousand deep would be hundreds
// of megabytes of indented YAML: refused before it is written.
func TestADeepResourceIsRefusedBeforeItIsWritten(t *testing.T) {
	if _, err := Document(nested(32)); err != nil {
		t.Fatalf("32 levels, the parser's limit: %v", err)
	}
	for _, depth := range []int{33, 10_000} {
		_, err := Document(nested(depth))
		if err == nil || !strings.Contains(err.Error(), "nested deeper than 32 levels") {
			t.Fatalf("%d levels: %v; want refused", depth, err)
		}
	}
	md := structpb.NewStringValue("leaf")
	for range 40 {
		md = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"m": md}})
	}
	deepMeta := &rlsconfpb.RateLimitConfig{Name: "meta", Domain: "d", Descriptors: []*rlsconfpb.RateLimitDescriptor{
		{Key: "k", Metadata: md.GetStructValue(), RateLimit: &rlsconfpb.RateLimitPolicy{Unit: rlsconfpb.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}}
	if _, err := Document(deepMeta); err == nil || !strings.Contains(err.Error(), "metadata") {
		t.Fatalf("metadata 40 deep: %v; want refused", err)
	}
}

// The parser's bound on descriptors holds over a whole response, not per
// resource.
func TestTheDescriptorBudgetCoversTheResponse(t *testing.T) {
	wide := func(name string, n int) *rlsconfpb.RateLimitConfig {
		c := &rlsconfpb.RateLimitConfig{Name: name, Domain: name}
		for range n {
			c.Descriptors = append(c.Descriptors, &rlsconfpb.RateLimitDescriptor{Key: "k"})
		}
		return c
	}
	var b budget
	if _, err := b.document(wide("a", 60_000)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.document(wide("b", 60_000)); err == nil || !strings.Contains(err.Error(), "more than 100000 descriptors") {
		t.Fatalf("120 000 descriptors in one response: %v; want refused", err)
	}
}

// A NACK's reason is cut at a character, so that it stays UTF-8 and can
// be sent at all.
func TestALongNackIsCutAtACharacter(t *testing.T) {
	msg := "a" + strings.Repeat("é", maxNackBytes) // two bytes each, after one: the cut falls inside one
	got := nack(errors.New(msg)).GetMessage()
	if !utf8.ValidString(got) || len(got) > maxNackBytes+len("…") {
		t.Fatalf("NACK reason of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
}
