package httpapi

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/peerlimit/peerlimit/limiter"
)

// checkUnambiguous refuses what encoding/json accepts but reads in a way
// that someone else reading the same body may not (issue 38, item 6):
//
//   - a key twice in one object, which encoding/json resolves by taking
//     the last occurrence: a proxy that validated `"op":"CHECK"` would
//     let `"op":"CHECK","op":"REFUND"` through as a refund. Keys are
//     compared as encoding/json matches them to fields, after unescaping
//     and case-insensitively, so `"limit"` and `"Li\u006dit"` are one key;
//   - a string that is not valid UTF-8 (raw bytes, or an unpaired
//     surrogate escape such as "\ud800"), which encoding/json turns into
//     U+FFFD, so that "\xff" and "\xfe" would share one counter.
//
// It runs after encoding/json accepted body, so body is one valid JSON
// value and every object holds only the fields of the API's structs: an
// object has few distinct keys and the linear search below stays short.
// It is still safe on any input (it stops at the end of body). It walks
// the bytes once without allocating, unless a key holds escapes.
// The error names the field by its path ("checks[2].limit").
func checkUnambiguous(body []byte) error {
	var (
		stackArr [8]scanFrame
		stack    = stackArr[:0]
	)
	for i := 0; i < len(body); {
		c := body[i]
		switch c {
		case '{', '[':
			stack = append(stack, scanFrame{obj: c == '{', wantKey: c == '{'})
			i++
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			i++
		case ',':
			if n := len(stack); n > 0 {
				if stack[n-1].obj {
					stack[n-1].wantKey = true
				} else {
					stack[n-1].index++
				}
			}
			i++
		case ':':
			if n := len(stack); n > 0 {
				stack[n-1].wantKey = false
			}
			i++
		case '"':
			end, escaped, valid := scanString(body, i+1)
			raw := body[i+1 : end]
			n := len(stack)
			if n > 0 && stack[n-1].obj && stack[n-1].wantKey {
				key := raw
				if escaped {
					key = unescapeKey(raw)
				}
				top := &stack[n-1]
				if top.seen(key) {
					top.key = key
					return &limiter.ArgumentError{Field: framePath(stack), Reason: "appears more than once in one object; send each field once"}
				}
				top.add(key)
				top.key = key
			} else if !valid {
				return &limiter.ArgumentError{Field: framePath(stack), Reason: "must be valid UTF-8 (the string holds invalid bytes or an unpaired surrogate escape)"}
			}
			i = end + 1
		default:
			i++
		}
	}
	return nil
}

// scanFrame is an object or array being walked by checkUnambiguous.
type scanFrame struct {
	obj     bool
	wantKey bool // an object's next string is a key
	// An object's keys so far, unescaped: the first in place (an API
	// object has at most 11 fields), any more in more.
	first  [12][]byte
	nfirst int
	more   [][]byte
	key    []byte // an object's current key
	index  int    // an array's current element
}

// seen reports whether the object has key already, as encoding/json
// matches keys to fields: case-insensitively.
func (f *scanFrame) seen(key []byte) bool {
	for _, k := range f.first[:f.nfirst] {
		if bytes.EqualFold(k, key) {
			return true
		}
	}
	for _, k := range f.more {
		if bytes.EqualFold(k, key) {
			return true
		}
	}
	return false
}

func (f *scanFrame) add(key []byte) {
	if f.nfirst < len(f.first) {
		f.first[f.nfirst] = key
		f.nfirst++
		return
	}
	f.more = append(f.more, key)
}

// framePath names the value being read: "key", "checks[2].limit".
func framePath(stack []scanFrame) string {
	var b strings.Builder
	for _, f := range stack {
		if f.obj {
			if f.key == nil {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(limiter.Echo(string(f.key)))
			continue
		}
		b.WriteByte('[')
		b.WriteString(strconv.Itoa(f.index))
		b.WriteByte(']')
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

// scanString returns the index of the quote closing the string whose
// contents start at body[start] (len(body) if none), whether it holds
// escapes, and whether it is valid UTF-8 once unescaped.
func scanString(body []byte, start int) (end int, escaped, valid bool) {
	valid = true
	var pendingHigh bool // a \uD800–\uDBFF escape awaits its low half
	i := start
	for i < len(body) {
		c := body[i]
		switch {
		case c == '"':
			return i, escaped, valid && !pendingHigh
		case c == '\\':
			escaped = true
			if i+1 < len(body) && body[i+1] == 'u' && i+6 <= len(body) {
				if r, ok := hex4(body, i+2); ok {
					switch {
					case utf16.IsSurrogate(r) && r < 0xdc00:
						if pendingHigh {
							valid = false
						}
						pendingHigh = true
					case utf16.IsSurrogate(r):
						if !pendingHigh {
							valid = false
						}
						pendingHigh = false
					default:
						if pendingHigh {
							valid = false
						}
						pendingHigh = false
					}
				}
				i += 6
				continue
			}
			if pendingHigh {
				valid = false
				pendingHigh = false
			}
			i += 2
		case c < utf8.RuneSelf:
			if pendingHigh {
				valid = false
				pendingHigh = false
			}
			i++
		default:
			if pendingHigh {
				valid = false
				pendingHigh = false
			}
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size == 1 {
				valid = false
			}
			i += size
		}
	}
	return len(body), escaped, false
}

// unescapeKey returns raw, a key's contents holding escapes, unescaped as
// encoding/json reads it (enough to compare it with other keys; an escape
// that is no JSON escape, which encoding/json refused already, is kept).
func unescapeKey(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw, i+1)
			if !ok {
				out = append(out, '\\', 'u')
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if lo, ok := hex4(raw, i+3); ok && i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if dr := utf16.DecodeRune(r, lo); dr != utf8.RuneError {
						r = dr
						i += 6
					}
				}
			}
			out = utf8.AppendRune(out, r) // a lone surrogate becomes U+FFFD, as encoding/json has it
		default: // " \\ /
			out = append(out, raw[i])
		}
	}
	return out
}

// hex4 reads the four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var v rune
	for _, c := range raw[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
