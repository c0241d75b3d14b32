package main

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/peerlimit/peerlimit/node"
)

// Every flag that sets a field of node.Config is named with that field
// in a validation error, however it was defined; every field textFlags
// lists exists.
func TestEveryConfigFlagNamesItsField(t *testing.T) {
	o := options{node: node.DefaultConfig()}
	var raw rawFlags
	fs := newFlagSet(io.Discard)
	defineClusterFlags(fs, &o.node, &raw)
	defineLimiterFlags(fs, &o.node, &raw)
	defineAPIFlags(fs, &o.node)
	defineProcessFlags(fs, &o, &raw)
	defineSecurityFlags(fs, &o.node.Security, &raw)

	byField := flagsByField(fs, &o.node)
	flags := map[string]bool{}
	for _, f := range byField {
		flags[f] = true
	}
	// Every flag whose value lives in node.Config: found by its address.
	start := reflect.ValueOf(&o.node).Pointer()
	end := start + reflect.TypeOf(o.node).Size()
	inConfig := 0
	fs.VisitAll(func(f *flag.Flag) {
		if v := reflect.ValueOf(f.Value); v.Kind() == reflect.Pointer && v.Pointer() >= start && v.Pointer() < end {
			inConfig++
			assert.True(t, flags["--"+f.Name], "--%s sets a field of node.Config but names none", f.Name)
		}
	})
	assert.Greater(t, inConfig, 40)
	assert.Equal(t, "--max-keys", byField["Limiter.MaxKeys"])
	assert.Equal(t, "--envoy-rls-near-limit-ratio", byField["EnvoyRLS.NearLimitRatio"])
	assert.Equal(t, "Security.ClusterSecrets[1] (PEERLIMIT_CLUSTER_SECRET)", fieldNames(fs, &o.node)("Security.ClusterSecrets[1]"))
	assert.Equal(t, "Logger", fieldNames(fs, &o.node)("Logger"), "no flag: the path alone")

	typ := reflect.TypeOf(node.Config{})
	for path := range textFlags {
		_, ok := typ.FieldByName(strings.Split(path, ".")[0])
		assert.True(t, ok, "textFlags names %s, which node.Config lacks", path)
	}
}
