package envoyrls

import (
	"sync"
	"sync/atomic"

	"github.com/peerlimit/peerlimit/internal/reloads"
)

// Registry is the node's current configuration: loaded from a file or
// directory and replaced by Reload. Current takes no lock (one atomic
// load), so calls never wait for a reload; Reload calls are serialised so
// that an older file can never land after a newer one.
//
// A reload that reads what is in force (the same digest) keeps the
// *RuleSet in force rather than an equal copy: its identity is the
// configuration's, and what is keyed by it (the node's load time, the
// metrics' bindings) stays.
//
// Limiter state is keyed by domain and descriptor entries, window and
// algorithm, never by rule, so a reload leaves every count in place: a
// rule whose requests_per_unit changed applies the new limit at once to
// what is already counted; one whose window or algorithm changed starts
// on a fresh state, and the old one expires by itself.
type Registry struct {
	path string
	opts LoadOptions
	mu   sync.Mutex // serialises Reload and Set; guards last
	last reloads.Result
	cur  atomic.Pointer[RuleSet]
	// loaded: a configuration was read or set; false only for an
	// EmptyRegistry before its first Set.
	loaded atomic.Bool
}

// NewRegistry loads the configuration at path; see Load.
func NewRegistry(path string, o LoadOptions) (*Registry, error) {
	r := &Registry{path: path, opts: o}
	cfg, err := Load(path, o)
	if err != nil {
		return nil, err
	}
	r.cur.Store(cfg)
	r.loaded.Store(true)
	return r, nil
}

// StaticRegistry holds cfg for good: Reload reads nothing and returns it.
// For tests and embedding.
func StaticRegistry(cfg *RuleSet) *Registry {
	r := &Registry{}
	r.cur.Store(cfg)
	r.loaded.Store(true)
	return r
}

// EmptyRegistry holds a configuration with no domains, and is not Loaded,
// until Set puts one in force: for a node whose rules come from a control
// plane (xDS).
func EmptyRegistry(source string) *Registry {
	r := &Registry{}
	r.cur.Store(&RuleSet{Source: source, Digest: emptyDigest, byName: map[string]*Domain{}})
	return r
}

// Set puts cfg in force, as a successful Reload would: for configurations
// that arrive rather than being read (xDS). Serialised with Reload.
func (r *Registry) Set(cfg *RuleSet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.put(cfg)
	r.loaded.Store(true)
}

// Loaded reports whether a configuration was ever put in force: false
// only for an EmptyRegistry before its first Set.
func (r *Registry) Loaded() bool { return r.loaded.Load() }

// Path is where the Registry reads from ("" for a static one).
func (r *Registry) Path() string { return r.path }

// Current returns the configuration in force.
func (r *Registry) Current() *RuleSet { return r.cur.Load() }

// Reload reads the configuration again and, if it is valid, puts it in
// force and returns it; if it is what is in force already (the same
// digest), the configuration in force stays and is returned. On any
// error the configuration in force stays.
func (r *Registry) Reload() (*RuleSet, error) {
	if r.path == "" {
		return r.cur.Load(), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, err := Load(r.path, r.opts)
	r.last = r.last.Next(err)
	if err != nil {
		return nil, err
	}
	return r.put(cfg), nil
}

// LastReload returns how the latest Reload went. Whoever records reload
// outcomes after Reload returns, outside its lock, reads this instead of
// trusting its own: two reloads may return in one order and be recorded
// in the other, and only this says which read the files last.
func (r *Registry) LastReload() reloads.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// put puts cfg in force unless what is in force has its digest, and
// returns what is in force. Requires r.mu held.
func (r *Registry) put(cfg *RuleSet) *RuleSet {
	if cur := r.cur.Load(); cur != nil && cfg.Digest != "" && cur.Digest == cfg.Digest {
		return cur
	}
	r.cur.Store(cfg)
	return cfg
}
