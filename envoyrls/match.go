package envoyrls

import "bytes"

// Entry is one key/value pair of a request's descriptor.
type Entry interface {
	GetKey() string
	GetValue() string
}

// how says the way one level's descriptor was selected: the counter key
// (share_threshold) and the statistics key (value_to_metric,
// detailed_metric) depend on it.
type how uint8

const (
	byValue    how = iota + 1 // the entry's key_value is the descriptor's composite key
	byWildcard                // the descriptor's composite key, a pattern, matches the entry's key_value
	byDefault                 // the entry's key alone is the descriptor's composite key
)

// Matched is what a request descriptor selects: the rule (nil: none) and
// how each level of the walk selected its descriptor.
type Matched struct {
	Rule *Rule
	hows uint64 // 2 bits per level from the top; MaxDepth levels fit
}

func (m Matched) how(level int) how { return how(m.hows >> (2 * level) & 3) }

// Match returns the rule a request descriptor's entries select, exactly as
// envoyproxy/ratelimit does. The entries are matched level by level from
// the domain's top, each on its composite key_value (key, "_", value: so
// a descriptor {key: a_b} without a value also catches the entry a=b, as
// upstream). At each level an entry selects the descriptor whose
// composite key is its key_value, else the first wildcard, in the order
// the configuration lists them, whose pattern matches its key_value (each
// '*' matching any text, empty included, anywhere in the key or value),
// else the descriptor of its key without a value. The first entry that
// selects nothing, or a descriptor without nested ones, ends the walk; the
// rule applies only if the walk reached the last entry and that
// descriptor has a rate_limit: a request with more (or fewer) entries
// than the configured depth matches nothing. No backtracking: an exact
// value without nested descriptors hides a wildcard or a default sibling
// that has them.
//
// Match takes no lock and, for keys and values up to 128 bytes together,
// allocates nothing.
func Match[E Entry](d *Domain, entries []E) Matched {
	if d == nil || len(entries) == 0 || len(entries) > MaxDepth {
		return Matched{}
	}
	var buf [128]byte
	lvl := d.root
	var hows uint64
	for i, e := range entries {
		k := e.GetKey()
		composite := append(append(append(buf[:0], k...), '_'), e.GetValue()...)
		n, h := lvl.lookup(k, composite)
		if n == nil {
			return Matched{}
		}
		hows |= uint64(h) << (2 * i)
		if i == len(entries)-1 {
			if n.rule == nil {
				return Matched{}
			}
			return Matched{Rule: n.rule, hows: hows}
		}
		if n.children == nil {
			return Matched{}
		}
		lvl = n.children
	}
	return Matched{}
}

// lookup selects the descriptor of the entry with key and composite
// key_value at this level.
func (l *level) lookup(key string, composite []byte) (*node, how) {
	if n := l.nodes[string(composite)]; n != nil {
		return n, byValue
	}
	for _, w := range l.wildcards {
		if w.glob.match(composite) {
			return w, byWildcard
		}
	}
	if n := l.nodes[key]; n != nil {
		return n, byDefault
	}
	return nil, 0
}

// glob is a pattern where each '*' matches any run of bytes, the empty one
// included; nothing else is special and nothing can be escaped, as in
// envoyproxy/ratelimit.
type glob struct {
	parts [][]byte // the text between the stars; at least two
	min   int      // the parts' total length: the shortest text matched
}

// newGlob returns the glob of pattern, which holds a '*'.
func newGlob(pattern string) *glob {
	g := &glob{}
	for _, p := range bytes.Split([]byte(pattern), []byte("*")) {
		g.parts = append(g.parts, p)
		g.min += len(p)
	}
	return g
}

// match reports whether s matches the whole pattern. The first part must
// start s and the last end it, without overlapping; each part between is
// taken at its leftmost place after the one before, which for '*'-only
// patterns finds a match whenever there is one.
func (g *glob) match(s []byte) bool {
	first, last := g.parts[0], g.parts[len(g.parts)-1]
	if len(s) < g.min || !bytes.HasPrefix(s, first) || !bytes.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range g.parts[1 : len(g.parts)-1] {
		i := bytes.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
