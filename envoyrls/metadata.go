package envoyrls

import (
	"math"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// MaxMetadataValues bounds the metadata values of one load, counting an
// alias once per use, as MaxDescriptors bounds the descriptors.
const MaxMetadataValues = 100_000

// metadataReader reads descriptors' metadata for one load, reporting
// to rd; count is the metadata values read so far, across the load,
// aliases once per use (MaxMetadataValues).
type metadataReader struct {
	rd    *reader
	count int
}

// read reads a descriptor's metadata: any mapping, turned into the
// google.protobuf.Struct Envoy receives. Keys are the text of any scalar
// (upstream's `1: x` is {"1": "x"}); numbers become numbers, true and
// false booleans, null null, and every other scalar (a date, a quoted
// number) its text. Nil for null or an empty mapping: no metadata.
func (md *metadataReader) read(v *yaml.Node, where string) *structpb.Struct {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return nil
	}
	if v.Kind != yaml.MappingNode {
		md.rd.fail(v.Line, where, "metadata must be a mapping, e.g. {service_with_quota: {name: service_1}}")
		return nil
	}
	st, ok := md.mapping(v, where, 1)
	if !ok || len(st.Fields) == 0 {
		return nil
	}
	return st
}

// mapping reads a metadata mapping, at depth levels of nesting.
func (md *metadataReader) mapping(m *yaml.Node, where string, depth int) (*structpb.Struct, bool) {
	st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	ok := true
	md.rd.fields(m, where, func(name string, _, v *yaml.Node) {
		val, good := md.value(v, where, depth+1)
		st.Fields[name], ok = val, ok && good
	})
	return st, ok
}

// value reads one metadata value, at depth levels of nesting.
func (md *metadataReader) value(v *yaml.Node, where string, depth int) (*structpb.Value, bool) {
	if md.count++; md.count > MaxMetadataValues || depth > MaxDepth {
		if md.count == MaxMetadataValues+1 || depth == MaxDepth+1 {
			md.rd.fail(v.Line, where, "metadata larger than %d values or nested deeper than %d levels (aliases count once per use)", MaxMetadataValues, MaxDepth)
		}
		return nil, false
	}
	switch v.Kind {
	case yaml.MappingNode:
		st, ok := md.mapping(v, where, depth)
		return structpb.NewStructValue(st), ok
	case yaml.SequenceNode:
		list := &structpb.ListValue{}
		ok := true
		for _, item := range v.Content {
			val, good := md.value(deref(item), where, depth+1)
			list.Values, ok = append(list.Values, val), ok && good
		}
		return structpb.NewListValue(list), ok
	}
	return md.scalar(v, where)
}

func (md *metadataReader) scalar(v *yaml.Node, where string) (*structpb.Value, bool) {
	switch v.ShortTag() {
	case "!!null":
		return structpb.NewNullValue(), true
	case "!!bool":
		var b bool
		if err := v.Decode(&b); err != nil {
			md.rd.fail(v.Line, where, "metadata: %q is not a boolean", v.Value)
			return nil, false
		}
		return structpb.NewBoolValue(b), true
	case "!!int", "!!float":
		var f float64
		if err := v.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			// JSON, which Envoy's metadata is read as, has no infinity.
			md.rd.fail(v.Line, where, "metadata: %q is not a finite number; quote it to send it as text", v.Value)
			return nil, false
		}
		return structpb.NewNumberValue(f), true
	}
	return structpb.NewStringValue(v.Value), true
}

// mergeMetadata merges src into dst as envoyproxy/ratelimit merges the
// metadata of a request's passing descriptors, in order: a field dst
// lacks is added; when both hold a struct, the structs merge the same
// way; otherwise dst's value, the first, stays. What is added is a copy,
// so that the answer never shares (and the next merge never changes) the
// configuration's own values, which upstream does.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(have.GetStructValue(), v.GetStructValue())
		}
	}
}
