// Package console serves the operator's console: one page, at /ui/ on every
// node, that polls the node's JSON API (/v1/cluster, /v1/inspect) and shows
// the cluster's members, their rates, charts of the last five minutes, the
// hottest keys and a key inspector. What it shows: docs/console.md.
//
// The assets are embedded in the binary (a FROM scratch image has no files
// to serve) and hold no data, so they are served without a token: the page
// asks for one when the API answers 401. Nothing is fetched from elsewhere
// at run time, and the Content-Security-Policy says so to the browser.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed ui
var assets embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// csp allows only the page's own origin, and no inline script or style:
// keys are user data, so even a rendering bug must not be able to run
// script, and nothing may be loaded from a CDN.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'"

// contentTypes is fixed here rather than taken from the host's MIME tables,
// which differ between machines and are absent from a scratch image.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console's assets under Prefix: GET /ui/ is the page,
// /ui/app.js, /ui/style.css and /ui/favicon.svg its parts; anything else
// under the prefix is 404. Mount it as mux.Handle("GET /ui/", Handler()).
// It is safe for concurrent use.
func Handler() http.Handler {
	files := loadAssets()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		a, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		// no-cache, not no-store: the browser revalidates with the ETag, so
		// a node upgraded in place serves its new page at once, cheaply.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}

// loadAssets reads every embedded file once. A missing or unreadable asset
// is a build error, hence the panics: the embed directive guarantees them.
func loadAssets() map[string]asset {
	files := map[string]asset{}
	err := fs.WalkDir(assets, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			panic("console: no content type for embedded asset " + p)
		}
		sum := sha256.Sum256(body)
		files[strings.TrimPrefix(p, "ui/")] = asset{
			body:        body,
			contentType: ct,
			etag:        `"` + hex.EncodeToString(sum[:8]) + `"`,
		}
		return nil
	})
	if err != nil {
		panic("console: reading embedded assets: " + err.Error())
	}
	return files
}
