package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/peerlimit/peerlimit/internal/regularfile"
)

// The ratelimit mode: peerlimit-node started as /bin/ratelimit (the
// command Envoy Gateway's deployment and envoyproxy/ratelimit's own
// manifests run), or as `peerlimit-node ratelimit`, takes
// envoyproxy/ratelimit's environment variables. They are translated into
// this binary's flags (upstreamArgs), so every check and error of a flag
// applies, and the node then starts as usual: flags given on the command
// line come after and win, and PEERLIMIT_* variables fill what neither
// set (PEERLIMIT_JOIN and PEERLIMIT_CLUSTER_SECRET are how the nodes find
// and trust each other; upstream has no such thing). docs/envoy.md,
// "Replace Envoy Gateway's rate limit service", lists every variable.

const ratelimitUsage = `Usage: peerlimit-node ratelimit [flags]    (or the binary started as /bin/ratelimit)

Runs a node configured by envoyproxy/ratelimit's environment variables, as
its image and Envoy Gateway's rate limit Deployment set them: HOST, PORT,
GRPC_HOST, GRPC_PORT, DEBUG_PORT, LOG_LEVEL, LOG_FORMAT, CONFIG_TYPE
(FILE or GRPC_XDS_SOTW), RUNTIME_ROOT, RUNTIME_SUBDIRECTORY,
RUNTIME_APPDIRECTORY, CONFIG_GRPC_XDS_*, GRPC_SERVER_USE_TLS,
GRPC_SERVER_TLS_*, GRPC_CLIENT_TLS_CACERT, USE_PROMETHEUS,
PROMETHEUS_ADDR, SHADOW_MODE, QUOTA_MODE, TRACING_* and the others that
docs/envoy.md ("Replace Envoy Gateway's rate limit service") lists, each
with the flag it becomes. A variable that cannot be honoured is refused by
name; REDIS_* and the other backends' are ignored, with one warning.

PEERLIMIT_* variables fill what upstream's leave unset: PEERLIMIT_JOIN
(how the nodes find each other) and PEERLIMIT_CLUSTER_SECRET (required
with GRPC_SERVER_USE_TLS) are peerlimit's own. Flags given here win over
both; they are serve's flags: peerlimit-node serve --help.
`

// runUpstream serves a node configured by upstream's variables.
func runUpstream(args []string, getenv func(string) string, stderr io.Writer) int {
	// Before the variables are read: help must not depend on them, nor
	// print serve's usage as if this mode were serve.
	if slices.ContainsFunc(args, isHelpFlag) {
		fmt.Fprint(stderr, ratelimitUsage)
		return exitOK
	}
	flags, notes, err := upstreamArgs(getenv, environNames())
	if err != nil {
		fmt.Fprintln(stderr, "peerlimit-node (ratelimit mode):", err)
		return exitUsage
	}
	return runWith(append(flags, args...), getenv, stderr, mode{notes: notes, check: sharedCANeedsSecret})
}

// sharedCANeedsSecret refuses peer TLS without a cluster secret. In this
// mode the peers' CA is Envoy's too: GRPC_SERVER_TLS_CA_CERT is the CA of
// Envoy Gateway's certificates, Envoy's client certificate included
// (issued for the same "*.<namespace>" name), and GRPC_CLIENT_TLS_CACERT
// is by definition the callers'. A certificate from it therefore passes as
// a peer's, and only the cluster secret tells a member from an Envoy.
func sharedCANeedsSecret(o options) error {
	s := o.node.Security
	if s.PeerCAFile == "" || len(s.ClusterSecrets) > 0 || s.ClusterSecretFile != "" {
		return nil
	}
	return fmt.Errorf("PEERLIMIT_CLUSTER_SECRET (or --cluster-secret-file) is required with GRPC_SERVER_USE_TLS: the peers' CA, %s, "+
		"also issues Envoy's certificates, so without a cluster secret any Envoy could make Peer calls (feed checks, overwrite counts, reset keys)", s.PeerCAFile)
}

// upstream reads upstream's variables into flags, collecting what it
// could not use as notes (logged once the logger exists) and what is
// wrong as errors naming the variable.
type upstream struct {
	getenv func(string) string
	names  []string // of the variables set, for the prefixes ignored
	args   []string
	notes  []string
	errs   []error
}

// upstreamArgs returns the flags that upstream's variables mean, and
// notes on those accepted but not used.
func upstreamArgs(getenv func(string) string, names []string) ([]string, []string, error) {
	u := &upstream{getenv: getenv, names: names}
	u.listeners()
	u.logging()
	u.configSource()
	u.serverTLS()
	u.serviceSettings()
	u.metrics()
	u.tracing()
	u.ignored()
	return u.args, u.notes, errors.Join(u.errs...)
}

// str is the variable's value, or def when unset or empty (envconfig's
// rule, which upstream uses).
func (u *upstream) str(name, def string) string {
	if v := u.getenv(name); v != "" {
		return v
	}
	return def
}

func (u *upstream) boolean(name string, def bool) bool {
	v := u.getenv(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		u.errs = append(u.errs, fmt.Errorf("%s=%q: want true or false", name, v))
		return def
	}
	return b
}

// port is a port number variable, checked by name.
func (u *upstream) port(name, def string) string {
	v := u.str(name, def)
	if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
		u.errs = append(u.errs, fmt.Errorf("%s=%q: want a port number, 0 to 65535", name, v))
	}
	return v
}

// checked passes variable name to flag when it is set and parse accepts
// it, else says what is wrong with it by name.
func (u *upstream) checked(name, flag, want string, parse func(string) error) {
	v := u.getenv(name)
	if v == "" {
		return
	}
	if err := parse(v); err != nil {
		u.errs = append(u.errs, fmt.Errorf("%s=%q: want %s", name, v, want))
		return
	}
	u.flag(flag, v)
}

func isDuration(v string) error { _, err := time.ParseDuration(v); return err }
func isFloat(v string) error    { _, err := strconv.ParseFloat(v, 64); return err }

func (u *upstream) flag(name, value string) { u.args = append(u.args, "--"+name+"="+value) }

// pass sets flag from variable name when it is set.
func (u *upstream) pass(name, flag string) {
	if v := u.getenv(name); v != "" {
		u.flag(flag, v)
	}
}

func (u *upstream) note(format string, args ...any) {
	u.notes = append(u.notes, fmt.Sprintf(format, args...))
}

// listeners: HOST:PORT is the HTTP API (health at /healthcheck),
// GRPC_HOST:GRPC_PORT the gRPC one, Envoy's and the peers',
// DEBUG_HOST:DEBUG_PORT upstream's debug page.
func (u *upstream) listeners() {
	u.flag("http-addr", net.JoinHostPort(u.str("HOST", "0.0.0.0"), u.port("PORT", "8080")))
	u.flag("grpc-addr", net.JoinHostPort(u.str("GRPC_HOST", "0.0.0.0"), u.port("GRPC_PORT", "8081")))
	if v := u.getenv("GRPC_UDS"); v != "" {
		u.errs = append(u.errs, fmt.Errorf("GRPC_UDS=%q: a unix socket cannot be reached by the other nodes; serve on GRPC_HOST:GRPC_PORT", v))
	}
	// Upstream's debug port: its /rlconfig; the stats are on /metrics and
	// the profiles on the authenticated API, not here.
	u.flag("debug-addr", net.JoinHostPort(u.str("DEBUG_HOST", "0.0.0.0"), u.port("DEBUG_PORT", "6070")))
}

// logging: upstream uses logrus's levels, WARN by default, and any
// LOG_FORMAT but json is text.
func (u *upstream) logging() {
	levels := map[string]string{"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn",
		"error": "error", "fatal": "error", "panic": "error"}
	v := u.str("LOG_LEVEL", "warn")
	level, ok := levels[strings.ToLower(v)]
	if !ok {
		u.errs = append(u.errs, fmt.Errorf("LOG_LEVEL=%q: want trace, debug, info, warn, error, fatal or panic", v))
		level = "warn"
	}
	u.flag("log-level", level)
	format := "text"
	if strings.EqualFold(u.getenv("LOG_FORMAT"), "json") {
		format = "json-ratelimit" // upstream's keys: @timestamp, @message
	}
	u.flag("log-format", format)
}

// configSource: files under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// RUNTIME_APPDIRECTORY, watched as upstream watches them, or an xDS
// control plane.
func (u *upstream) configSource() {
	switch typ := u.str("CONFIG_TYPE", "FILE"); typ {
	case "FILE":
		root := u.str("RUNTIME_ROOT", "/srv/runtime_data/current")
		dir := filepath.Join(root, u.getenv("RUNTIME_SUBDIRECTORY"), u.str("RUNTIME_APPDIRECTORY", "config"))
		u.flag("envoy-rls-config", dir)
		if u.boolean("RUNTIME_WATCH_ROOT", true) {
			u.flag("envoy-rls-watch-root", root)
		}
		if !u.boolean("RUNTIME_IGNOREDOTFILES", false) {
			u.note("RUNTIME_IGNOREDOTFILES=false: dotfiles are skipped all the same (a ConfigMap's ..data copies would define every domain twice)")
		}
	case "GRPC_XDS_SOTW":
		u.xds()
	default:
		u.errs = append(u.errs, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", typ))
	}
	force := u.boolean("FORCE_START_WITHOUT_INITIAL_CONFIG", false)
	u.flag("envoy-rls-await-config", strconv.FormatBool(!force))
	if u.boolean("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false) {
		u.flag("envoy-rls-healthy-needs-domains", "true")
	}
}

func (u *upstream) xds() {
	u.flag("envoy-rls-xds-server", u.str("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"))
	u.flag("envoy-rls-xds-node-id", u.str("CONFIG_GRPC_XDS_NODE_ID", "default"))
	if v := u.getenv("CONFIG_GRPC_XDS_NODE_METADATA"); v != "" {
		// As upstream reads it: key=value pairs, anything else skipped.
		var pairs []string
		for pair := range strings.SplitSeq(v, ",") {
			if k, _, ok := strings.Cut(pair, "="); ok && strings.TrimSpace(k) != "" {
				pairs = append(pairs, pair)
			}
		}
		u.flag("envoy-rls-xds-node-metadata", strings.Join(pairs, ","))
	}
	if v := u.getenv("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); v != "" {
		// envconfig's map form, key:value pairs.
		h, err := parseKV(v, ":")
		if err != nil {
			u.errs = append(u.errs, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: %w", err))
		}
		u.flag("envoy-rls-xds-headers", (*kvFlag)(&h).String())
	}
	if u.boolean("CONFIG_GRPC_XDS_SERVER_USE_TLS", false) {
		u.flag("envoy-rls-xds-tls", "true")
		u.pass("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "envoy-rls-xds-cert-file")
		u.pass("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "envoy-rls-xds-key-file")
		u.pass("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "envoy-rls-xds-ca-file")
		u.pass("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-rls-xds-server-name")
	}
	// Upstream's defaults, 10 s doubling to 60 s.
	u.flag("envoy-rls-xds-backoff-initial", "10s")
	u.flag("envoy-rls-xds-backoff-max", "60s")
	u.checked("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "envoy-rls-xds-backoff-initial", "a duration such as 10s", isDuration)
	u.checked("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "envoy-rls-xds-backoff-max", "a duration such as 60s", isDuration)
	if v := u.getenv("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" && v != "0" { // 0: gRPC's default, ours
		u.checked("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "envoy-rls-xds-max-msg-bytes", "a number of bytes", func(v string) error { _, err := strconv.Atoi(v); return err })
	}
}

// serverTLS: GRPC_SERVER_USE_TLS secures the gRPC port, and
// GRPC_CLIENT_TLS_CACERT makes it require a client certificate from that
// CA, as upstream does. The peers share the port, so they verify each
// other against a CA too: GRPC_SERVER_TLS_CA_CERT (which Envoy Gateway
// sets and upstream does not read), else the client CA; the certificate
// must carry --peer-tls-server-name (PEERLIMIT_PEER_TLS_SERVER_NAME) and
// both TLS usages. The HTTP port stays plaintext, as upstream's does:
// Envoy Gateway probes /healthcheck over HTTP.
func (u *upstream) serverTLS() {
	if !u.boolean("GRPC_SERVER_USE_TLS", false) {
		return
	}
	u.pass("GRPC_SERVER_TLS_CERT", "tls-cert-file")
	u.pass("GRPC_SERVER_TLS_KEY", "tls-key-file")
	u.flag("http-plaintext", "true")
	clientCA := u.getenv("GRPC_CLIENT_TLS_CACERT")
	if clientCA != "" {
		u.flag("tls-client-ca-file", clientCA)
		u.flag("tls-client-auth", "require")
	}
	if v := u.getenv("GRPC_CLIENT_TLS_SAN"); v != "" {
		u.errs = append(u.errs, fmt.Errorf("GRPC_CLIENT_TLS_SAN=%q: client certificates are verified against GRPC_CLIENT_TLS_CACERT only; "+
			"a CA of its own for the callers, or API tokens (PEERLIMIT_API_TOKEN), narrow who may call", v))
	}
	if ca := u.str("GRPC_SERVER_TLS_CA_CERT", clientCA); ca != "" {
		u.flag("peer-tls-ca-file", ca)
	}
}

// serviceSettings are the rate limit service's own switches.
func (u *upstream) serviceSettings() {
	for _, s := range []struct{ env, flag string }{
		{"SHADOW_MODE", "envoy-rls-shadow-mode"}, {"QUOTA_MODE", "envoy-rls-quota-mode"},
		{"RESPONSE_DYNAMIC_METADATA", "envoy-rls-response-metadata"}, {"MERGE_DOMAIN_CONFIG", "envoy-rls-merge-domains"},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", "envoy-rls-headers"},
	} {
		if u.boolean(s.env, false) {
			u.flag(s.flag, "true")
		}
	}
	u.checked("NEAR_LIMIT_RATIO", "envoy-rls-near-limit-ratio", "a number in (0, 1]", isFloat)
	for _, h := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
		if u.getenv(h) != "" {
			u.note("%s: the headers are the IETF RateLimit-Policy and RateLimit fields, whose names are fixed", h)
		}
	}
}

// metrics: Prometheus on its own address, as USE_PROMETHEUS serves it;
// the names are upstream's (docs/envoy.md).
func (u *upstream) metrics() {
	if u.boolean("USE_PROMETHEUS", false) {
		u.flag("metrics-addr", u.str("PROMETHEUS_ADDR", ":9090"))
		if p := u.str("PROMETHEUS_PATH", "/metrics"); p != "/metrics" {
			u.errs = append(u.errs, fmt.Errorf("PROMETHEUS_PATH=%q: metrics are served at /metrics only", p))
		}
	}
	if u.responseTimeInMilliseconds() {
		u.flag("envoy-rls-response-time-milliseconds", "true")
	}
	if u.boolean("USE_STATSD", true) || u.boolean("USE_DOG_STATSD", false) {
		u.note("USE_STATSD: statsd is not spoken; the same statistics, under the Prometheus names statsd_exporter gives them, are at GET /metrics on HOST:PORT (and PROMETHEUS_ADDR with USE_PROMETHEUS=true)")
	}
}

// responseTimeInMilliseconds says in which unit upstream's Prometheus
// exporter would fill ratelimit_service_response_time_seconds. Its
// statsd timer is in milliseconds and its mapping scales it: its default
// mapping by 0.001, dropped by PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS;
// a PROMETHEUS_MAPPER_YAML replaces the default, and decides by its own
// response_time entry. Envoy Gateway's (its statsd_conf.yaml) has no
// scale there, so under Envoy Gateway upstream's histogram holds
// milliseconds under the _seconds name, and its dashboards expect them.
// The rest of a mapping file is not read: the names are upstream's.
func (u *upstream) responseTimeInMilliseconds() bool {
	path := u.getenv("PROMETHEUS_MAPPER_YAML")
	if path == "" || !u.boolean("USE_PROMETHEUS", false) {
		return u.boolean("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)
	}
	ms, err := mapperScalesToMilliseconds(path)
	if err != nil {
		u.errs = append(u.errs, fmt.Errorf("PROMETHEUS_MAPPER_YAML=%q: %w", path, err))
		return false
	}
	u.note("PROMETHEUS_MAPPER_YAML: read for the response time's unit only (%s); the metric names are upstream's, fixed",
		map[bool]string{true: "milliseconds: its response_time mapping has no scale", false: "seconds"}[ms])
	return ms
}

// maxMapperBytes bounds PROMETHEUS_MAPPER_YAML, as the other
// configuration files are bounded (policy.MaxFileBytes).
const maxMapperBytes = 4 << 20

// mapperScalesToMilliseconds reads a statsd_exporter mapping file and
// reports whether its ratelimit_server.*.response_time mapping leaves
// upstream's milliseconds unscaled (none: seconds, as upstream's default).
// The file must be a regular file (regularfile.Read): a named pipe would
// hold the start up.
func mapperScalesToMilliseconds(path string) (bool, error) {
	b, err := regularfile.Read(path, maxMapperBytes)
	if err != nil {
		return false, err
	}
	var m struct {
		Mappings []struct {
			Match string   `yaml:"match"`
			Scale *float64 `yaml:"scale"`
		} `yaml:"mappings"`
	}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return false, err
	}
	for _, mp := range m.Mappings {
		if mp.Match != "ratelimit_server.*.response_time" {
			continue
		}
		switch {
		case mp.Scale == nil:
			return true, nil
		case *mp.Scale == 0.001:
			return false, nil
		}
		return false, fmt.Errorf("the response_time mapping's scale is %g; seconds (0.001) or milliseconds (none) are served", *mp.Scale)
	}
	return false, nil // not mapped at all: upstream's name is kept here, in seconds
}

// tracing: OpenTelemetry over OTLP, as upstream's TRACING_* configure it;
// the exporter reads OTEL_EXPORTER_OTLP_* itself.
func (u *upstream) tracing() {
	if !u.boolean("TRACING_ENABLED", false) {
		return
	}
	u.flag("tracing", "true")
	u.flag("tracing-protocol", strings.ToLower(u.str("TRACING_EXPORTER_PROTOCOL", "http")))
	u.flag("tracing-service-name", u.str("TRACING_SERVICE_NAME", "RateLimit"))
	u.pass("TRACING_SERVICE_NAMESPACE", "tracing-service-namespace")
	u.pass("TRACING_SERVICE_INSTANCE_ID", "tracing-service-instance-id")
	u.checked("TRACING_SAMPLING_RATE", "tracing-sampling-rate", "a number from 0 to 1", isFloat)
}

// ignoredPrefixes are settings of upstream's storage, which a peerlimit
// cluster replaces, and of its statsd client.
var ignoredPrefixes = []string{"REDIS_", "MEMCACHE_"}

var ignoredNames = []string{"BACKEND_TYPE", "CACHE_KEY_PREFIX", "EXPIRATION_JITTER_MAX_SECONDS", "LOCAL_CACHE_SIZE_IN_BYTES",
	"STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS", "USE_DOG_STATSD_MOGRIFIERS",
	"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_BACKOFF_JITTER", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}

// ignored names, in one note, the variables that are set and mean
// nothing here.
func (u *upstream) ignored() {
	var set []string
	for _, name := range ignoredNames {
		if u.getenv(name) != "" {
			set = append(set, name)
		}
	}
	for _, name := range u.names {
		for _, p := range ignoredPrefixes {
			if strings.HasPrefix(name, p) {
				set = append(set, name)
			}
		}
	}
	if len(set) > 0 {
		slices.Sort(set)
		u.note("ignored, the cluster holds the counts and the statistics are on /metrics: %s", strings.Join(slices.Compact(set), ", "))
	}
}

// environNames lists the process's environment variables' names.
func environNames() []string {
	var names []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return names
}

// isHelpFlag reports whether arg asks for help, as the flag package
// reads it.
func isHelpFlag(arg string) bool {
	switch arg {
	case "-h", "-help", "--h", "--help":
		return true
	}
	return false
}
