// Package field names the field of a configuration that an error is
// about, as a path from the configuration its caller filled
// ("Limiter.MaxKeys"), so that whoever filled it can say it in its own
// terms: cmd/node names the flag (--max-keys), an application that embeds
// a node its own setting. Libraries never name a flag: they cannot know
// which one, if any, set the field.
package field

import (
	"errors"
	"fmt"
	"regexp"
)

// Error is an unusable value of one field of a configuration.
type Error struct {
	// Path is the field's path from the configuration the caller filled,
	// its parts joined by dots: "MaxKeys", then "Limiter.MaxKeys" once
	// the node's Validate has put it In "Limiter".
	Path string
	// Reason says what is wrong, as a predicate: "must be ≥ 1, got 0". It
	// may name other fields as {Path} (Ref), which In prefixes and
	// Render names like Path.
	Reason string
	// Err is the error the value caused (a file that could not be read),
	// if any.
	Err error
}

func (e *Error) Error() string { return e.render(func(p string) string { return p }) }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

func (e *Error) render(name func(path string) string) string {
	s := name(e.Path)
	if e.Reason != "" {
		s += " " + refs.ReplaceAllStringFunc(e.Reason, func(r string) string { return name(r[1 : len(r)-1]) })
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// refs are the other fields a Reason names.
var refs = regexp.MustCompile(`\{[A-Za-z0-9_.\[\]]+\}`)

// Ref names another field in a Reason: Errorf("TLSKeyFile", "needs %s",
// Ref("TLSCertFile")).
func Ref(path string) string { return "{" + path + "}" }

// Errorf returns an *Error for the field path, its reason formatted.
func Errorf(path, format string, args ...any) error {
	return &Error{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error for the field path whose value caused err; nil
// for a nil err.
func Wrap(path string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Path: path, Err: err}
}

// In returns err, a Validate's (one error or several joined), with every
// *Error in it, and every field its Reason names, under prefix:
// In("Limiter", err) reads "MaxKeys" as "Limiter.MaxKeys". Errors that
// name no field stay as they are. nil stays nil.
func In(prefix string, err error) error {
	return mapFields(err, func(fe *Error) error {
		reason := refs.ReplaceAllStringFunc(fe.Reason, func(r string) string { return Ref(prefix + "." + r[1:len(r)-1]) })
		return &Error{Path: prefix + "." + fe.Path, Reason: reason, Err: fe.Err}
	})
}

// Render returns err with every field named by name: cmd/node passes its
// flag for each field it has one for, and the path for the others.
func Render(err error, name func(path string) string) error {
	return mapFields(err, func(fe *Error) error { return rendered{fe.render(name), fe} })
}

// mapFields returns err, one error or several joined, with every *Error
// in it replaced by f's, the others kept. nil stays nil.
func mapFields(err error, f func(*Error) error) error {
	if err == nil {
		return nil
	}
	var out []error
	Each(err, func(fe *Error, other error) {
		if fe == nil {
			out = append(out, other)
			return
		}
		out = append(out, f(fe))
	})
	return errors.Join(out...)
}

// rendered is an *Error said another way, still unwrapping to it.
type rendered struct {
	text string
	fe   *Error
}

func (r rendered) Error() string { return r.text }
func (r rendered) Unwrap() error { return r.fe }

// Each calls f once for each error joined in err: with the *Error it is
// (other nil), or with nil and the error itself when it names no field.
func Each(err error, f func(fe *Error, other error)) {
	if err == nil {
		return
	}
	if fe, ok := err.(*Error); ok {
		f(fe, nil)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			Each(e, f)
		}
		return
	}
	f(nil, err)
}
