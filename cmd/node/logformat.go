package main

import (
	"io"
	"log/slog"
	"strings"
	"time"
)

// logHandler writes the node's log to w in format (--log-format): text,
// json, or json-ratelimit.
func logHandler(w io.Writer, format string, level slog.Level) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "json":
		return slog.NewJSONHandler(w, opts)
	case "json-ratelimit":
		opts.ReplaceAttr = ratelimitKeys
		return slog.NewJSONHandler(w, opts)
	}
	return slog.NewTextHandler(w, opts)
}

// ratelimitKeys renames slog's built-in keys to those of
// envoyproxy/ratelimit's JSON log (logrus's JSONFormatter with its field
// map: @timestamp in RFC 3339 with nanoseconds, @message, and logrus's
// lower-case level names), so that log pipelines keyed on them go on
// working when the ratelimit mode replaces it.
func ratelimitKeys(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		return slog.String("@timestamp", a.Value.Time().Format(time.RFC3339Nano))
	case slog.MessageKey:
		return slog.Attr{Key: "@message", Value: a.Value}
	case slog.LevelKey:
		level, _ := a.Value.Any().(slog.Level)
		name := strings.ToLower(level.String())
		if level == slog.LevelWarn {
			name = "warning"
		}
		return slog.String("level", name)
	}
	return a
}
