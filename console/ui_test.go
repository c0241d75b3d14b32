package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/console"
)

// The browser test starts Chromium, an HTTP server and listeners: each must
// be gone when the tests end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, h http.Handler, method, path string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestHandlerServesAssets(t *testing.T) {
	h := console.Handler()
	for path, ct := range map[string]string{
		"/ui/":            "text/html; charset=utf-8",
		"/ui/index.html":  "text/html; charset=utf-8",
		"/ui/app.js":      "text/javascript; charset=utf-8",
		"/ui/style.css":   "text/css; charset=utf-8",
		"/ui/favicon.svg": "image/svg+xml",
	} {
		resp := get(t, h, http.MethodGet, path)
		body, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Equal(t, ct, resp.Header.Get("Content-Type"), path)
		assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"), path)
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
		assert.NotEmpty(t, resp.Header.Get("ETag"), path)
		assert.NotEmpty(t, body, path)
	}
	index := get(t, h, http.MethodGet, "/ui/")
	body, _ := io.ReadAll(index.Body)
	assert.Contains(t, string(body), `<script src="app.js" defer></script>`)
}

func TestHandlerCSPIsStrict(t *testing.T) {
	csp := get(t, console.Handler(), http.MethodGet, "/ui/").Header.Get("Content-Security-Policy")
	for _, want := range []string{
		"default-src 'none'", "script-src 'self'", "style-src 'self'",
		"connect-src 'self'", "img-src 'self'", "frame-ancestors 'none'",
	} {
		assert.Contains(t, csp, want)
	}
	for _, never := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*", "data:"} {
		assert.NotContains(t, csp, never)
	}
}

func TestHandlerRefusesWhatItDoesNotServe(t *testing.T) {
	h := console.Handler()
	for _, path := range []string{"/ui/nope.js", "/ui/ui.go", "/ui/ui/app.js", "/ui/app.js/", "/other", "/ui"} {
		assert.Equal(t, http.StatusNotFound, get(t, h, http.MethodGet, path).StatusCode, path)
	}
	post := get(t, h, http.MethodPost, "/ui/app.js")
	assert.Equal(t, http.StatusMethodNotAllowed, post.StatusCode)
	assert.Equal(t, "GET, HEAD", post.Header.Get("Allow"))
	head := get(t, h, http.MethodHead, "/ui/")
	assert.Equal(t, http.StatusOK, head.StatusCode)
}

// no-cache costs a round trip, not a download: the ETag revalidates.
func TestHandlerRevalidatesWithETag(t *testing.T) {
	h := console.Handler()
	etag := get(t, h, http.MethodGet, "/ui/app.js").Header.Get("ETag")
	resp := get(t, h, http.MethodGet, "/ui/app.js", "If-None-Match", etag)
	assert.Equal(t, http.StatusNotModified, resp.StatusCode)
}

// The CSP would block inline script and style anyway; these keep the page
// working under it, loading nothing from elsewhere, and keep keys (user
// data) out of any HTML parser.
func TestAssetsObeyTheirOwnPolicy(t *testing.T) {
	index := readAsset(t, "ui/index.html")
	assert.NotRegexp(t, regexp.MustCompile(`<script(?:\s+defer)?>`), index, "inline script")
	assert.NotRegexp(t, regexp.MustCompile(`(?i)\son[a-z]+=`), index, "inline event handler")
	assert.NotRegexp(t, regexp.MustCompile(`(?i)\sstyle=`), index, "inline style attribute")
	assert.NotContains(t, index, "<style")
	for _, name := range []string{"ui/index.html", "ui/app.js", "ui/style.css"} {
		assert.NotRegexp(t, regexp.MustCompile(`(?:src|href)=["']?(?:https?:)?//`), readAsset(t, name), "%s loads from elsewhere", name)
		assert.NotContains(t, readAsset(t, name), "@import", name)
	}
	js := readAsset(t, "ui/app.js")
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'"} {
		assert.NotContains(t, js, sink)
	}
	assert.True(t, strings.Contains(js, "'../v1/'"), "the API is addressed relative to /ui/")
}

func readAsset(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}
