package browser_test

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/peerlimit/peerlimit/internal/testkit/browser"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A page that misbehaves in every way the collector watches for: if these
// were not caught, "no problems" in the console's tests would prove nothing.
const badPage = `<!doctype html><title>bad</title>
<img src="/missing.png" alt="">
<script>
console.log('fine');
console.warn('a warning');
console.error('an error');
setTimeout(() => { throw new Error('boom'); }, 0);
setTimeout(() => { alert('hello'); document.title = 'after alert'; }, 10);
</script>`

func TestBrowserCollectsEveryProblem(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, badPage)
	}))
	t.Cleanup(srv.Close)
	b := browser.Start(t, browser.Options{Width: 800, Height: 600})
	b.Navigate(srv.URL + "/")
	// The alert is dismissed by the Browser, or the page would stay blocked.
	b.WaitFor(5*time.Second, "the page past its alert", `document.title === 'after alert'`)
	want := []string{
		"console warning: a warning",
		"console error: an error",
		"exception error: Uncaught Error: boom",
		"dialog alert: hello",
		"log error (network): Failed to load resource: the server responded with a status of 404",
	}
	wait.For(t, 5*time.Second, func() (bool, string) {
		got := fmt.Sprint(b.Problems())
		for _, w := range want {
			if !strings.Contains(got, w) {
				return false, fmt.Sprintf("problems %s lack %q", got, w)
			}
		}
		return true, ""
	})
	for _, p := range b.Problems() {
		if strings.Contains(p.Text, "fine") {
			t.Errorf("console.log reported as a problem: %s", p)
		}
	}
	if taken := b.TakeProblems(); len(taken) < len(want) || len(b.Problems()) != 0 {
		t.Errorf("TakeProblems returned %d problems and left %d", len(taken), len(b.Problems()))
	}
	png := b.Screenshot(filepath.Join(t.TempDir(), "bad.png"))
	if len(png) == 0 {
		t.Error("empty screenshot")
	}
}

func TestNetworkMatchers(t *testing.T) {
	p401 := browser.Problem{Kind: "log", Level: "error", Source: "network",
		Text: "Failed to load resource: the server responded with a status of 401 (Unauthorized)"}
	cut := browser.Problem{Kind: "log", Level: "error", Source: "network",
		Text: "Failed to load resource: net::ERR_EMPTY_RESPONSE"}
	csp := browser.Problem{Kind: "log", Level: "error", Source: "security", Text: "Refused to load the script"}
	if !browser.NetworkStatus(401)(p401) || browser.NetworkStatus(404, 503)(p401) {
		t.Error("NetworkStatus matches the wrong codes")
	}
	if !browser.NetworkFailure(cut) || browser.NetworkFailure(p401) || browser.NetworkFailure(csp) || browser.NetworkStatus(401)(csp) {
		t.Error("network matchers accept what they must not")
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) { r.Errorf(format, a...) }

func encode(t *testing.T, colours int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for y := 0; y < 64; y++ {
		for x := 0; x < 64; x++ {
			img.Set(x, y, color.RGBA{R: uint8((x + 64*y) % colours), A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestAssertNotBlank(t *testing.T) {
	for _, c := range []struct {
		colours int
		blank   bool
	}{{1, true}, {8, true}, {200, false}} {
		r := &recorder{TB: t}
		browser.AssertNotBlank(r, encode(t, c.colours), 16)
		if got := len(r.failed) > 0; got != c.blank {
			t.Errorf("%d colours: judged blank %v, want %v (%v)", c.colours, got, c.blank, r.failed)
		}
	}
	r := &recorder{TB: t}
	browser.AssertNotBlank(r, []byte("not a png"), 16)
	if len(r.failed) == 0 {
		t.Error("a non-PNG passed")
	}
}
