package tracing

import (
	"log/slog"

	"go.opentelemetry.io/otel"

	"github.com/peerlimit/peerlimit/internal/logging"
)

// LogErrors returns an OpenTelemetry error handler that writes to log, at
// most one line a second: a collector that is down fails every export,
// and the SDK reports each. OpenTelemetry's handler is the process's
// (otel.SetErrorHandler), so the program sets it, once, as cmd/node does;
// left unset, the SDK writes to the standard logger.
func LogErrors(log *slog.Logger) otel.ErrorHandler {
	gate := &logging.Gate{}
	return otel.ErrorHandlerFunc(func(err error) {
		if gate.Allow() {
			log.Warn("tracing: exporting spans failed; they are dropped (at most one such line a second)", "err", err)
		}
	})
}
