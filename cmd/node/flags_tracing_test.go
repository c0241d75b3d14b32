package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/tracing"
)

// The tracing flags fill node.Config.Tracing, from the command line or
// their PEERLIMIT_* twins, and a bad value names its flag.
func TestTracingFlags(t *testing.T) {
	o, err := parseFlags(onLoopback, func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, tracing.DefaultConfig(), o.node.Tracing)

	env := map[string]string{"PEERLIMIT_TRACING": "true", "PEERLIMIT_TRACING_PROTOCOL": "grpc", "PEERLIMIT_TRACING_ENDPOINT": "otel:4317",
		"PEERLIMIT_TRACING_INSECURE": "true", "PEERLIMIT_TRACING_SERVICE_NAME": "rls", "PEERLIMIT_TRACING_SERVICE_NAMESPACE": "edge",
		"PEERLIMIT_TRACING_SERVICE_INSTANCE_ID": "pod-1", "PEERLIMIT_TRACING_SAMPLING_RATE": "0.25"}
	o, err = parseFlags(append([]string{"--tracing-sampling-rate", "0.5"}, onLoopback...), func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, tracing.Config{Enabled: true, Protocol: "grpc", Endpoint: "otel:4317", Insecure: true, ServiceName: "rls",
		ServiceNamespace: "edge", InstanceID: "pod-1", SamplingRate: 0.5}, o.node.Tracing, "a flag beats the environment")

	_, err = parseFlags(append([]string{"--tracing-sampling-rate", "1.5", "--tracing-protocol", "zipkin"}, onLoopback...),
		func(string) string { return "" }, io.Discard)
	assert.ErrorContains(t, err, "Tracing.SamplingRate (--tracing-sampling-rate) must be in [0, 1], got 1.5")
	assert.ErrorContains(t, err, `Tracing.Protocol (--tracing-protocol) must be "grpc" or "http", got "zipkin"`)
}
