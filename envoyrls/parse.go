package envoyrls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/peerlimit/peerlimit/internal/yamlconf"
	"github.com/peerlimit/peerlimit/limiter"
)

// Error is one problem in a configuration file, at a line.
type Error struct {
	File string
	Line int // 1-based; 0 when the problem is the file as a whole
	// Where names the domain and descriptor, when the problem is inside one.
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

const (
	// MaxFileBytes caps one configuration file, and MaxFiles the files of
	// a directory: a mistaken path must not be read whole.
	MaxFileBytes = 4 << 20
	MaxFiles     = 1000
	// maxErrors bounds the errors one load reports.
	maxErrors = yamlconf.MaxErrors
	// maxDescriptors bounds the descriptors of one load, counting an
	// alias once per use: YAML aliases could otherwise expand a small
	// file into billions of descriptors.
	maxDescriptors = 100_000
	// maxDepth bounds descriptor nesting: Envoy descriptors have a handful
	// of entries, and a deeper file is a mistake (or an attack on the
	// parser's stack).
	maxDepth = 32
)

// Load reads the configuration at path: one YAML file, or a directory
// whose *.yaml and *.yml files (not hidden ones, not subdirectories) are
// read in name order. Each YAML document is one domain; documents are
// separated by "---", so one file may hold several domains. A domain
// defined twice is an error.
//
// check, if not nil, is asked about every rate limit as a request would
// be (the node passes its store's Validate), so that a limit the node
// cannot serve (a log over --max-log-limit, a window over --max-window) is
// refused at load, not on every request. Every problem found is reported,
// each as an *Error, joined.
func Load(path string, check func(limiter.Request) error) (*Config, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("envoy rls config: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		if files, err = listDir(path); err != nil {
			return nil, err
		}
	}
	p := &parser{check: check, cfg: &Config{Source: path, byName: map[string]*Domain{}}}
	sum := sha256.New()
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(sum, "%d:%s%d:", len(f), f, len(data))
		sum.Write(data)
		p.file(f, data)
	}
	if err := p.result(); err != nil {
		return nil, err
	}
	p.cfg.Digest = "sha256:" + hex.EncodeToString(sum.Sum(nil))
	return p.cfg, nil
}

// Parse reads one file's contents, named file in messages; see Load.
func Parse(file string, data []byte, check func(limiter.Request) error) (*Config, error) {
	p := &parser{check: check, cfg: &Config{Source: file, byName: map[string]*Domain{}}}
	p.file(file, data)
	if err := p.result(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	p.cfg.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return p.cfg, nil
}

func listDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoy rls config: %w", err)
	}
	var files []string
	for _, e := range ents {
		name := e.Name()
		// Hidden entries include Kubernetes' ConfigMap machinery (..data,
		// ..2024_…); its files appear as symlinks, which are followed.
		if strings.HasPrefix(name, ".") || (!strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".yml")) {
			continue
		}
		full := filepath.Join(dir, name)
		if st, err := os.Stat(full); err != nil || st.IsDir() {
			continue
		}
		files = append(files, full)
	}
	switch {
	case len(files) == 0:
		return nil, fmt.Errorf("envoy rls config: %s has no .yaml or .yml files", dir)
	case len(files) > MaxFiles:
		return nil, fmt.Errorf("envoy rls config: %s has %d files; the maximum is %d", dir, len(files), MaxFiles)
	}
	slices.Sort(files)
	return files, nil
}

func readFile(path string) ([]byte, error) {
	return yamlconf.ReadFile("envoy rls config", path, MaxFileBytes)
}

type parser struct {
	check func(limiter.Request) error
	cfg   *Config
	errs  []error
	name  string // the file being read
	// descriptorCount counts the descriptors read, aliases once per use.
	descriptorCount int
}

func (p *parser) fail(line int, where, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.name, Line: line, Where: where, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) result() error {
	if len(p.errs) == 0 {
		for i, r := range p.cfg.rules {
			r.finish(i)
		}
		return nil
	}
	return yamlconf.Join(p.errs, func(n int) error { return &Error{File: p.name, Msg: fmt.Sprintf("and %d more errors", n)} })
}

// file reads every document of one file, each a domain.
func (p *parser) file(name string, data []byte) {
	p.name = name
	if line, off, bad := yamlconf.BadUTF8(data); bad {
		p.fail(line, "", "not UTF-8 text (byte %d)", off)
		return
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line, msg := yamlconf.SyntaxError(err)
			p.fail(line, "", "%s", msg)
			return
		}
		docs++
		root := &doc
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
		if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
			// The document's line: its "---", not the line after.
			p.fail(doc.Line, "", "empty document: want a mapping with domain and descriptors")
			continue
		}
		p.domain(deref(root))
	}
	if docs == 0 {
		// Refused rather than read as "no limits": a reload that catches
		// a file half-written would otherwise drop every limit at once.
		p.fail(0, "", "no domain defined (an empty file is refused, so that a truncated write cannot remove every limit)")
	}
}

// deref follows an alias (*defaults) to its anchor. An alias is walked
// once per place it appears; maxDescriptors bounds what that can expand
// to.
func deref(n *yaml.Node) *yaml.Node { return yamlconf.Deref(n) }

// fields walks a mapping's pairs, refusing non-string and repeated field
// names and merge keys, and calls f with each field.
func (p *parser) fields(m *yaml.Node, where string, f func(name string, k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := deref(m.Content[i]), deref(m.Content[i+1])
		switch {
		case k.Kind != yaml.ScalarNode:
			p.fail(k.Line, where, "field names must be strings")
			continue
		case k.Value == "<<" && k.ShortTag() == "!!merge":
			p.fail(k.Line, where, "merge keys (<<) are not supported; give each descriptor its fields")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.fail(k.Line, where, "%s given twice (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		f(k.Value, k, v)
	}
}

func (p *parser) domain(root *yaml.Node) {
	if root.Kind != yaml.MappingNode {
		p.fail(root.Line, "", "want a mapping with domain and descriptors, e.g. {domain: edge, descriptors: [...]}")
		return
	}
	d := &Domain{File: p.name, Line: root.Line, root: level{keys: map[string]*keyNodes{}}}
	var descs *yaml.Node
	p.fields(root, "", func(name string, k, v *yaml.Node) {
		switch name {
		case "domain":
			if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Value == "" {
				p.fail(v.Line, "", "domain must be a non-empty string")
				return
			}
			d.Name, d.Line = v.Value, k.Line
		case "descriptors":
			descs = v
		default:
			p.fail(k.Line, "", "unknown field %q; want domain and descriptors", name)
		}
	})
	if d.Name == "" {
		if !hasField(root, "domain") {
			p.fail(root.Line, "", "domain is missing")
		}
		return
	}
	where := fmt.Sprintf("domain %q", d.Name)
	if prev := p.cfg.byName[d.Name]; prev != nil {
		p.fail(d.Line, where, "defined twice (first at %s:%d)", prev.File, prev.Line)
		return
	}
	d.index = len(p.cfg.domains)
	p.cfg.byName[d.Name] = d
	p.cfg.domains = append(p.cfg.domains, d)
	if descs != nil {
		p.descriptors(d, &d.root, descs, "", "", 1)
	}
}

// hasField reports whether mapping m has the field name. yaml.v3 numbers
// parsed lines from 1, so fieldLine's default of 0 means absent.
func hasField(m *yaml.Node, name string) bool {
	return fieldLine(m, name, 0) > 0
}

// descriptors reads one level's list into lvl. chain names the parent
// descriptors ("" at the top) and path is the parent's statistics path.
func (p *parser) descriptors(d *Domain, lvl *level, list *yaml.Node, chain, path string, depth int) {
	where := p.where(d, chain)
	if list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null" {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.fail(list.Line, where, "descriptors must be a list of {key, value, rate_limit, descriptors}")
		return
	}
	if depth > maxDepth {
		p.fail(list.Line, where, "descriptors nested deeper than %d levels", maxDepth)
		return
	}
	for _, item := range list.Content {
		if p.descriptorCount++; p.descriptorCount > maxDescriptors {
			if p.descriptorCount == maxDescriptors+1 {
				p.fail(item.Line, where, "more than %d descriptors (aliases count once per use)", maxDescriptors)
			}
			return
		}
		p.descriptor(d, lvl, deref(item), chain, path, depth)
	}
}

// where names a domain and descriptor chain for messages.
func (p *parser) where(d *Domain, chain string) string {
	if chain == "" {
		return fmt.Sprintf("domain %q", d.Name)
	}
	return fmt.Sprintf("domain %q, descriptor %s", d.Name, chain)
}

// descriptor reads one descriptor and adds it to lvl.
func (p *parser) descriptor(d *Domain, lvl *level, m *yaml.Node, parentChain, parentPath string, depth int) {
	parentWhere := p.where(d, parentChain)
	if m.Kind != yaml.MappingNode {
		p.fail(m.Line, parentWhere, "a descriptor must be a mapping with key and optionally value, rate_limit, descriptors")
		return
	}
	f := p.readDescriptor(m, parentWhere)
	if f.key == "" {
		if !hasField(m, "key") {
			p.fail(m.Line, parentWhere, "key is missing")
		}
		return
	}
	chain, path := f.names(parentChain, parentPath)
	where := p.where(d, chain)
	if !p.place(lvl, &f, where) {
		return
	}
	p.descriptorRule(d, &f, where, path)
	if f.children != nil {
		n := f.n
		n.children = &level{keys: map[string]*keyNodes{}}
		p.descriptors(d, n.children, f.children, chain, path, depth+1)
		if len(n.children.keys) == 0 {
			n.children = nil
		}
	}
}

// descriptorFields is one descriptor's fields as read, each checked on
// its own; how they fit together is checked by the steps that use them.
type descriptorFields struct {
	n       *node // the descriptor, its value set; placed and given its rule later
	key     string
	keyLine int // 0 when key is absent or not a non-empty string
	// The fields read by later steps; nil when absent.
	rl, children, algo, shadow *yaml.Node
}

// readDescriptor reads descriptor m's fields, reporting the unknown
// ones and those of the wrong kind.
func (p *parser) readDescriptor(m *yaml.Node, where string) descriptorFields {
	f := descriptorFields{n: &node{line: m.Line}}
	p.fields(m, where, func(name string, k, v *yaml.Node) {
		switch name {
		case "key":
			if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Value == "" {
				p.fail(v.Line, where, "key must be a non-empty string")
				return
			}
			f.key, f.keyLine = v.Value, k.Line
		case "value":
			// Any scalar, as written: Envoy's values are strings, and
			// "value: 0100" means the text 0100, not the number 64.
			switch {
			case v.Kind != yaml.ScalarNode:
				p.fail(v.Line, where, "value must be a string")
			case v.ShortTag() != "!!null":
				f.n.value = v.Value
			}
		case "rate_limit":
			f.rl = v
		case "descriptors":
			f.children = v
		case "algorithm":
			f.algo = v
		case "shadow_mode":
			f.shadow = v
		case "detailed_metric":
			// Accepted for envoyproxy/ratelimit files; no effect: metrics
			// are labelled by descriptor path, never by request values,
			// so their number stays bounded by the configuration.
			p.boolean(v, where, name)
		default:
			p.fail(k.Line, where, "unknown field %q; want key, value, rate_limit, algorithm, shadow_mode, detailed_metric, descriptors", name)
		}
	})
	return f
}

// names returns the descriptor's chain, naming it in messages after its
// parents (key=value), and its statistics path (key_value, after its
// parent's and a dot).
func (f *descriptorFields) names(parentChain, parentPath string) (chain, path string) {
	label := f.key
	if f.n.value != "" {
		label += "=" + f.n.value
	}
	chain = label
	if parentChain != "" {
		chain = parentChain + " / " + label
	}
	path = f.key
	if f.n.value != "" {
		path += "_" + f.n.value
	}
	if parentPath != "" {
		path = parentPath + "." + path
	}
	return chain, path
}

// place adds the descriptor to lvl and reports whether it could.
func (p *parser) place(lvl *level, f *descriptorFields, where string) bool {
	// Place it, refusing a second descriptor with the same key and value.
	kn := lvl.keys[f.key]
	if kn == nil {
		kn = &keyNodes{exact: map[string]*node{}}
		lvl.keys[f.key] = kn
	}
	if prev := sameValue(kn, f.n); prev != nil {
		p.fail(f.keyLine, where, "defined twice at this level (first at line %d)", prev.line)
		return false
	}
	insertNode(kn, f.n)
	return true
}

// sameValue returns the node of kn with n's value, if there is one. It
// sets n.prefix for a value ending in "*", which insertNode orders by.
func sameValue(kn *keyNodes, n *node) *node {
	var prev *node
	switch {
	case n.value == "":
		prev = kn.any
	case strings.HasSuffix(n.value, "*"):
		n.prefix = strings.TrimSuffix(n.value, "*")
		for _, q := range kn.prefixes {
			if q.value == n.value {
				prev = q
			}
		}
	default:
		prev = kn.exact[n.value]
	}
	return prev
}

// insertNode adds n, whose value kn does not hold yet, to kn.
func insertNode(kn *keyNodes, n *node) {
	switch {
	case n.value == "":
		kn.any = n
	case n.prefix != "" || n.value == "*":
		// Longest prefix first, so the first that matches is the most
		// specific; equal lengths keep the file's order.
		i := len(kn.prefixes)
		for i > 0 && len(kn.prefixes[i-1].prefix) < len(n.prefix) {
			i--
		}
		kn.prefixes = slices.Insert(kn.prefixes, i, n)
	default:
		kn.exact[n.value] = n
	}
}

// descriptorRule gives the placed descriptor its rule: its rate_limit,
// with the algorithm and shadow_mode given beside it, and asks the node
// whether it can serve the rule.
func (p *parser) descriptorRule(d *Domain, f *descriptorFields, where, path string) {
	n := f.n
	if f.rl != nil {
		n.rule = p.rateLimit(d, f.rl, where, path)
	}
	if f.algo != nil {
		p.setAlgorithm(f, where)
	}
	if f.shadow != nil {
		p.setShadowMode(f, where)
	}
	if n.rule != nil && !n.rule.Unlimited && p.check != nil {
		p.checkRule(n.rule, f.rl, f.algo, where)
	}
}

// setAlgorithm applies the descriptor's algorithm to its rule. A
// rate_limit that failed to read has no rule and is not reported again.
func (p *parser) setAlgorithm(f *descriptorFields, where string) {
	a, ok := p.algorithm(f.algo, where)
	r := f.n.rule
	switch {
	case !ok:
	case r == nil && f.rl == nil:
		p.fail(f.algo.Line, where, "algorithm needs a rate_limit on the same descriptor")
	case r != nil && r.Unlimited:
		p.fail(f.algo.Line, where, "algorithm has no use with unlimited: true")
	case r != nil:
		r.Algorithm = a
	}
}

// setShadowMode applies the descriptor's shadow_mode to its rule. A
// rate_limit that failed to read has no rule and is not reported again.
func (p *parser) setShadowMode(f *descriptorFields, where string) {
	on, ok := p.boolean(f.shadow, where, "shadow_mode")
	r := f.n.rule
	switch {
	case !ok:
	case r == nil && f.rl == nil:
		p.fail(f.shadow.Line, where, "shadow_mode applies to this descriptor's own rate_limit, and it has none (it does not reach nested descriptors)")
	case r != nil:
		r.ShadowMode = on
	}
}

// rateLimit reads a rate_limit block.
func (p *parser) rateLimit(d *Domain, m *yaml.Node, where, path string) *Rule {
	if m.Kind != yaml.MappingNode {
		p.fail(m.Line, where, "rate_limit must be a mapping, e.g. {unit: minute, requests_per_unit: 100}")
		return nil
	}
	errs := len(p.errs)
	b := &rateLimitBlock{m: m, where: where,
		r: &Rule{Domain: d.Name, Path: path, File: p.name, Line: m.Line, UnitMultiplier: 1}}
	p.fields(m, where, func(name string, k, v *yaml.Node) { p.rateLimitField(b, name, k, v) })
	p.checkRateLimit(b)
	if len(p.errs) > errs {
		return nil
	}
	if !b.r.Unlimited && !p.setWindow(b) {
		return nil
	}
	p.cfg.rules = append(p.cfg.rules, b.r)
	return b.r
}

// rateLimitBlock is a rate_limit block being read: the rule so far, and
// what the checks after its fields need.
type rateLimitBlock struct {
	m        *yaml.Node
	where    string
	r        *Rule
	unitLine int
	haveRPU  bool
}

// rateLimitField reads one field of a rate_limit block into its rule.
func (p *parser) rateLimitField(b *rateLimitBlock, name string, k, v *yaml.Node) {
	r, where := b.r, b.where
	switch name {
	case "unit":
		b.unitLine = k.Line
		if u, ok := p.unit(v, where); ok {
			r.Unit = u
		}
	case "requests_per_unit":
		n, ok := p.uint32(v, where, name)
		if !ok {
			return
		}
		r.RequestsPerUnit, b.haveRPU = n, true
	case "unit_multiplier":
		n, ok := p.uint32(v, where, name)
		if !ok {
			return
		}
		if n == 0 {
			p.fail(v.Line, where, "unit_multiplier must be at least 1")
			return
		}
		r.UnitMultiplier = n
	case "unlimited":
		r.Unlimited, _ = p.boolean(v, where, name)
	case "name":
		if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Value == "" {
			p.fail(v.Line, where, "name must be a non-empty string")
			return
		}
		r.Name = v.Value
	case "replaces":
		r.Replaces = p.replaces(v, where)
	default:
		p.fail(k.Line, where, "unknown field %q in rate_limit; want unit, requests_per_unit, unit_multiplier, unlimited, name, replaces", name)
	}
}

// unit reads a rate_limit's unit.
func (p *parser) unit(v *yaml.Node, where string) (Unit, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		p.fail(v.Line, where, "unit must be one of second, minute, hour, day, week, month, year")
		return 0, false
	}
	u := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(v.Value)]
	if _, ok := UnitDuration(Unit(u)); !ok {
		p.fail(v.Line, where, "unknown unit %q; want second, minute, hour, day, week, month or year", v.Value)
		return 0, false
	}
	return Unit(u), true
}

// checkRateLimit checks the block's fields together, once all are read.
func (p *parser) checkRateLimit(b *rateLimitBlock) {
	m, r, where := b.m, b.r, b.where
	for _, name := range r.Replaces {
		if name == r.Name {
			p.fail(m.Line, where, "rate_limit replaces itself (%q)", name)
		}
	}
	if r.Unlimited {
		for _, f := range []string{"unit", "requests_per_unit", "unit_multiplier"} {
			if hasField(m, f) {
				p.fail(m.Line, where, "%s has no use with unlimited: true", f)
			}
		}
	} else {
		if b.unitLine == 0 && !hasField(m, "unit") {
			p.fail(m.Line, where, "unit is missing (second, minute, hour, day, week, month or year)")
		}
		if !b.haveRPU && !hasField(m, "requests_per_unit") {
			p.fail(m.Line, where, "requests_per_unit is missing (0 refuses every request)")
		}
	}
}

// setWindow sets the rule's window, unit_multiplier units, and reports
// whether it fits in a time.Duration.
func (p *parser) setWindow(b *rateLimitBlock) bool {
	r := b.r
	unit, _ := UnitDuration(r.Unit)
	if int64(r.UnitMultiplier) > math.MaxInt64/int64(unit) {
		p.fail(b.unitLine, b.where, "a window of %d %ss is too long", r.UnitMultiplier, strings.ToLower(r.Unit.String()))
		return false
	}
	r.Window = unit * time.Duration(r.UnitMultiplier)
	return true
}

// checkRule asks the node whether it can serve the rule, and names the
// line of the field it refuses.
func (p *parser) checkRule(r *Rule, rl, algo *yaml.Node, where string) {
	err := p.check(limiter.Request{Key: "envoy", Limit: int64(max(r.RequestsPerUnit, 1)), Window: r.Window, Algorithm: r.Algorithm, Hits: 1})
	if err == nil {
		return
	}
	line, what := rl.Line, err.Error()
	var ae *limiter.ArgumentError
	if errors.As(err, &ae) {
		what = ae.Reason
		switch ae.Field {
		case "limit":
			line, what = fieldLine(rl, "requests_per_unit", rl.Line), "requests_per_unit "+what
		case "window_ms":
			line, what = fieldLine(rl, "unit", rl.Line), fmt.Sprintf("the window (%s) in milliseconds %s", r.Window, what)
		case "algorithm":
			if algo != nil {
				line = algo.Line
			}
			what = "algorithm " + what
		}
	}
	p.fail(line, where, "beyond this node's limits: %s", what)
}

func fieldLine(m *yaml.Node, name string, def int) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name {
			return m.Content[i].Line
		}
	}
	return def
}

func (p *parser) replaces(v *yaml.Node, where string) []string {
	if v.Kind != yaml.SequenceNode {
		p.fail(v.Line, where, "replaces must be a list of {name: ...}")
		return nil
	}
	var out []string
	for _, item := range v.Content {
		item = deref(item)
		if item.Kind != yaml.MappingNode {
			p.fail(item.Line, where, "replaces must be a list of {name: ...}")
			continue
		}
		var name string
		p.fields(item, where, func(f string, k, fv *yaml.Node) {
			if f != "name" {
				p.fail(k.Line, where, "unknown field %q in replaces; want name", f)
				return
			}
			if fv.Kind != yaml.ScalarNode || fv.ShortTag() == "!!null" || fv.Value == "" {
				p.fail(fv.Line, where, "replaces: name must be a non-empty string")
				return
			}
			name = fv.Value
		})
		if name == "" {
			if !hasField(item, "name") {
				p.fail(item.Line, where, "replaces: name is missing")
			}
			continue
		}
		out = append(out, name)
	}
	return out
}

func (p *parser) algorithm(v *yaml.Node, where string) (limiter.Algorithm, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" || v.Value == "" {
		p.fail(v.Line, where, "algorithm must be SLIDING_WINDOW_COUNTER or SLIDING_WINDOW_LOG")
		return 0, false
	}
	a, err := limiter.ParseAlgorithm(v.Value)
	if err != nil {
		p.fail(v.Line, where, "unknown algorithm %q; want SLIDING_WINDOW_COUNTER or SLIDING_WINDOW_LOG", v.Value)
		return 0, false
	}
	return a, true
}

func (p *parser) uint32(v *yaml.Node, where, field string) (uint32, bool) {
	n, msg, ok := yamlconf.Int(v, field, 32)
	if !ok {
		p.fail(v.Line, where, "%s", msg)
		return 0, false
	}
	if n < 0 || n > math.MaxUint32 {
		p.fail(v.Line, where, "%s must be between 0 and %d, got %d", field, uint32(math.MaxUint32), n)
		return 0, false
	}
	return uint32(n), true
}

func (p *parser) boolean(v *yaml.Node, where, field string) (bool, bool) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		p.fail(v.Line, where, "%s must be true or false, got %q", field, v.Value)
		return false, false
	}
	return b, true
}
