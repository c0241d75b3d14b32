package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// LOG_FORMAT=json in the ratelimit mode writes upstream's keys, so log
// pipelines built on envoyproxy/ratelimit's JSON keep their fields.
func TestRatelimitJSONLogHasUpstreamsKeys(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(logHandler(&buf, "json-ratelimit", slog.LevelDebug))
	log.Warn("config loaded", "domain", "edge")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
	assert.Equal(t, "config loaded", rec["@message"])
	assert.Equal(t, "warning", rec["level"], "logrus's name")
	assert.Equal(t, "edge", rec["domain"])
	ts, ok := rec["@timestamp"].(string)
	require.True(t, ok, "%v", rec)
	_, err := time.Parse(time.RFC3339Nano, ts)
	assert.NoError(t, err)
	assert.NotContains(t, rec, "msg")
	assert.NotContains(t, rec, "time")
}
