package policy

import (
	"sync"
	"sync/atomic"

	"github.com/peerlimit/peerlimit/internal/reloads"
	"github.com/peerlimit/peerlimit/internal/yamlconf"
	"github.com/peerlimit/peerlimit/limiter"
)

// MaxFileBytes caps a policy file: thousands of policies fit in far less,
// and a mistaken path (a log file, a device) must not be read whole.
const MaxFileBytes = 4 << 20

// Registry is the node's current policies: a Set loaded from a file and
// replaced by Reload. Lookup takes no lock (one atomic load), so requests
// naming a policy never wait for a reload; Reload calls are serialised so
// that an older file can never land after a newer one.
//
// Limiter state is keyed by (key, window, algorithm), never by policy
// name, so a reload leaves every count in place: a policy whose limit
// changed applies the new limit to what is already counted; one whose
// window or algorithm changed starts its keys on a fresh state, and the
// old state expires by itself.
type Registry struct {
	path  string
	check func(limiter.Request) error
	mu    sync.Mutex // serialises Reload; guards last
	cur   atomic.Pointer[Set]
	last  reloads.Result
}

// Load reads and parses the policy file at path; see Parse for check.
func Load(path string, check func(limiter.Request) error) (*Registry, error) {
	r := &Registry{path: path, check: check}
	set, err := r.read()
	if err != nil {
		return nil, err
	}
	r.cur.Store(set)
	return r, nil
}

// Path is the file the Registry reads.
func (r *Registry) Path() string { return r.path }

// Current returns the Set in force.
func (r *Registry) Current() *Set { return r.cur.Load() }

// Lookup returns the policy called name in the current Set.
func (r *Registry) Lookup(name string) (Policy, bool) { return r.cur.Load().Lookup(name) }

// Reload reads the file again and, if it is valid, puts it in force and
// returns it. On any error the Set in force stays as it was.
func (r *Registry) Reload() (*Set, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set, err := r.read()
	r.last = r.last.Next(err)
	if err != nil {
		return nil, err
	}
	r.cur.Store(set)
	return set, nil
}

// LastReload returns how the latest Reload went. Whoever records reload
// outcomes after Reload returns, outside its lock, reads this instead of
// trusting its own: two reloads may return in one order and be recorded
// in the other, and only this says which read the file last.
func (r *Registry) LastReload() reloads.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

func (r *Registry) read() (*Set, error) {
	data, err := yamlconf.ReadFile("policies", r.path, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	return Parse(r.path, data, r.check)
}
