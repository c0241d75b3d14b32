package httpapi

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"time"
)

// The profiling routes are served from runtime/pprof directly rather than
// by importing net/http/pprof: that package's init registers its handlers
// on http.DefaultServeMux, so every program embedding a node would expose
// profiles on any server using the default mux, whatever --pprof says.
// These routes exist only on the node's own mux, and only when enabled.
// They serve what `go tool pprof` and `go tool trace` fetch:
//
//	/debug/pprof/                 index of the profiles
//	/debug/pprof/{name}?debug=N   heap, goroutine, allocs, block, mutex, threadcreate
//	/debug/pprof/profile?seconds= CPU profile (default 30s)
//	/debug/pprof/trace?seconds=   execution trace (default 1s)
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/{$}", pprofIndex)
	mux.HandleFunc("GET /debug/pprof/profile", pprofCPU)
	mux.HandleFunc("GET /debug/pprof/trace", pprofTrace)
	mux.HandleFunc("GET /debug/pprof/{name}", pprofNamed)
}

// maxProfileDuration bounds ?seconds=: a forgotten request must not keep
// the profiler (one at a time per process) busy for hours.
const maxProfileDuration = 5 * time.Minute

func pprofIndex(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, "<html><head><title>/debug/pprof/</title></head><body><p>Profiles of this peerlimit node:</p><ul>\n")
	for _, p := range pprof.Profiles() {
		name := html.EscapeString(p.Name())
		fmt.Fprintf(w, "<li><a href=\"%s?debug=1\">%s</a> (%d)</li>\n", name, name, p.Count())
	}
	fmt.Fprint(w, "<li><a href=\"profile?seconds=30\">profile</a>: CPU, 30s</li>\n<li><a href=\"trace?seconds=1\">trace</a>: execution trace, 1s</li>\n</ul></body></html>\n")
}

func pprofNamed(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, fmt.Sprintf("unknown profile %q", name), http.StatusNotFound)
		return
	}
	debug, _ := strconv.Atoi(r.FormValue("debug"))
	if name == "heap" && r.FormValue("gc") != "" {
		runtime.GC()
	}
	if debug > 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	}
	_ = p.WriteTo(w, debug) // the client may be gone; nothing to do
}

// profileDuration reads ?seconds=, with a default, bounded.
func profileDuration(r *http.Request, def time.Duration) (time.Duration, error) {
	v := r.FormValue("seconds")
	if v == "" {
		return def, nil
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s <= 0 || s > maxProfileDuration.Seconds() {
		return 0, fmt.Errorf("seconds must be a number in (0, %g], got %q", maxProfileDuration.Seconds(), v)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// sleep waits d, or less if the client goes away.
func sleep(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// Only one CPU profile, and one trace, runs at a time in a process.
var (
	pprofCPU   = timedProfile("profile", "a CPU profile", 30*time.Second, pprof.StartCPUProfile, pprof.StopCPUProfile)
	pprofTrace = timedProfile("trace", "a trace", time.Second, trace.Start, trace.Stop)
)

// timedProfile serves a profile that records for ?seconds= (default def)
// into the response, as file.
func timedProfile(file, what string, def time.Duration, start func(io.Writer) error, stop func()) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		d, err := profileDuration(r, def)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="`+file+`"`)
		if err := start(w); err != nil {
			w.Header().Del("Content-Disposition")
			http.Error(w, "cannot start "+what+": "+err.Error(), http.StatusConflict)
			return
		}
		sleep(r, d)
		stop()
	}
}
