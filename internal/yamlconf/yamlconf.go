// Package yamlconf holds what the strict YAML loaders of policy and
// envoyrls share: a size-capped read, yaml.v3's errors turned into lines,
// aliases followed, whole numbers read, and the cap on reported errors.
// It exists so that both files are read, and their errors reported, the
// same way, and a fix to one loader's reading is not missed in the other.
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// MaxErrors bounds the errors one load reports: enough to fix a file in
// one go, not a wall of text for a file that is not YAML at all.
const MaxErrors = 20

// ReadFile reads path, refusing one larger than limit bytes or that is
// not a regular file after symlinks (internal/regularfile says why).
// prefix starts every error ("policies").
func ReadFile(prefix, path string, limit int) ([]byte, error) {
	data, err := regularfile.Read(path, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return data, nil
}

// BadText finds the first byte of data that yaml.v3 refuses before
// parsing, and reports without a line (a NUL on line 5 came out as line
// 1): a byte that is not UTF-8, or a character YAML does not allow in a
// stream (C0 and C1 controls but tab, line feed, carriage return and
// NEL; DEL; U+FFFE, U+FFFF). It returns the character's 1-based line, its
// byte offset and why, for the caller's message.
func BadText(data []byte) (line, off int, why string, bad bool) {
	for off < len(data) {
		r, size := utf8.DecodeRune(data[off:])
		switch {
		case r == utf8.RuneError && size == 1:
			why = "not UTF-8 text"
		case !yamlPrintable(r):
			why = fmt.Sprintf("control character %U, which YAML does not allow", r)
		default:
			off += size
			continue
		}
		return 1 + bytes.Count(data[:off], []byte("\n")), off, why, true
	}
	return 0, 0, "", false
}

// yamlPrintable is YAML 1.2's c-printable, as yaml.v3 checks it.
func yamlPrintable(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r' || r == 0x85:
		return true
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return false
	case r == 0xfffe || r == 0xffff:
		return false
	}
	return true
}

// yamlLine finds the line in yaml's own messages ("yaml: line 3: could
// not find expected ':'").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// SyntaxError is the 1-based line and message of a yaml.v3 decoding error.
func SyntaxError(err error) (line int, msg string) {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		return line, m[2]
	}
	// yaml.v3's marks are 0-based and it prints no line for 0: a syntax
	// error without one is on the first line.
	return 1, strings.TrimPrefix(err.Error(), "yaml: ")
}

// Deref follows an alias (*defaults) to its anchor.
func Deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// Join joins errs, the first MaxErrors of them and then more(n), the error
// that says n more were found.
func Join(errs []error, more func(n int) error) error {
	if len(errs) > MaxErrors {
		errs = append(errs[:MaxErrors:MaxErrors], more(len(errs)-MaxErrors))
	}
	return errors.Join(errs...)
}

// digits is what YAML would read as an integer if it fit in 64 bits.
var digits = regexp.MustCompile(`^[-+]?[0-9_]+$`)

// Int reads a whole number scalar; on failure, msg says why, naming field.
// bits is the width the caller stores (it checks its own range after): a
// number too big even for int64 is reported against that width.
func Int(v *yaml.Node, field string, bits int) (n int64, msg string, ok bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
		if v.Kind == yaml.ScalarNode && v.ShortTag() != "!!str" && digits.MatchString(v.Value) {
			// YAML reads an integer too big for 64 bits as a float.
			return 0, fmt.Sprintf("%s %s does not fit in %d bits", field, v.Value, bits), false
		}
		return 0, fmt.Sprintf("%s must be a whole number, got %q", field, v.Value), false
	}
	return n, "", true
}

// Error is one problem in a configuration file, at a line: both loaders
// report every problem as one.
type Error struct {
	File string
	Line int // 1-based; 0 when the problem is the file as a whole
	// Where names the part of the file the problem is inside (a domain and
	// descriptor, a policy), if any.
	Where string
	Msg   string
}

// Error reads like a compiler's: `rls.yaml:12: domain "messaging",
// descriptor to_number: requests_per_unit must be a whole number`.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Where != "" {
		b.WriteString(e.Where + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}
