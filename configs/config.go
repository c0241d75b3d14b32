package configs

import (
	"errors"
	"path/filepath"
	"strings"

	"github.com/peerlimit/peerlimit/envoyrls"
	"github.com/peerlimit/peerlimit/internal/field"
	"github.com/peerlimit/peerlimit/xdsconfig"
)

// Config is where a node's configurations come from and how they reload.
// node.Config embeds it, so that its fields read as the node's own
// (cfg.PoliciesFile) and their errors name them the same way.
type Config struct {
	// PoliciesFile is a YAML or JSON file of named policies (package
	// policy) that requests may name instead of giving limit, window and
	// algorithm. Read at start, where an invalid file is an error naming
	// the line, and again by ReloadPolicies. Every node should read the
	// same file. Optional.
	PoliciesFile string
	// EnvoyRLSConfig is a YAML file, or a directory read as upstream's
	// runtime loader reads it (every file not starting with a dot, at any
	// depth; an empty one is rules with no domains, which limit nothing),
	// in envoyproxy/ratelimit's format (package envoyrls). With it the node
	// serves Envoy's rate limit service,
	// envoy.service.ratelimit.v3.RateLimitService, on its gRPC port. Read
	// at start, where an invalid file is an error naming the line, and
	// again by ReloadEnvoyRLS. Every node should read the same files.
	// Optional: without it the service is not registered, so an Envoy
	// pointed at the node sees UNIMPLEMENTED rather than answers that
	// limit nothing.
	EnvoyRLSConfig string
	// WatchConfig reloads PoliciesFile and EnvoyRLSConfig when they
	// change on disk, as envoyproxy/ratelimit does, besides
	// ReloadPolicies and ReloadEnvoyRLS (SIGHUP): edited in place,
	// replaced by rename, or updated by Kubernetes as a ConfigMap
	// (watch.go). A directory is watched for any change of its
	// entries, a file through its directory. A reload that finds the
	// configuration in force unchanged does nothing. Default on.
	WatchConfig bool
	// EnvoyRLSWatchRoot, with WatchConfig, is a symlink, EnvoyRLSConfig or
	// one of its ancestors, that is swapped atomically to publish a new
	// version (/srv/runtime_data/current -> v2): only its swaps reload
	// EnvoyRLSConfig, edits inside the version it points at do not
	// (upstream's RUNTIME_WATCH_ROOT=true with RUNTIME_ROOT). Empty
	// (default) watches EnvoyRLSConfig itself (RUNTIME_WATCH_ROOT=false).
	EnvoyRLSWatchRoot string
	// EnvoyRLSXDS subscribes to the rate limit service's configuration
	// from an xDS control plane instead (package xdsconfig), as
	// envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW does for Envoy
	// Gateway. With a ServerAddr, the service is served, and
	// EnvoyRLSConfig must be empty.
	EnvoyRLSXDS xdsconfig.Config
	// EnvoyRLSAwaitConfig: with EnvoyRLSXDS, until the first
	// configuration arrives the node reports itself not ready: the
	// service's gRPC health NOT_SERVING, /healthz 503 (upstream does not
	// even listen before it, unless FORCE_START_WITHOUT_INITIAL_CONFIG).
	// Either way the service answers UNAVAILABLE meanwhile, never OK.
	// Default on.
	EnvoyRLSAwaitConfig bool
	// EnvoyRLSHealthyNeedsDomains is upstream's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: the node reports itself
	// not ready whenever the rules in force, from files or a control
	// plane, have no domains (none loaded yet, an empty directory, Envoy
	// Gateway's snapshot after its last Gateway went), not only before
	// the first. Once a configuration is in force the service answers
	// meanwhile, an empty one limiting nothing, as upstream's (before the
	// first from a control plane it answers UNAVAILABLE). Default off.
	EnvoyRLSHealthyNeedsDomains bool
	// EnvoyRLS are the rate limit service's settings (headers, domain
	// merging, response metadata, global shadow and quota modes, the
	// near-limit ratio, the bound on statistics keys). Any but the
	// defaults needs EnvoyRLSConfig.
	EnvoyRLS envoyrls.Config
}

// DefaultConfig returns the defaults documented on Config: no policies,
// no Envoy rules, files watched.
func DefaultConfig() Config {
	return Config{
		EnvoyRLS:            envoyrls.DefaultConfig(),
		EnvoyRLSXDS:         xdsconfig.DefaultConfig(),
		EnvoyRLSAwaitConfig: true,
		WatchConfig:         true,
	}
}

// Validate reports every unusable field, each a *field.Error naming it
// from Config ("EnvoyRLSWatchRoot", "EnvoyRLS.NearLimitRatio").
func (c Config) Validate() error {
	var errs []error
	check := func(bad bool, path, format string, args ...any) {
		if bad {
			errs = append(errs, field.Errorf(path, format, args...))
		}
	}
	check(c.EnvoyRLS != envoyrls.DefaultConfig() && c.EnvoyRLSConfig == "" && !c.EnvoyRLSXDS.Enabled(), "EnvoyRLS", "needs %s or %s",
		field.Ref("EnvoyRLSConfig"), field.Ref("EnvoyRLSXDS.ServerAddr"))
	check(c.EnvoyRLSConfig != "" && c.EnvoyRLSXDS.Enabled(), "EnvoyRLSXDS.ServerAddr", "and %s are two sources of the same rules; set one",
		field.Ref("EnvoyRLSConfig"))
	check(c.EnvoyRLSWatchRoot != "" && !within(c.EnvoyRLSConfig, c.EnvoyRLSWatchRoot), "EnvoyRLSWatchRoot",
		"must be %s or one of its ancestors, got %q", field.Ref("EnvoyRLSConfig"), c.EnvoyRLSWatchRoot)
	if err := c.EnvoyRLS.Validate(); err != nil {
		errs = append(errs, field.In("EnvoyRLS", err))
	}
	if err := c.EnvoyRLSXDS.Validate(); err != nil {
		errs = append(errs, field.In("EnvoyRLSXDS", err))
	}
	return errors.Join(errs...)
}

// within reports whether path is root or under it, both made absolute
// (an empty path is under nothing).
func within(path, root string) bool {
	if path == "" {
		return false
	}
	p, err1 := filepath.Abs(path)
	r, err2 := filepath.Abs(root)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(r, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
