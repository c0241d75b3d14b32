package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/peerlimit/peerlimit/xdsconfig"
)

// defineXDSFlags defines the subscription to the Envoy rate limit
// service's configuration from an xDS control plane, each upstream
// setting it mirrors named (CONFIG_TYPE=GRPC_XDS_SOTW).
func defineXDSFlags(fs *flag.FlagSet, x *xdsconfig.Config, await, needsDomains *bool) {
	fs.StringVar(&x.ServerAddr, "envoy-rls-xds-server", x.ServerAddr, "host:port of an xDS control plane serving the rate limit service's configuration as RateLimitConfig resources (Envoy Gateway: envoy-gateway.envoy-gateway-system:18001; CONFIG_GRPC_XDS_SERVER_URL); instead of --envoy-rls-config")
	fs.StringVar(&x.NodeID, "envoy-rls-xds-node-id", x.NodeID, "the xDS node id this node subscribes as (CONFIG_GRPC_XDS_NODE_ID); a control plane serves nothing to an id it does not know, and Envoy Gateway serves envoy-ratelimit only")
	fs.Var((*kvFlag)(&x.NodeMetadata), "envoy-rls-xds-node-metadata", "xDS node metadata, comma-separated key=value pairs (CONFIG_GRPC_XDS_NODE_METADATA)")
	fs.Var((*kvFlag)(&x.Headers), "envoy-rls-xds-headers", "gRPC metadata sent with the subscription, comma-separated key=value pairs (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)")
	fs.BoolVar(&x.UseTLS, "envoy-rls-xds-tls", x.UseTLS, "TLS to the control plane (CONFIG_GRPC_XDS_SERVER_USE_TLS)")
	fs.StringVar(&x.CAFile, "envoy-rls-xds-ca-file", x.CAFile, "PEM CA verifying the control plane (CONFIG_GRPC_XDS_SERVER_TLS_CACERT); default: the system's")
	fs.StringVar(&x.CertFile, "envoy-rls-xds-cert-file", x.CertFile, "PEM client certificate for mutual TLS (CONFIG_GRPC_XDS_CLIENT_TLS_CERT); re-read at every connect")
	fs.StringVar(&x.KeyFile, "envoy-rls-xds-key-file", x.KeyFile, "PEM key of --envoy-rls-xds-cert-file (CONFIG_GRPC_XDS_CLIENT_TLS_KEY)")
	fs.StringVar(&x.ServerName, "envoy-rls-xds-server-name", x.ServerName, "name the control plane's certificate must hold (CONFIG_GRPC_XDS_SERVER_TLS_SAN); default: the host of --envoy-rls-xds-server")
	fs.DurationVar(&x.BackoffInitial, "envoy-rls-xds-backoff-initial", x.BackoffInitial, "first wait before reconnecting to the control plane; doubles per failure (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL)")
	fs.DurationVar(&x.BackoffMax, "envoy-rls-xds-backoff-max", x.BackoffMax, "longest wait before reconnecting (XDS_CLIENT_BACKOFF_MAX_INTERVAL)")
	fs.IntVar(&x.MaxRecvMsgBytes, "envoy-rls-xds-max-msg-bytes", x.MaxRecvMsgBytes, "largest response accepted from the control plane (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES)")
	fs.BoolVar(await, "envoy-rls-await-config", *await, "with --envoy-rls-xds-server: until the first configuration arrives, report the node not ready (the service's gRPC health NOT_SERVING, /healthz 503); the service answers UNAVAILABLE until then either way (false: FORCE_START_WITHOUT_INITIAL_CONFIG=true)")
	fs.BoolVar(needsDomains, "envoy-rls-healthy-needs-domains", *needsDomains, "report the node not ready whenever the Envoy rules in force, from files or a control plane, have no domains, not only before the first (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED); once rules are in force the service answers meanwhile, limiting nothing")
}

// kvFlag is a map set from comma-separated key=value pairs.
type kvFlag map[string]string

func (f *kvFlag) String() string {
	if f == nil || len(*f) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(*f)) {
		parts = append(parts, k+"="+(*f)[k])
	}
	return strings.Join(parts, ",")
}

func (f *kvFlag) Set(s string) error {
	m, err := parseKV(s, "=")
	if err != nil {
		return err
	}
	*f = m
	return nil
}

// parseKV reads "k1<sep>v1,k2<sep>v2"; empty is no pairs.
func parseKV(s, sep string) (map[string]string, error) {
	m := map[string]string{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key%svalue", pair, sep)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m, nil
}
