// Package policy reads named rate-limit policies from an operator's file.
// Instead of sending its numbers with every request, a client names a
// policy ("login"), and the node that receives the request fills in the
// limit, window and algorithm the file gives it:
//
//	login:   {algorithm: SLIDING_WINDOW_LOG, limit: 5, window: 1m}
//	search:  {limit: 100, window: 1s}
//	monthly: {limit: 100000, calendar: month, time_zone: Europe/Paris}
//	upload:  {algorithm: GCRA, limit: 10, window: 1s, burst: 50}
//	conns:   {algorithm: CONCURRENCY, limit: 20, window: 30s}
//
// A GCRA policy is a token bucket refilled at limit per window, holding
// burst hits (limit when absent). A CONCURRENCY policy allows limit
// requests in flight, each slot freeing itself window after it was taken
// if it is never released.
//
// A policy with calendar (minute, hour, day, week, month or year) is
// calendar-aligned in its time_zone (UTC by default): its count starts
// again at each boundary, and it takes no window.
//
// The file is YAML; JSON is YAML too, so {"login": {"limit": 5, ...}} reads
// the same. Parsing is strict, and every error names the file and line
// ("policies.yaml:12: policy "login": limit must be positive"), so that a
// bad file is refused at start and on reload instead of being half-applied.
//
// A Registry holds the current Set behind an atomic pointer: lookups take
// no lock, and Reload swaps in a new Set or, on error, keeps the old one.
package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/peerlimit/peerlimit/internal/yamlconf"
	"github.com/peerlimit/peerlimit/limiter"
)

// Policy is one named limit: Limit hits per Window, counted by Algorithm,
// or per period of Calendar.
type Policy struct {
	Name      string
	Algorithm limiter.Algorithm
	Limit     int64
	Window    time.Duration // 0 with a Calendar
	Calendar  limiter.Calendar
	// Burst is a GCRA policy's bucket size; 0 means Limit.
	Burst int64
	// Line is where the policy is defined in its file, for messages.
	Line int
}

// Request returns the limiter request for key under p, consuming hits.
func (p Policy) Request(key string, hits int64) limiter.Request {
	return limiter.Request{Key: key, Limit: p.Limit, Window: p.Window, Algorithm: p.Algorithm, Calendar: p.Calendar,
		Burst: p.Burst, Hits: hits}
}

// Probe is the request that checking p against a node's caps asks
// about: a check of one hit, or for a CONCURRENCY policy, which takes no
// check of hits, the ACQUIRE of one slot.
func (p Policy) Probe() limiter.Request {
	r := p.Request("policy", 1)
	if p.Algorithm == limiter.Concurrency {
		r.Op = limiter.OpAcquire
	}
	return r
}

// Set is the policies of one file, immutable once parsed and so safe for
// concurrent use.
type Set struct {
	// File is the name the Set was parsed under.
	File string
	// Digest is "sha256:" and the hex SHA-256 of the file's bytes: nodes
	// that report the same digest resolve every policy alike.
	Digest string
	byName map[string]Policy
}

// Lookup returns the policy called name.
func (s *Set) Lookup(name string) (Policy, bool) {
	p, ok := s.byName[name]
	return p, ok
}

// Len is the number of policies.
func (s *Set) Len() int { return len(s.byName) }

// All returns the policies sorted by name.
func (s *Set) All() []Policy {
	out := make([]Policy, 0, len(s.byName))
	for _, p := range s.byName {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Policy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Error is one problem in a policy file, at a line; Where names the
// policy, when the problem is inside one. It reads like a compiler's:
// "policies.yaml:12: policy "login": limit must be positive".
type Error = yamlconf.Error

// maxErrors bounds the errors one parse reports.
const maxErrors = yamlconf.MaxErrors

// MaxNameBytes caps a policy's name.
const MaxNameBytes = 128

// validName is what a policy may be called: names travel in requests and
// appear in logs and URLs, so no spaces or control characters.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]*$`)

// Parse reads policies from data, the contents of file (used in messages
// only). check, if not nil, is asked about each policy as a request would
// be (the node passes its store's Validate), so that a policy beyond the
// node's caps (a log limit over --max-log-limit, a window over
// --max-window) is refused when the file is loaded, not on every request.
//
// Every problem found is reported, each as an *Error, joined.
func Parse(file string, data []byte, check func(limiter.Request) error) (*Set, error) {
	p := parser{file: file, check: check}
	set := p.parse(data)
	if len(p.errs) > 0 {
		return nil, yamlconf.Join(p.errs, func(n int) error { return &Error{File: file, Msg: fmt.Sprintf("and %d more errors", n)} })
	}
	sum := sha256.Sum256(data)
	set.File, set.Digest = file, "sha256:"+hex.EncodeToString(sum[:])
	return set, nil
}

type parser struct {
	file  string
	check func(limiter.Request) error
	errs  []error
}

func (p *parser) fail(line int, policy, format string, args ...any) {
	where := ""
	if policy != "" {
		where = fmt.Sprintf("policy %q", policy)
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Where: where, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) parse(data []byte) *Set {
	set := &Set{byName: map[string]Policy{}}
	if line, off, why, bad := yamlconf.BadText(data); bad {
		p.fail(line, "", "%s (byte %d)", why, off)
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			// An empty file is refused rather than read as "no policies": a
			// reload that catches the file half-written would otherwise drop
			// every policy at once.
			p.fail(0, "", "no policies defined (an empty file is refused, so that a truncated write cannot remove every policy)")
			return nil
		}
		line, msg := yamlconf.SyntaxError(err)
		p.fail(line, "", "%s", msg)
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			line = 0
		}
		p.fail(line, "", "more than one YAML document; put every policy in one mapping")
		return nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	root = deref(root)
	if root.Kind != yaml.MappingNode {
		if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
			p.fail(root.Line, "", "no policies defined (an empty file is refused, so that a truncated write cannot remove every policy)")
		} else {
			p.fail(root.Line, "", "want a mapping of policy names to policies, e.g. login: {limit: 5, window: 1m}")
		}
		return nil
	}
	if len(root.Content) == 0 {
		p.fail(root.Line, "", "no policies defined (an empty file is refused, so that a truncated write cannot remove every policy)")
		return nil
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		kn, vn := root.Content[i], deref(root.Content[i+1])
		name, ok := p.name(kn)
		if !ok {
			continue
		}
		if prev, dup := set.byName[name]; dup {
			p.fail(kn.Line, name, "defined twice (first at line %d)", prev.Line)
			continue
		}
		if pol, ok := p.policy(name, kn.Line, vn); ok {
			set.byName[name] = pol
		} else {
			// Remember the name anyway, so a later duplicate is reported.
			set.byName[name] = Policy{Name: name, Line: kn.Line}
		}
	}
	if len(p.errs) > 0 {
		return nil
	}
	return set
}

// deref follows an alias (*defaults) to its anchor. Policies are two
// levels deep, so aliases cannot multiply into a large expansion here.
func deref(n *yaml.Node) *yaml.Node { return yamlconf.Deref(n) }

func (p *parser) name(kn *yaml.Node) (string, bool) {
	kn = deref(kn)
	if kn.Kind != yaml.ScalarNode {
		p.fail(kn.Line, "", "a policy name must be a string")
		return "", false
	}
	name := kn.Value
	switch {
	case kn.Value == "<<" && kn.ShortTag() == "!!merge":
		p.fail(kn.Line, "", "merge keys (<<) are not supported; give each policy its fields")
		return "", false
	case len(name) > MaxNameBytes:
		p.fail(kn.Line, "", "policy name is %d bytes; the maximum is %d", len(name), MaxNameBytes)
		return "", false
	case !validName.MatchString(name):
		p.fail(kn.Line, "", "invalid policy name %q: use letters, digits and _ . : / - (starting with a letter or digit)", name)
		return "", false
	}
	return name, true
}

func (p *parser) policy(name string, line int, vn *yaml.Node) (Policy, bool) {
	pol := Policy{Name: name, Line: line}
	if vn.Kind != yaml.MappingNode {
		p.fail(vn.Line, name, "want a mapping with limit, window and optionally algorithm and burst, e.g. {limit: 5, window: 1m}")
		return pol, false
	}
	errs := len(p.errs)
	seen := map[string]int{}
	var cal calendarFields
	for i := 0; i+1 < len(vn.Content); i += 2 {
		fk, fv := deref(vn.Content[i]), deref(vn.Content[i+1])
		field := fk.Value
		if fk.Kind != yaml.ScalarNode {
			p.fail(fk.Line, name, "field names must be strings")
			continue
		}
		if first, dup := seen[field]; dup {
			p.fail(fk.Line, name, "%s given twice (first at line %d)", field, first)
			continue
		}
		seen[field] = fk.Line
		p.field(&pol, &cal, fk, fv)
	}
	if _, ok := seen["limit"]; !ok {
		p.fail(vn.Line, name, "limit is missing")
	}
	if _, ok := seen["calendar"]; ok {
		p.calendar(&pol, cal, seen)
	} else if _, ok := seen["window"]; !ok {
		p.fail(vn.Line, name, "window is missing")
	} else if line, ok := seen["time_zone"]; ok {
		p.fail(line, name, "time_zone is only for a calendar policy: give calendar (minute, hour, day, week, month or year) instead of window")
	}
	if line, ok := seen["burst"]; ok && pol.Algorithm != limiter.GCRA {
		p.fail(line, name, "burst is only for algorithm GCRA, not %s", pol.Algorithm)
	}
	if len(p.errs) > errs {
		return pol, false
	}
	if p.check != nil && !p.withinCaps(pol, vn.Line, seen) {
		return pol, false
	}
	return pol, true
}

// calendarFields are a policy's calendar and time_zone as read, made
// into its Calendar once every field is read (calendar).
type calendarFields struct {
	unit limiter.CalendarUnit
	zone string
}

// calendar makes pol calendar-aligned from cal, refusing what a
// calendar policy may not have: a window (its period is the window), a
// log (it would hold every hit of the period), a zone not in the time
// zone database. seen maps fields to their lines.
func (p *parser) calendar(pol *Policy, cal calendarFields, seen map[string]int) {
	if line, ok := seen["window"]; ok {
		p.fail(line, pol.Name, "window must not be given with calendar, whose period is the window")
	}
	switch pol.Algorithm {
	case limiter.SlidingWindowCounter:
	case limiter.SlidingWindowLog:
		p.fail(seen["algorithm"], pol.Name, "a calendar policy is counted by SLIDING_WINDOW_COUNTER only: a log would hold every hit of the period")
	default:
		p.fail(seen["algorithm"], pol.Name, "a calendar policy is counted by SLIDING_WINDOW_COUNTER only, not %s, which has no calendar periods", pol.Algorithm)
	}
	if cal.unit == limiter.NoCalendar {
		return // reported by field
	}
	c, err := limiter.NewCalendar(cal.unit, cal.zone)
	if err != nil {
		var ae *limiter.ArgumentError
		line := seen["calendar"]
		if errors.As(err, &ae) && ae.Field == "time_zone" {
			line = seen["time_zone"]
			err = errors.New(ae.Reason)
		}
		p.fail(line, pol.Name, "time_zone %v", err)
		return
	}
	pol.Calendar = c
}

// field sets the field of pol that fk names to fv, or reports why not;
// calendar and time_zone go to cal.
func (p *parser) field(pol *Policy, cal *calendarFields, fk, fv *yaml.Node) {
	name := pol.Name
	switch field := fk.Value; field {
	case "calendar":
		u, err := limiter.ParseCalendarUnit(fv.Value)
		if !isString(fv) || err != nil || u == limiter.NoCalendar {
			p.fail(fv.Line, name, "calendar must be minute, hour, day, week, month or year, got %q", fv.Value)
			return
		}
		cal.unit = u
	case "time_zone":
		if !isString(fv) || fv.Value == "" {
			p.fail(fv.Line, name, "time_zone must be an IANA time zone name, e.g. Europe/Paris, got %q", fv.Value)
			return
		}
		cal.zone = fv.Value
	case "algorithm":
		if a, ok := p.algorithm(name, fv); ok {
			pol.Algorithm = a
		}
	case "limit":
		if n, ok := p.positive(name, fv, "limit", ""); ok {
			pol.Limit = n
		}
	case "window":
		if w, ok := p.window(name, fv); ok {
			pol.Window = w
		}
	case "burst":
		if n, ok := p.positive(name, fv, "burst", "; leave it out for a bucket of limit hits"); ok {
			pol.Burst = n
		}
	default:
		p.fail(fk.Line, name, "unknown field %q; want limit, window (or calendar and time_zone), algorithm and burst", field)
	}
}

// positive reads fv as field, a positive integer of policy name, or fails
// saying why (hint follows the "must be positive" reason).
func (p *parser) positive(name string, fv *yaml.Node, field, hint string) (int64, bool) {
	n, msg, ok := yamlconf.Int(fv, field, 64)
	if !ok {
		p.fail(fv.Line, name, "%s", msg)
		return 0, false
	}
	if n <= 0 {
		p.fail(fv.Line, name, "%s must be positive, got %d%s", field, n, hint)
		return 0, false
	}
	return n, true
}

const algorithmChoice = "SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG, GCRA or CONCURRENCY"

// algorithm reads policy name's algorithm field.
func (p *parser) algorithm(name string, fv *yaml.Node) (limiter.Algorithm, bool) {
	if !isString(fv) {
		p.fail(fv.Line, name, "algorithm must be %s", algorithmChoice)
		return 0, false
	}
	a, err := limiter.ParseAlgorithm(fv.Value)
	if err != nil || fv.Value == "" {
		p.fail(fv.Line, name, "unknown algorithm %q; want %s", fv.Value, algorithmChoice)
		return 0, false
	}
	return a, true
}

// window reads policy name's window field.
func (p *parser) window(name string, fv *yaml.Node) (time.Duration, bool) {
	if !isString(fv) {
		p.fail(fv.Line, name, "window must be a duration with its unit, e.g. \"1m\" or \"500ms\", got %q", fv.Value)
		return 0, false
	}
	w, err := time.ParseDuration(fv.Value)
	switch {
	case err != nil:
		p.fail(fv.Line, name, "window %q is not a duration; write e.g. \"1m\", \"1h30m\" or \"500ms\"", fv.Value)
		return 0, false
	case w <= 0:
		p.fail(fv.Line, name, "window must be positive, got %s", fv.Value)
		return 0, false
	case w%time.Millisecond != 0:
		p.fail(fv.Line, name, "window %s is not a whole number of milliseconds", fv.Value)
		return 0, false
	}
	return w, true
}

// withinCaps asks p.check about pol as a request would be, and reports
// a refusal at the line of the field refused (seen maps fields to their
// lines), or of the policy (line) when check names no field.
func (p *parser) withinCaps(pol Policy, line int, seen map[string]int) bool {
	err := p.check(pol.Probe())
	if err == nil {
		return true
	}
	what := err.Error()
	var ae *limiter.ArgumentError
	if errors.As(err, &ae) {
		what = ae.Reason
		switch ae.Field {
		case "limit":
			line, what = seen["limit"], "limit "+what
		case "window_ms":
			line, what = seen["window"], "window (in ms) "+what
		case "algorithm", "burst":
			line, what = seen[ae.Field], ae.Field+" "+what
		case "calendar", "time_zone":
			line, what = seen[ae.Field], ae.Field+" "+what
		}
	}
	p.fail(line, pol.Name, "beyond this node's limits: %s", what)
	return false
}

// isString reports whether n is a string scalar: a quoted or plain
// scalar that YAML did not resolve to a number, bool or null.
func isString(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str"
}
