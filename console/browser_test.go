package console_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/peerlimit/peerlimit/console"
	"github.com/peerlimit/peerlimit/internal/testkit/browser"
	"github.com/peerlimit/peerlimit/internal/testkit/wait"
)

// within bounds every wait for the page: it polls once a second, so a
// change shows within about two; the rest is slack for a loaded CI machine.
const within = 8 * time.Second

// TestConsoleInBrowser drives the page in headless Chromium against a fake
// backend that serves the contract, step by step as an operator would see
// it, and fails on any console error, warning, exception or dialog that a
// step did not provoke on purpose.
func TestConsoleInBrowser(t *testing.T) {
	started := time.Now()
	f := newFakeBackend()
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", console.Handler())
	f.routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close) // after the browser's cleanup: it closes first
	b := browser.Start(t, browser.Options{})

	b.Navigate(srv.URL + "/ui/")
	checkMembers(t, b, f)
	checkPollingMerges(t, b, f)
	checkTopAndInspect(t, b, f)
	// docs/console.png, the README's: every member alive, a key
	// inspected. PEERLIMIT_SCREENSHOT_DIR=dir keeps it (docs/console.md).
	browser.AssertNotBlank(t, b.Screenshot(screenshotPath(t, "console.png")), 64)
	checkKeysAreText(t, b, f)
	checkInspectErrors(t, b)
	checkConfigDiffers(t, b, f)
	checkMemberFails(t, b, f)
	checkDisconnected(t, b, f)
	checkToken(t, b, f)

	png := b.Screenshot(screenshotPath(t, "console-fake.png"))
	browser.AssertNotBlank(t, png, 64)
	b.RequireNoProblems()
	t.Logf("browser test took %s", time.Since(started).Round(time.Millisecond))
}

// screenshotPath is in the test's temporary directory, or in
// $PEERLIMIT_SCREENSHOT_DIR when set, to keep it for a look.
func screenshotPath(t *testing.T, name string) string {
	dir := os.Getenv("PEERLIMIT_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

// js quotes s as a JavaScript string literal (JSON is valid JavaScript).
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// fill sets the value of the input with id; chromedp.SetValue cannot set ""
// (it sets "undefined") and chromedp.Clear resets only the default value.
func fill(b *browser.Browser, id, v string) {
	b.Do(chromedp.Evaluate[chromedp.Void](`document.getElementById(` + js(id) + `).value = ` + js(v)))
}

func rowCell(id string, col int) string {
	return fmt.Sprintf(`(document.querySelector('#members tr[data-member=%s]')?.cells[%d]?.textContent ?? '')`, js(id), col)
}

func checkMembers(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	b.WaitFor(within, "three members, all alive",
		`document.querySelectorAll('#members tr[data-member]').length === 3 &&
		 [...document.querySelectorAll('#members tr[data-member]')].every(r => r.dataset.state === 'alive')`)
	b.WaitFor(within, "the health pill says all alive, in green",
		`document.getElementById('health').textContent === '3 of 3 members alive' &&
		 document.getElementById('health').classList.contains('pill-ok')`)
	if got := browser.Eval[string](b, `document.getElementById('self').textContent`); got != "node1" {
		t.Errorf("answered by %q, want node1", got)
	}
	// Columns: 4 checks/s, 5 denied/s: the means of the last 10 s.
	checks, denied := f.recent(0)
	if got, want := browser.Eval[string](b, rowCell("node1", 4)), fmtRate(checks); got != want {
		t.Errorf("node1 checks/s = %q, want %q (the mean of its last 10 s)", got, want)
	}
	if got, want := browser.Eval[string](b, rowCell("node1", 5)), fmtRate(denied); got != want {
		t.Errorf("node1 denied/s = %q, want %q (the mean of its last 10 s)", got, want)
	}
	if got := browser.Eval[string](b, rowCell("node2", 3)); got != "33%" {
		t.Errorf("node2's share of the ring = %q, want 33%%", got)
	}
	for _, chart := range []string{"route", "outcome", "p99", "degraded"} {
		b.WaitFor(within, chart+" chart has lines",
			`document.querySelectorAll('#chart-`+chart+` polyline').length > 0 &&
			 !document.querySelector('#chart-`+chart+` .nodata')`)
	}
	b.RequireNoProblems()
}

// checkPollingMerges moves the fake's clock: the page asks only for samples
// newer than the oldest of the members' newest (node3's: members sample at
// their own moments), and shows the newest without a reload.
func checkPollingMerges(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	newest := strconv.FormatInt(f.newest(2).TimeMS, 10)
	wait.For(t, within, func() (bool, string) {
		since, topParam, _, _, _ := f.seen()
		return since == newest && topParam == "10", fmt.Sprintf("page asked since_ms=%s&top=%s, want since_ms=%s&top=10", since, topParam, newest)
	})
	f.tick(3 * time.Second)
	checks, _ := f.recent(0)
	want := fmtRate(checks)
	b.WaitFor(within, "node1's checks/s over the 10 s before its newest sample, "+want, rowCell("node1", 4)+` === `+js(want))
	b.RequireNoProblems()
}

// fmtRate formats a rate as app.js's fmtRate does, below 1,000.
func fmtRate(v float64) string {
	if v >= 10 || v == math.Trunc(v) {
		return strconv.Itoa(int(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func checkTopAndInspect(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	hot := fmt.Sprintf(`#top-checks li[data-key=%s] button`, js(hotKey))
	b.WaitVisible(within, hot)
	if got := browser.Eval[string](b, `document.getElementById('top-span').textContent`); got != "last 45 s" {
		t.Errorf("top keys span %q, want %q", got, "last 45 s")
	}
	b.Do(chromedp.Click(chromedp.CSS(hot)))
	b.WaitFor(within, "the clicked key's count in #inspect-result .count",
		`document.querySelector('#inspect-result .count')?.textContent === '7' &&
		 document.getElementById('inspect-key').value === `+js(hotKey))
	fill(b, "inspect-limit", "5")
	b.Do(chromedp.Click(chromedp.CSS("#inspect-go")))
	b.WaitFor(within, "next allow time with a limit given",
		`document.getElementById('inspect-result').textContent.includes('next allowedin 4.1 s')`)
	_, _, key, limit, _ := f.seen()
	if key != hotKey || limit != "5" {
		t.Errorf("inspect asked key=%q limit=%q, want %q and 5", key, limit, hotKey)
	}
	text := browser.Eval[string](b, `document.getElementById('inspect-result').textContent`)
	for _, want := range []string{"node2", "node3", "17", "previous window3", "sliding window log · 10s", "1.2 s, 800 ms, 5 ms"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect result %q lacks %q", text, want)
		}
	}
	fill(b, "inspect-limit", "")
	b.RequireNoProblems()
}

// checkKeysAreText: a key is user data; one that is HTML must show as its
// text, create no element, run nothing, and travel URL-encoded.
func checkKeysAreText(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	find := `[...document.querySelectorAll('#top-checks li[data-key]')].find(li => li.dataset.key === ` + js(evilKey) + `)`
	b.WaitFor(within, "the HTML-looking key listed", find+`?.querySelector('button')?.textContent === `+js(evilKey))
	if n := browser.Eval[int](b, `document.querySelectorAll('main img').length`); n != 0 {
		t.Errorf("%d img elements in the page's main part: a key was parsed as HTML", n)
	}
	if got := browser.Eval[string](b, find+`.querySelector('.n').textContent`); got != "310 ±3" {
		t.Errorf("count of the key = %q, want %q (count and its error)", got, "310 ±3")
	}
	b.Do(chromedp.Evaluate[chromedp.Void](find + `.querySelector('button').click()`))
	b.WaitFor(within, "the HTML-looking key inspected, shown as text",
		`document.querySelector('#inspect-result dd.mono')?.textContent === `+js(evilKey)+` &&
		 document.querySelector('#inspect-result .count')?.textContent === '7'`)
	if _, _, key, _, _ := f.seen(); key != evilKey {
		t.Errorf("inspect asked key %q, want %q: not URL-encoded?", key, evilKey)
	}
	if n := browser.Eval[int](b, `document.querySelectorAll('main img').length`); n != 0 {
		t.Errorf("%d img elements after inspecting the key", n)
	}
	b.RequireNoProblems() // an alert would be a dialog problem here
}

// checkInspectErrors: a 503 and an unknown key read plainly in the box.
func checkInspectErrors(t *testing.T, b *browser.Browser) {
	t.Helper()
	fill(b, "inspect-key", downKey)
	b.Do(chromedp.Click(chromedp.CSS("#inspect-go")))
	b.WaitFor(within, "the 503 shown in the inspect box",
		`document.querySelector('#inspect-result .errbox')?.textContent ===
		 '503 UNAVAILABLE: owner node3 unreachable and no replica holds the key'`)
	b.RequireNoProblems(browser.NetworkStatus(http.StatusServiceUnavailable))
	fill(b, "inspect-key", "nobody:home")
	b.Do(chromedp.Click(chromedp.CSS("#inspect-go")))
	b.WaitFor(within, "a key without state said so",
		`document.getElementById('inspect-result').textContent.includes('The owner holds no state for this key.')`)
	b.RequireNoProblems()
}

// checkConfigDiffers: a member that serves other policies than the node
// answering is flagged in its row and in the health pill, as a failed
// one is, until it serves the same again.
func checkConfigDiffers(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	if got := browser.Eval[string](b, `document.querySelector('#members tr[data-member="node2"]')?.dataset.config`); got != "same" {
		t.Errorf("node2 data-config = %q, want same", got)
	}
	if got := browser.Eval[string](b, rowCell("node2", 13)); got != "envoy_rls fedcba9policies 0123456" {
		t.Errorf("node2's config cell %q, want both digests, short", got)
	}
	f.setPolicies("node2", "ba9876543210")
	b.WaitFor(within, "node2 flagged on another config",
		`document.querySelector('#members tr[data-member="node2"]')?.dataset.config === 'differs' &&
		 document.querySelector('#members tr[data-member="node2"] .digest.differs')?.dataset.source === 'policies'`)
	b.WaitFor(within, "the health pill says so, in amber",
		`document.getElementById('health').textContent === '3 of 3 members alive · 1 on another config' &&
		 document.getElementById('health').classList.contains('pill-warn')`)
	if got := browser.Eval[string](b, rowCell("node2", 13)); got != "envoy_rls fedcba9≠ policies ba98765" {
		t.Errorf("node2's config cell %q, want the differing digest marked", got)
	}
	f.setPolicies("node2", "0123456789ab")
	b.WaitFor(within, "the pill green again once node2 agrees",
		`document.getElementById('health').textContent === '3 of 3 members alive' &&
		 document.getElementById('health').classList.contains('pill-ok')`)
	b.RequireNoProblems()
}

func checkMemberFails(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	f.setState("node3", "failed")
	b.WaitFor(within, "node3 shown failed",
		`document.querySelector('#members tr[data-member="node3"]')?.dataset.state === 'failed'`)
	b.WaitFor(within, "the health pill turns amber",
		`document.getElementById('health').textContent === '2 of 3 members alive · 1 failed' &&
		 document.getElementById('health').classList.contains('pill-warn')`)
	if got := browser.Eval[string](b, rowCell("node3", 12)); !strings.Contains(got, "connection refused") {
		t.Errorf("node3's error cell %q, want the member's error", got)
	}
	if got := browser.Eval[string](b, rowCell("node3", 4)); got != "—" {
		t.Errorf("node3's checks/s %q, want — (no current sample)", got)
	}
	b.RequireNoProblems()
}

// checkDisconnected cuts every connection: the banner shows and polling
// goes on, so the page recovers by itself.
func checkDisconnected(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	f.setDown(true)
	b.WaitFor(within, "the disconnected banner",
		`!document.getElementById('banner').hidden &&
		 document.getElementById('banner').textContent.startsWith('Disconnected from the node, retrying')`)
	f.setDown(false)
	b.WaitFor(within, "the banner gone once the node answers again", `document.getElementById('banner').hidden`)
	b.RequireNoProblems(browser.NetworkFailure)
}

// checkToken turns on the token: the page stops polling, asks once, keeps
// the token in sessionStorage and sends it as a bearer token.
func checkToken(t *testing.T, b *browser.Browser, f *fakeBackend) {
	t.Helper()
	const token = "s3cret-token"
	f.setToken(token)
	b.WaitFor(within, "the token form", `!document.getElementById('token-form').hidden`)
	if n := browser.Eval[int](b, `document.querySelectorAll('#token-input').length`); n != 1 {
		t.Errorf("%d token inputs, want one", n)
	}
	b.RequireNoProblems(browser.NetworkStatus(http.StatusUnauthorized))
	b.Do(chromedp.SendKeys(chromedp.CSS("#token-input"), token), chromedp.Click(chromedp.CSS("#token-form button")))
	b.WaitFor(within, "the token form gone and the members back",
		`document.getElementById('token-form').hidden &&
		 document.getElementById('health').textContent.startsWith('2 of 3 members alive')`)
	if _, _, _, _, auth := f.seen(); auth != "Bearer "+token {
		t.Errorf("Authorization %q, want the bearer token", auth)
	}
	if got := browser.Eval[string](b, `sessionStorage.getItem('peerlimit.console.token')`); got != token {
		t.Errorf("sessionStorage holds %q, want the token", got)
	}
	b.Do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`#top-checks li[data-key=%s] button`, js(hotKey)))))
	b.WaitFor(within, "inspect works with the token",
		`document.querySelector('#inspect-result .count')?.textContent === '7' &&
		 document.querySelector('#inspect-result dd.mono')?.textContent === `+js(hotKey))
	b.RequireNoProblems()
}
