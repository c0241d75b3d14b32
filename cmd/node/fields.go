package main

import (
	"flag"
	"reflect"
	"strings"

	"github.com/peerlimit/peerlimit/node"
)

// Libraries name the field of node.Config a bad value is in
// ("Limiter.MaxKeys", package internal/field); peerlimit-node adds how
// its user set it: "Limiter.MaxKeys (--max-keys)".

// textFlags are the fields set from a flag read as text and converted
// afterwards (rawFlags), or from the environment alone: the address of
// such a field is not the flag's.
var textFlags = map[string]string{
	"Route.Fallback":             "--fallback",
	"Limiter.Overflow":           "--overflow",
	"GossipProfile":              "--gossip-profile",
	"GossipKey":                  "--gossip-key",
	"Join":                       "--join",
	"Security.RequireClientCert": "--tls-client-auth=require",
	"Security.ClusterSecrets":    "PEERLIMIT_CLUSTER_SECRET",
	"Security.APITokens":         "PEERLIMIT_API_TOKEN",
	"EnvoyRLS":                   "the --envoy-rls-* flags",
}

// fieldNames returns how peerlimit-node names each field of c: its path
// and the flag that sets it. A flag defined on a field
// (fs.IntVar(&c.Limiter.MaxKeys, "max-keys", …)) is found by the field's
// address, so a new flag needs no entry anywhere; the others are
// textFlags. A field no flag sets keeps its path.
func fieldNames(fs *flag.FlagSet, c *node.Config) func(path string) string {
	byPath := flagsByField(fs, c)
	return func(path string) string {
		base, _, _ := strings.Cut(path, "[") // Security.ClusterSecrets[0]
		if flag, ok := byPath[base]; ok {
			return path + " (" + flag + ")"
		}
		return path
	}
}

// flagsByField maps each field of c that a flag of fs sets to the flag.
func flagsByField(fs *flag.FlagSet, c *node.Config) map[string]string {
	byPath := map[string]string{}
	for path, flag := range textFlags {
		byPath[path] = flag
	}
	paths := fieldPaths(reflect.ValueOf(c).Elem(), "")
	fs.VisitAll(func(f *flag.Flag) {
		v := reflect.ValueOf(f.Value)
		if v.Kind() != reflect.Pointer {
			return
		}
		if path, ok := paths[v.Pointer()]; ok {
			byPath[path] = "--" + f.Name
		}
	})
	return byPath
}

// fieldPaths maps the address of every field of the struct v, nested
// structs' fields included, to its path from v. Only leaves are kept: a
// struct and its first field share an address, and a flag sets a leaf.
// An embedded struct's fields are v's own, as Go promotes them and as
// their Validate names them (node.Config embeds configs.Config).
func fieldPaths(v reflect.Value, prefix string) map[uintptr]string {
	out := map[uintptr]string{}
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		path := prefix + sf.Name
		if sf.Anonymous && f.Kind() == reflect.Struct {
			for addr, p := range fieldPaths(f, prefix) {
				out[addr] = p
			}
			continue
		}
		if f.Kind() == reflect.Struct {
			for addr, p := range fieldPaths(f, path+".") {
				out[addr] = p
			}
			continue
		}
		out[f.Addr().Pointer()] = path
	}
	return out
}
