package cluster

import (
	"bytes"
	"context"
	"log/slog"
)

// logBridge feeds memberlist's log lines ("[WARN] memberlist: ...") into
// slog at the level each line names.
type logBridge struct{ log *slog.Logger }

func (b *logBridge) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo, "[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError} {
		if i := bytes.Index(line, []byte(prefix)); i >= 0 {
			level = l
			line = bytes.TrimSpace(line[i+len(prefix):])
			break
		}
	}
	b.log.Log(context.Background(), level, string(line), "source", "memberlist")
	return len(p), nil
}
