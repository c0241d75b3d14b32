// Package browser drives headless Chromium in tests of the operator's
// console (/ui/): it starts the browser, collects every console error,
// warning, uncaught exception and dialog of the page, waits for the DOM with
// a deadline, takes screenshots and tells a blank one. The console's own
// test (a fake backend) and tests against a real cluster share it.
//
// A test calls Start, which skips the test plainly when no Chromium is
// installed (scripts/install-chromium.sh installs one) and stops the browser
// and every goroutine it started in t.Cleanup:
//
//	b := browser.Start(t, browser.Options{})
//	b.Navigate(nodeURL + "/ui/")
//	b.WaitFor(10*time.Second, "three members alive",
//		`document.querySelectorAll('#members tr[data-state="alive"]').length === 3`)
//	b.RequireNoProblems() // no console error, warning, exception or dialog
//	browser.AssertNotBlank(t, b.Screenshot(filepath.Join(t.TempDir(), "ui.png")), 64)
package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// SkipMessage is what a test says when it skips for want of a browser.
const SkipMessage = "chromium not installed: browser test skipped"

// binaries are the names Chromium goes by on Debian, Ubuntu and Google's
// packages, in the order they are tried.
var binaries = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// Find returns the path of an installed Chromium, or "" if there is none.
func Find() string {
	for _, name := range binaries {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Options tune Start. The zero value is usable.
type Options struct {
	// Width and Height size the window, in CSS pixels; default 1440×1000,
	// a laptop's screen, on which the console must read at a glance.
	Width, Height int
	// Timeout bounds each action run through the Browser (navigations,
	// clicks, evaluations); default 20s. Waits take their own bound.
	Timeout time.Duration
}

// Problem is something the page should not have said: a console.error or
// console.warn call, an uncaught exception, a browser log entry at warning
// level or above (a failed request, a CSP violation), or a dialog.
type Problem struct {
	Kind   string // "console", "exception", "log" or "dialog"
	Level  string // console type or log level
	Source string // log entries: "network", "security", "javascript", …
	Text   string
	URL    string
}

func (p Problem) String() string {
	s := p.Kind + " " + p.Level
	if p.Source != "" {
		s += " (" + p.Source + ")"
	}
	s += ": " + p.Text
	if p.URL != "" {
		s += " [" + p.URL + "]"
	}
	return s
}

// Browser is one headless Chromium with one tab, bound to a test. Its
// methods fail the test on error; they are not safe for concurrent use
// (the tab is one), except Problems and TakeProblems.
type Browser struct {
	t       testing.TB
	ctx     context.Context
	timeout time.Duration

	mu       sync.Mutex
	problems []Problem

	dialogs chan struct{}
}

func (o Options) withDefaults() Options {
	if o.Width <= 0 || o.Height <= 0 {
		o.Width, o.Height = 1440, 1000
	}
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Second
	}
	return o
}

// Start starts headless Chromium with one blank tab for t, or skips t with
// SkipMessage when none is installed. The browser, its process and the
// goroutines Start adds are stopped in t.Cleanup.
func Start(t testing.TB, opts Options) *Browser {
	t.Helper()
	path := Find()
	if path == "" {
		t.Skip(SkipMessage)
	}
	opts = opts.withDefaults()
	b := &Browser{t: t, timeout: opts.Timeout, dialogs: make(chan struct{}, 8)}
	alloc := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(opts.Width, opts.Height),
	)
	if os.Geteuid() == 0 {
		// Chromium refuses to run as root with its sandbox, and CI
		// containers run as root; the pages tested are our own.
		alloc = append(alloc, chromedp.NoSandbox)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), alloc...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithListener(b.listen))
	b.ctx = ctx
	var wg sync.WaitGroup
	wg.Go(b.dismissDialogs)
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := chromedp.Cancel(stop); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("closing chromium: %v", err)
		}
		cancelTab()
		cancelAlloc() // waits for the process to exit and its profile to go
		wg.Wait()
	})
	// The first action starts the browser and binds its life to ctx, so it
	// must not carry a deadline (later actions do).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return b
}

// listen runs on the tab's event loop: it must return at once and run no
// command, so a dialog is only recorded here and dismissed elsewhere.
func (b *Browser) listen(ev any) {
	var p Problem
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		switch ev.Type {
		case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeWarning, runtime.ConsoleAPICalledTypeAssert:
		default:
			return
		}
		p = Problem{Kind: "console", Level: string(ev.Type), Text: argsText(ev.Args)}
	case *runtime.EventExceptionThrown:
		p = Problem{Kind: "exception", Level: "error", Text: exceptionText(ev.ExceptionDetails)}
		if d := ev.ExceptionDetails; d != nil {
			p.URL = fmt.Sprintf("%s:%d", d.URL, d.LineNumber+1)
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		if e == nil || (e.Level != log.EntryLevelError && e.Level != log.EntryLevelWarning) {
			return
		}
		p = Problem{Kind: "log", Level: string(e.Level), Source: string(e.Source), Text: e.Text, URL: e.URL}
	case *page.EventJavascriptDialogOpening:
		p = Problem{Kind: "dialog", Level: string(ev.Type), Text: ev.Message, URL: ev.URL}
		select {
		case b.dialogs <- struct{}{}:
		default: // one pending dismissal closes the dialog already open
		}
	default:
		return
	}
	b.mu.Lock()
	b.problems = append(b.problems, p)
	b.mu.Unlock()
}

// dismissDialogs closes each dialog the page opens, which would otherwise
// block the page and every later action; the dialog is already recorded as
// a Problem.
func (b *Browser) dismissDialogs() {
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.dialogs:
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			cancel()
		}
	}
}

func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		switch {
		case a == nil:
		case len(a.Value) > 0:
			parts = append(parts, strings.Trim(string(a.Value), `"`))
		default:
			parts = append(parts, a.Description)
		}
	}
	return strings.Join(parts, " ")
}

func exceptionText(d *runtime.ExceptionDetails) string {
	if d == nil {
		return "exception without details"
	}
	if d.Exception != nil && d.Exception.Description != "" {
		return d.Text + " " + d.Exception.Description
	}
	return d.Text
}

// Context is the tab's chromedp context, for actions this package has no
// helper for; bound it with context.WithTimeout.
func (b *Browser) Context() context.Context { return b.ctx }

// Do runs steps in order within the Browser's timeout, and fails the test on
// the first error.
func (b *Browser) Do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browser: %v; page problems so far: %v", err, b.Problems())
	}
}

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.Do(chromedp.Navigate(url))
}

// Eval evaluates the JavaScript expression js in the page and decodes its
// value into T, failing the test on an error or an exception.
func Eval[T any](b *Browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("browser: evaluating %s: %v", js, err)
	}
	return v
}

// WaitFor waits until the JavaScript expression js is truthy in the page,
// polling it every 50ms in the page for at most within, and fails the test
// saying what was awaited otherwise: a bounded wait, never a guessed sleep.
func (b *Browser) WaitFor(within time.Duration, what, js string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within+b.timeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js,
		chromedp.WithPollingTimeout(within), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		b.t.Fatalf("browser: not within %s: %s (%s): %v; page problems so far: %v", within, what, js, err, b.Problems())
	}
}

// WaitVisible waits at most within for an element matching the CSS
// selector sel to be visible.
func (b *Browser) WaitVisible(within time.Duration, sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, within)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("browser: %s not visible within %s: %v; page problems so far: %v", sel, within, err, b.Problems())
	}
}

// Problems returns what the page said that it should not have, so far.
func (b *Browser) Problems() []Problem {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Problem(nil), b.problems...)
}

// TakeProblems returns the problems so far and forgets them, so that a test
// can judge each of its steps apart.
func (b *Browser) TakeProblems() []Problem {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// RequireNoProblems fails the test for each problem so far that no allow
// func accepts, and forgets them all. A test allows exactly what its step
// provoked (say, the 401 it made the server answer), nothing wider.
func (b *Browser) RequireNoProblems(allow ...func(Problem) bool) {
	b.t.Helper()
next:
	for _, p := range b.TakeProblems() {
		for _, ok := range allow {
			if ok(p) {
				b.t.Logf("expected page problem: %s", p)
				continue next
			}
		}
		b.t.Errorf("page problem: %s", p)
	}
}

// NetworkStatus accepts the browser's "Failed to load resource" entry for an
// HTTP answer with one of codes, which Chromium logs for every failed fetch
// even when the page handles it.
func NetworkStatus(codes ...int) func(Problem) bool {
	return func(p Problem) bool {
		if p.Kind != "log" || p.Source != "network" {
			return false
		}
		for _, c := range codes {
			if strings.Contains(p.Text, fmt.Sprintf("status of %d ", c)) {
				return true
			}
		}
		return false
	}
}

// NetworkFailure accepts the browser's entry for a request that got no HTTP
// answer at all (net::ERR_…): the server down or the connection cut.
func NetworkFailure(p Problem) bool {
	return p.Kind == "log" && p.Source == "network" && strings.Contains(p.Text, "net::ERR_")
}

// Screenshot captures the whole page (beyond the viewport) as a PNG, writes
// it to path and returns it.
func (b *Browser) Screenshot(path string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, b.timeout)
	defer cancel()
	img, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG, lossless
	if err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
	if err := os.WriteFile(path, img, 0o644); err != nil {
		b.t.Fatalf("browser: saving screenshot: %v", err)
	}
	b.t.Logf("screenshot: %s", path)
	return img
}

// AssertNotBlank fails t unless img is a PNG of more than minColours
// distinct colours: a page that failed to render (white, or one colour with
// an error text) has a handful at most; a rendered dashboard has hundreds.
func AssertNotBlank(t testing.TB, img []byte, minColours int) {
	t.Helper()
	m, err := png.Decode(bytes.NewReader(img))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
		return // for a testing.TB whose Fatalf returns
	}
	r := m.Bounds()
	colours := map[[4]uint32]struct{}{}
	for y := r.Min.Y; y < r.Max.Y && len(colours) <= minColours; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := m.At(x, y).RGBA()
			colours[[4]uint32{cr, cg, cb, ca}] = struct{}{}
		}
	}
	if len(colours) <= minColours {
		t.Errorf("screenshot %dx%d looks blank: %d distinct colours, want more than %d", r.Dx(), r.Dy(), len(colours), minColours)
	}
}
