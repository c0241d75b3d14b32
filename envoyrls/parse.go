package envoyrls

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/peerlimit/peerlimit/internal/regularfile"
	"github.com/peerlimit/peerlimit/internal/yamlconf"
	"github.com/peerlimit/peerlimit/limiter"
)

// Error is one problem in a configuration file, at a line; Where names
// the domain and descriptor, when the problem is inside one. It reads
// like a compiler's: `rls.yaml:12: domain "messaging", descriptor
// to_number: requests_per_unit must be a whole number`.
type Error = yamlconf.Error

const (
	// MaxFileBytes caps one configuration file, and MaxFiles the files
	// under a directory, at any depth: a mistaken path (a symlink to /)
	// must not be read whole.
	MaxFileBytes = 4 << 20
	MaxFiles     = 1000
	// MaxTotalBytes caps the files of a directory together: 1000 files
	// of 4 MiB each would be 4 GiB read into memory on every reload. Real
	// configurations are kilobytes.
	MaxTotalBytes = 32 << 20
	// maxErrors bounds the errors one load reports.
	maxErrors = yamlconf.MaxErrors
	// MaxDescriptors bounds the descriptors of one load, counting an
	// alias once per use: YAML aliases could otherwise expand a small
	// file into billions of descriptors.
	MaxDescriptors = 100_000
	// MaxDepth bounds descriptor nesting: Envoy descriptors have a handful
	// of entries, and a deeper file is a mistake (or an attack on the
	// parser's stack).
	MaxDepth = 32
)

// LoadOptions says how Load and Parse read a configuration.
type LoadOptions struct {
	// Check, if not nil, is asked about every rate limit as a request
	// would be (the node passes its store's Validate), so that a limit
	// the node cannot serve (a log over --max-log-limit, a window over
	// --max-window) is refused at load, not on every request.
	Check func(limiter.Request) error
	// MergeDomains lets several files (or documents) define one domain,
	// each adding its top-level descriptors, as envoyproxy/ratelimit's
	// MERGE_DOMAIN_CONFIG does: nothing merges deeper, and a top-level
	// descriptor defined twice is still an error. Files are read in path
	// order, so which wildcard comes first is the same on every load and
	// every node. Off, a domain defined twice is an error.
	MergeDomains bool
	// Skipped, if not nil, is told of every entry of a configuration
	// directory that is not read although its name would be: a named
	// pipe, a socket, a device (after symlinks), as upstream skips them.
	// The node logs them, so that a file that is not one is not silently
	// missing from the limits.
	Skipped func(path, why string)
}

// Load reads the configuration at path: one YAML file, or a directory
// read as envoyproxy/ratelimit's runtime loader reads it (listDir): every
// file in it or below it, of any name, dot entries skipped, in path order.
// Each YAML document is one domain; documents are separated by "---", so
// one file may hold several domains. A directory with no files is a
// configuration with no domains, as upstream loads it: every call is
// answered OK with no limits. Every problem found is reported, each as
// an *Error, joined.
func Load(path string, o LoadOptions) (*RuleSet, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("envoy rls config: %w", err)
	}
	// Named in the digest by its place in the configuration, not the
	// node's path to it: the same files mounted elsewhere are the same
	// digest.
	names := []string{filepath.Base(path)}
	if st.IsDir() {
		if names, err = listDir(path, o.Skipped); err != nil {
			return nil, err
		}
	}
	p := newParser(path, o)
	total := 0
	for _, name := range names {
		f := path
		if st.IsDir() {
			f = filepath.Join(path, filepath.FromSlash(name))
		}
		data, err := readFile(f)
		if err != nil {
			return nil, err
		}
		if total += len(data); total > MaxTotalBytes {
			return nil, fmt.Errorf("envoy rls config: the files under %s hold more than %d bytes together (at %s); a configuration is kilobytes: is the path right?",
				path, MaxTotalBytes, name)
		}
		p.document(name, f, data)
	}
	return p.digested()
}

// Parse reads one file's contents, named file in messages; see Load.
func Parse(file string, data []byte, o LoadOptions) (*RuleSet, error) {
	p := newParser(file, o)
	p.file(file, data)
	if err := p.result(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	p.cfg.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return p.cfg, nil
}

// Document is one configuration file's name and contents, for
// ParseDocuments.
type Document struct {
	Name string
	Data []byte
}

// emptyDigest is the digest of a configuration with no documents.
var emptyDigest = func() string {
	sum := sha256.Sum256(nil)
	return "sha256:" + hex.EncodeToString(sum[:])
}()

// ParseDocuments reads documents as Load reads a directory's files, in
// the order given, with the same checks and the same digest (over names
// and bytes): for configurations that arrive rather than being read, such
// as the resources of an xDS response. No documents is no domains, not an
// error: a control plane may withdraw every limit. source names the
// origin (RuleSet.Source).
func ParseDocuments(source string, docs []Document, o LoadOptions) (*RuleSet, error) {
	p := newParser(source, o)
	for _, d := range docs {
		p.document(d.Name, d.Name, d.Data)
	}
	return p.digested()
}

// listDir returns the files of the configuration directory dir, by
// their paths relative to it ("/"-separated, sorted), as upstream's
// runtime loader (lyft/goruntime's filepath.Walk) finds them: every
// regular file at any depth, whatever its name, except dot entries and
// what is below them. That skips Kubernetes' ConfigMap machinery (..data,
// ..2026_…), while the visible names, symlinks through ..data, are
// followed, to files and (a key with a path, "sub/rls.yaml") to
// directories. An empty list is not an error: see Load.
func listDir(dir string, skipped func(path, why string)) ([]string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("envoy rls config: %w", err)
	}
	if skipped == nil {
		skipped = func(string, string) {}
	}
	var files []string
	if err := walkDir(dir, "", []os.FileInfo{st}, &files, skipped); err != nil {
		return nil, err
	}
	slices.Sort(files)
	return files, nil
}

// walkDir adds to files the files under root/rel (see listDir); above are
// the directories walked through to get there, root's first, so that a
// symlink back to one of them is refused rather than followed forever.
func walkDir(root, rel string, above []os.FileInfo, files *[]string, skipped func(path, why string)) error {
	ents, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return fmt.Errorf("envoy rls config: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		name := path.Join(rel, e.Name())
		full := filepath.Join(root, filepath.FromSlash(name))
		st, err := os.Stat(full)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// A symlink to nothing: kubelet removes a deleted key's link
			// just after the swap of ..data, and upstream skips it too.
			continue
		case err != nil:
			return fmt.Errorf("envoy rls config: %w", err)
		case st.IsDir():
			if i := slices.IndexFunc(above, func(a os.FileInfo) bool { return os.SameFile(a, st) }); i >= 0 {
				return fmt.Errorf("envoy rls config: %s is a symlink loop: it leads back to %s", full, filepath.Join(root, filepath.FromSlash(ancestor(rel, len(above)-1-i))))
			}
			if err := walkDir(root, name, append(slices.Clip(above), st), files, skipped); err != nil {
				return err
			}
		case st.Mode().IsRegular():
			if *files = append(*files, name); len(*files) > MaxFiles {
				return fmt.Errorf("envoy rls config: %s has more than %d files", root, MaxFiles)
			}
		default:
			// A socket, a FIFO, a device is not configuration, and reading
			// a FIFO would wait for a writer: skipped, but said.
			skipped(full, regularfile.Kind(st.Mode())+", not a regular file")
		}
	}
	return nil
}

// ancestor is rel ("/"-separated) with its last up elements removed.
func ancestor(rel string, up int) string {
	for ; up > 0; up-- {
		rel = path.Dir(rel)
	}
	if rel == "." {
		return ""
	}
	return rel
}

func readFile(path string) ([]byte, error) {
	return yamlconf.ReadFile("envoy rls config", path, MaxFileBytes)
}

// parser walks a load's documents: domains, then their descriptors,
// level by level, building the RuleSet. Reading a field's value is its
// readers' job: rd for scalars and mappings (and every error of the
// load), md for metadata, rateLimitBlock for rate_limit, descriptorFields
// for the fields beside it.
type parser struct {
	// sum digests the documents read by document: names and bytes.
	sum  hash.Hash
	opts LoadOptions
	cfg  *RuleSet
	rd   *reader
	md   metadataReader
	// descriptorCount counts the descriptors read, aliases once per use.
	descriptorCount int
}

func newParser(source string, o LoadOptions) *parser {
	rd := &reader{}
	return &parser{sum: sha256.New(), opts: o, cfg: &RuleSet{Source: source, byName: map[string]*Domain{}},
		rd: rd, md: metadataReader{rd: rd}}
}

// document reads one file's (or resource's) documents, labelled label in
// messages, and adds name and data to the digest.
func (p *parser) document(name, label string, data []byte) {
	fmt.Fprintf(p.sum, "%d:%s%d:", len(name), name, len(data))
	p.sum.Write(data)
	p.file(label, data)
}

// digested returns the configuration read, with the digest of its
// documents, or every problem found.
func (p *parser) digested() (*RuleSet, error) {
	if err := p.result(); err != nil {
		return nil, err
	}
	p.cfg.Digest = "sha256:" + hex.EncodeToString(p.sum.Sum(nil))
	return p.cfg, nil
}

func (p *parser) result() error {
	if err := p.rd.err(); err != nil {
		return err
	}
	for i, r := range p.cfg.rules {
		r.finish(i)
	}
	return nil
}

// file reads every document of one file, each a domain.
func (p *parser) file(name string, data []byte) {
	p.rd.file = name
	if line, off, why, bad := yamlconf.BadText(data); bad {
		p.rd.fail(line, "", "%s (byte %d)", why, off)
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
			p.rd.fail(line, "", "%s", msg)
			return
		}
		docs++
		root := &doc
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
		if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
			// The document's line: its "---", not the line after.
			p.rd.fail(doc.Line, "", "empty document: want a mapping with domain and descriptors")
			continue
		}
		p.domain(deref(root))
	}
	if docs == 0 {
		// Refused rather than read as "no limits": a reload that catches
		// a file half-written would otherwise drop every limit at once.
		p.rd.fail(0, "", "no domain defined (an empty file is refused, so that a truncated write cannot remove every limit)")
	}
}

// deref follows an alias (*defaults) to its anchor. An alias is walked
// once per place it appears; MaxDescriptors bounds what that can expand
// to.
func deref(n *yaml.Node) *yaml.Node { return yamlconf.Deref(n) }

func (p *parser) domain(root *yaml.Node) {
	if root.Kind != yaml.MappingNode {
		p.rd.fail(root.Line, "", "want a mapping with domain and descriptors, e.g. {domain: edge, descriptors: [...]}")
		return
	}
	doc := p.domainFields(root)
	name, line := doc.name, doc.line
	if name == "" {
		if !hasField(root, "domain") {
			p.rd.fail(root.Line, "", "domain is missing")
		}
		return
	}
	d := p.cfg.byName[name]
	switch {
	case d == nil:
		d = &Domain{Name: name, File: p.rd.file, Line: line, root: newLevel(), index: len(p.cfg.domains),
			AllOrNothing: doc.allOrNothing, ChargeOverLimit: doc.chargeOverLimit}
		p.cfg.byName[name] = d
		p.cfg.domains = append(p.cfg.domains, d)
	case !p.opts.MergeDomains:
		p.rd.fail(line, fmt.Sprintf("domain %q", name), "defined twice (first at %s:%d); to let several files add descriptors to one domain, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does, start the nodes with --envoy-rls-merge-domains", d.File, d.Line)
		return
	case !p.sameSettings(d, doc):
		return
	}
	if doc.descs != nil {
		p.descriptors(d, d.root, doc.descs, scope{}, 1)
	}
}

// domainDoc is a domain document's fields: its name and the line naming
// it ("" when absent or not a non-empty string), its descriptors (nil
// when absent), and its settings, peerlimit extensions that
// envoyproxy/ratelimit's parser refuses as unknown fields, each with the
// line that gives it (0: absent, false).
type domainDoc struct {
	name                              string
	line                              int
	descs                             *yaml.Node
	allOrNothing, chargeOverLimit     bool
	allOrNothingAt, chargeOverLimitAt int
}

// domainSettings are the domain document's fields beside domain and
// descriptors.
var domainSettings = []string{"all_or_nothing", "charge_over_limit"}

// domainFields reads a domain document's fields.
func (p *parser) domainFields(root *yaml.Node) (doc domainDoc) {
	p.rd.fields(root, "", func(field string, k, v *yaml.Node) {
		switch field {
		case "domain":
			if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Value == "" {
				p.rd.fail(v.Line, "", "domain must be a non-empty string")
				return
			}
			doc.name, doc.line = v.Value, k.Line
		case "descriptors":
			doc.descs = v
		case "all_or_nothing":
			doc.allOrNothing, _ = p.rd.boolean(v, "", field)
			doc.allOrNothingAt = k.Line
		case "charge_over_limit":
			doc.chargeOverLimit, _ = p.rd.boolean(v, "", field)
			doc.chargeOverLimitAt = k.Line
		default:
			p.rd.fail(k.Line, "", "unknown field %q; want domain, descriptors or one of %s", field, strings.Join(domainSettings, ", "))
		}
	})
	return doc
}

// sameSettings reports whether doc, another document of the merged
// domain d, gives d's settings as its first document did (absent is
// false), and reports each that differs: a setting acts on the whole
// domain, so which document's would win cannot be left to file order.
func (p *parser) sameSettings(d *Domain, doc domainDoc) bool {
	same := true
	for _, s := range []struct {
		name       string
		first, now bool
		line       int
	}{
		{"all_or_nothing", d.AllOrNothing, doc.allOrNothing, doc.allOrNothingAt},
		{"charge_over_limit", d.ChargeOverLimit, doc.chargeOverLimit, doc.chargeOverLimitAt},
	} {
		if s.first == s.now {
			continue
		}
		same = false
		if s.line == 0 {
			s.line = doc.line
		}
		p.rd.fail(s.line, fmt.Sprintf("domain %q", d.Name), "%s is %t here and %t where the domain is first defined (%s:%d; absent is false): every document of a merged domain must give its settings alike", s.name, s.now, s.first, d.File, d.Line)
	}
	return same
}

// scope is where a list of descriptors sits: under which descriptors.
type scope struct {
	chain string  // the parents, named for messages; "" at the top
	path  string  // the parents' statistics path
	nodes []*node // the parents, from the top
}

// under is the scope of n's nested descriptors; n is named chain, path
// in the scope s.
func (s scope) under(n *node, chain, path string) scope {
	return scope{chain: chain, path: path, nodes: append(slices.Clip(s.nodes), n)}
}

// descriptors reads one level's list into lvl.
func (p *parser) descriptors(d *Domain, lvl *level, list *yaml.Node, s scope, depth int) {
	where := p.where(d, s.chain)
	if list.Kind == yaml.ScalarNode && list.ShortTag() == "!!null" {
		return
	}
	if list.Kind != yaml.SequenceNode {
		p.rd.fail(list.Line, where, "descriptors must be a list of {key, value, rate_limit, descriptors}")
		return
	}
	if depth > MaxDepth {
		p.rd.fail(list.Line, where, "descriptors nested deeper than %d levels", MaxDepth)
		return
	}
	for _, item := range list.Content {
		if p.descriptorCount++; p.descriptorCount > MaxDescriptors {
			if p.descriptorCount == MaxDescriptors+1 {
				// The count is the whole load's, every file and domain:
				// where it passed the cap is not where the fault is.
				p.rd.fail(item.Line, "", "more than %d descriptors in all, across every file and domain of the configuration (aliases count once per use); the count passed it here", MaxDescriptors)
			}
			return
		}
		p.descriptor(d, lvl, deref(item), s, depth)
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
func (p *parser) descriptor(d *Domain, lvl *level, m *yaml.Node, s scope, depth int) {
	parentWhere := p.where(d, s.chain)
	if m.Kind != yaml.MappingNode {
		p.rd.fail(m.Line, parentWhere, "a descriptor must be a mapping with key and optionally value, rate_limit, descriptors")
		return
	}
	f := p.readDescriptor(m, parentWhere)
	if f.key == "" {
		if !hasField(m, "key") {
			p.rd.fail(m.Line, parentWhere, "key is missing")
		}
		return
	}
	chain, path := f.names(s.chain, s.path)
	where := p.where(d, chain)
	if !p.place(lvl, &f, where) {
		return
	}
	f.levelFlags(p.rd, where)
	p.descriptorRule(d, &f, where, path, s)
	if f.children != nil {
		n := f.n
		n.children = newLevel()
		p.descriptors(d, n.children, f.children, s.under(n, chain, path), depth+1)
		if len(n.children.nodes) == 0 {
			n.children = nil
		}
	}
}

// descriptorFields is one descriptor's fields as read, each checked on
// its own; how they fit together is checked by the steps that use them.
type descriptorFields struct {
	n       *node // the descriptor, its key and value set; placed and given its rule later
	key     string
	keyLine int // 0 when key is absent or not a non-empty string
	// The fields read by later steps; nil when absent.
	rl, children, algo, metadata *yaml.Node
	// The flags, each with upstream's name; absent ones are not in it.
	flags map[string]*yaml.Node
}

// descriptorFlags are the descriptor's boolean fields.
var descriptorFlags = []string{"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "charge_over_limit"}

// readDescriptor reads descriptor m's fields, reporting the unknown
// ones and those of the wrong kind.
func (p *parser) readDescriptor(m *yaml.Node, where string) descriptorFields {
	f := descriptorFields{n: &node{file: p.rd.file, line: m.Line}}
	p.rd.fields(m, where, func(name string, k, v *yaml.Node) {
		switch name {
		case "key":
			if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!null" || v.Value == "" {
				p.rd.fail(v.Line, where, "key must be a non-empty string")
				return
			}
			f.key, f.keyLine = v.Value, k.Line
			f.n.key = v.Value
		case "value":
			// Any scalar, as written: Envoy's values are strings, and
			// "value: 0100" means the text 0100, not the number 64.
			switch {
			case v.Kind != yaml.ScalarNode:
				p.rd.fail(v.Line, where, "value must be a string")
			case v.ShortTag() != "!!null":
				f.n.value = v.Value
			}
		case "rate_limit":
			f.rl = v
		case "descriptors":
			f.children = v
		case "algorithm":
			f.algo = v
		case "metadata":
			f.metadata = v
		case "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "charge_over_limit":
			if f.flags == nil {
				f.flags = map[string]*yaml.Node{}
			}
			f.flags[name] = v
		case "all_or_nothing":
			p.rd.fail(k.Line, where, "all_or_nothing is a domain setting: give it beside domain and descriptors")
		default:
			p.rd.fail(k.Line, where, "unknown field %q; want key, value, rate_limit, descriptors, algorithm, metadata or one of %s", name, strings.Join(descriptorFlags, ", "))
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
	path = compositeKey(f.key, f.n.value)
	if parentPath != "" {
		path = parentPath + "." + path
	}
	return chain, path
}

// compositeKey is what envoyproxy/ratelimit files a descriptor under and
// matches an entry by: its key, or key_value when it has a value.
func compositeKey(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

// place adds the descriptor to lvl and reports whether it could: a
// second descriptor with the same composite key at one level is refused,
// whatever its key and value say apart (upstream would match both by the
// same key_value).
func (p *parser) place(lvl *level, f *descriptorFields, where string) bool {
	n := f.n
	n.composite = compositeKey(n.key, n.value)
	if prev := lvl.nodes[n.composite]; prev != nil {
		if prev.key == n.key {
			p.rd.fail(f.keyLine, where, "defined twice at this level (first at %s)", p.at(prev))
		} else {
			p.rd.fail(f.keyLine, where, "its key_value %q is also that of the descriptor at %s: descriptors are matched by key_value, as in envoyproxy/ratelimit, so one of them could never match", n.composite, p.at(prev))
		}
		return false
	}
	lvl.nodes[n.composite] = n
	if strings.Contains(n.composite, "*") {
		n.glob = newGlob(n.composite)
		lvl.wildcards = append(lvl.wildcards, n)
	}
	return true
}

// at names where n was read: its line, and its file when it is not the
// one being read (merged domains).
func (p *parser) at(n *node) string {
	if n.file != p.rd.file {
		return fmt.Sprintf("%s:%d", n.file, n.line)
	}
	return fmt.Sprintf("line %d", n.line)
}
