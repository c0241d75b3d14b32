package envoyrls

import (
	"fmt"
	"math"
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/peerlimit/peerlimit/internal/yamlconf"
	"github.com/peerlimit/peerlimit/limiter"
)

// reader reads YAML nodes into values and keeps every problem it finds,
// at its line in the file being read. One reader serves a whole load, so
// that the parser and the readers of its parts (rate_limit, metadata)
// report into one list, in the order the problems are met. It knows
// nothing of domains or descriptors: where in them a node is comes from
// the caller, as where.
type reader struct {
	file string // the file being read, named in errors
	errs []error
}

func (rd *reader) fail(line int, where, format string, args ...any) {
	rd.errs = append(rd.errs, &Error{File: rd.file, Line: line, Where: where, Msg: fmt.Sprintf(format, args...)})
}

// err is every problem found, joined (the first maxErrors of them), or
// nil.
func (rd *reader) err() error {
	if len(rd.errs) == 0 {
		return nil
	}
	return yamlconf.Join(rd.errs, func(n int) error { return &Error{File: rd.file, Msg: fmt.Sprintf("and %d more errors", n)} })
}

// fields walks a mapping's pairs, refusing non-string and repeated field
// names and merge keys, and calls f with each field.
func (rd *reader) fields(m *yaml.Node, where string, f func(name string, k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := deref(m.Content[i]), deref(m.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode:
			rd.fail(k.Line, where, "field names must be strings")
			continue
		case k.Value == "<<" && k.ShortTag() == "!!merge":
			rd.fail(k.Line, where, "merge keys (<<) are not supported; give each descriptor its fields")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			rd.fail(k.Line, where, "%s given twice (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		f(k.Value, k, v)
	}
}

// unit reads a rate_limit's unit.
func (rd *reader) unit(v *yaml.Node, where string) (Unit, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		rd.fail(v.Line, where, "unit must be one of second, minute, hour, day, week, month, year")
		return 0, false
	}
	u := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(v.Value)]
	if _, ok := UnitDuration(Unit(u)); !ok {
		rd.fail(v.Line, where, "unknown unit %q; want second, minute, hour, day, week, month or year", v.Value)
		return 0, false
	}
	return Unit(u), true
}

func (rd *reader) algorithm(v *yaml.Node, where string) (limiter.Algorithm, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
		rd.fail(v.Line, where, "algorithm must be SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG or GCRA")
		return 0, false
	}
	a, err := limiter.ParseAlgorithm(v.Value)
	if err != nil {
		rd.fail(v.Line, where, "unknown algorithm %q; want SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG or GCRA", v.Value)
		return 0, false
	}
	return a, true
}

func (rd *reader) uint32(v *yaml.Node, where, field string) (uint32, bool) {
	n, msg, ok := yamlconf.Int(v, field, 32)
	if !ok {
		rd.fail(v.Line, where, "%s", msg)
		return 0, false
	}
	if n < 0 || n > math.MaxUint32 {
		rd.fail(v.Line, where, "%s must be between 0 and %d, got %d", field, uint32(math.MaxUint32), n)
		return 0, false
	}
	return uint32(n), true
}

func (rd *reader) boolean(v *yaml.Node, where, field string) (bool, bool) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		rd.fail(v.Line, where, "%s must be true or false, got %q", field, v.Value)
		return false, false
	}
	return b, true
}

// hasField reports whether mapping m has the field name. yaml.v3 numbers
// parsed lines from 1, so fieldLine's default of 0 means absent.
func hasField(m *yaml.Node, name string) bool {
	return fieldLine(m, name, 0) > 0
}

func fieldLine(m *yaml.Node, name string, def int) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return m.Content[i].Line
		}
	}
	return def
}
