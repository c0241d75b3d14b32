package envoyrls

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// A descriptor's metadata becomes the Struct Envoy receives: numbers,
// booleans, null, lists and mappings as such, anything else as its text.
func TestMetadataValues(t *testing.T) {
	cfg, err := Parse("m.yaml", []byte(`domain: m
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: "service_1"}
      n: 3
      f: 0.5
      on: true
      none: null
      date: 2020-01-01
      quoted: "7"
      1: one
      list: [a, 2, {x: y}]
  - key: empty
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: {}
`), storeCheck(t))
	require.NoError(t, err)
	md := Match(cfg.Domain("m"), entries("k=v")).Rule.Metadata
	got, err := protojson.Marshal(md)
	require.NoError(t, err)
	assert.JSONEq(t, `{"service_with_quota": {"name": "service_1"}, "n": 3, "f": 0.5, "on": true, "none": null,
		"date": "2020-01-01", "quoted": "7", "1": "one", "list": ["a", 2, {"x": "y"}]}`, string(got))
	assert.Nil(t, Match(cfg.Domain("m"), entries("empty=v")).Rule.Metadata, "an empty mapping is no metadata")
}

// Merging keeps the first value, merges structs, and copies: the
// configuration's own metadata is never changed by an answer.
func TestMergeMetadataCopies(t *testing.T) {
	first, err := structpb.NewStruct(map[string]any{"svc": map[string]any{"name": "service_1"}, "a": 1})
	require.NoError(t, err)
	second, err := structpb.NewStruct(map[string]any{"svc": map[string]any{"name": "service_2", "zone": "z"}, "a": 2, "b": 3})
	require.NoError(t, err)
	before := first.String()

	dst := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	mergeMetadata(dst, first)
	mergeMetadata(dst, second)
	assert.Equal(t, map[string]any{"svc": map[string]any{"name": "service_1", "zone": "z"}, "a": 1.0, "b": 3.0}, dst.AsMap())
	assert.Equal(t, before, first.String(), "the first source is unchanged")
	dst.Fields["svc"].GetStructValue().Fields["name"] = structpb.NewStringValue("changed")
	assert.Equal(t, before, first.String(), "the answer shares nothing with it")
}

// With MergeDomains, files add top-level descriptors to one domain, in
// name order; a top-level descriptor defined twice is still an error,
// naming both files. Without it, the domain defined twice is the error.
func TestMergeDomains(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600))
	}
	write("a.yaml", "domain: d\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n  - key: w\n    value: ab*\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	write("b.yaml", "domain: d\ndescriptors:\n  - key: k2\n    value: v2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n  - key: w\n    value: a*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	write("c.yaml", "domain: d\ndescriptors: []\n")

	cfg, err := Load(dir, LoadOptions{MergeDomains: true})
	require.NoError(t, err)
	require.Len(t, cfg.Domains(), 1)
	d := cfg.Domain("d")
	assert.Equal(t, uint32(10), Match(d, entries("k1=v1")).Rule.RequestsPerUnit)
	assert.Equal(t, uint32(20), Match(d, entries("k2=v2")).Rule.RequestsPerUnit)
	assert.Equal(t, uint32(1), Match(d, entries("w=abd")).Rule.RequestsPerUnit, "a.yaml's wildcard is first: files load in name order")

	_, err = Load(dir, LoadOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "b.yaml")+`:1: domain "d": defined twice (first at `+filepath.Join(dir, "a.yaml")+":1)")

	write("d.yaml", "domain: d\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 30}\n")
	_, err = Load(dir, LoadOptions{MergeDomains: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "d.yaml")+`:3: domain "d", descriptor k1=v1: defined twice at this level (first at `+filepath.Join(dir, "a.yaml")+":3)")
}
