package console_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/peerlimit/peerlimit/internal/testkit/browser"
	"github.com/peerlimit/peerlimit/internal/testkit/testcluster"
	"github.com/peerlimit/peerlimit/node"
)

// TestConsoleOnARealCluster is the console as an operator meets it: three
// real nodes on loopback (gossip, gRPC between them), the page served by
// one of them in headless Chromium. A key checked through another node
// shows up in the top keys, the inspect box reads its count from its
// owner, and a killed node turns failed on the page within seconds, with
// no console error, warning or exception on the way.
func TestConsoleOnARealCluster(t *testing.T) {
	if browser.Find() == "" {
		t.Skip(browser.SkipMessage)
	}
	c := testcluster.New(t, 3, nil)
	page, ingress := c.Node(0), c.Node(1)
	key := keyOwnedBy(t, ingress, "node-2")
	b := browser.Start(t, browser.Options{})
	b.Navigate("http://" + page.HTTPAddr() + "/ui/")
	b.WaitFor(within, "three members alive",
		`document.querySelectorAll('#members tr[data-state="alive"]').length === 3`)

	// Checked through node-1, decided by node-2, listed by node-0's page.
	for range 7 {
		resp, err := http.Post("http://"+ingress.HTTPAddr()+"/v1/check", "application/json",
			strings.NewReader(fmt.Sprintf(`{"key":%q,"limit":5,"window_ms":3600000,"algorithm":"SLIDING_WINDOW_LOG"}`, key)))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	keySel := fmt.Sprintf(`#top-checks li[data-key=%q]`, key)
	b.WaitFor(within, "the key among the top keys", fmt.Sprintf(`document.querySelector(%q) !== null`, keySel))
	b.WaitFor(within, "its denials too", fmt.Sprintf(`document.querySelector(%q) !== null`,
		fmt.Sprintf(`#top-denials [data-key=%q]`, key)))

	// Clicking it inspects it on its owner: 5 hits held, nothing consumed.
	b.Do(chromedp.Click(chromedp.CSS(keySel + " button")))
	b.WaitFor(within, "the inspect box shows the owner's count", `(() => {
		const c = document.querySelector('#inspect-result .count');
		return c !== null && c.textContent.trim() === '5' && document.querySelector('#inspect-result').textContent.includes('node-2');
	})()`)

	c.Kill(2)
	b.WaitFor(10*time.Second, "the killed node shown not alive",
		`(() => { const r = document.querySelector('#members tr[data-member="node-2"]');
			return r !== null && r.getAttribute('data-state') !== 'alive'; })()`)
	b.RequireNoProblems()
	browser.AssertNotBlank(t, b.Screenshot(screenshotPath(t, "console-cluster.png")), 64)
}

// keyOwnedBy returns a key the ring, as via sees it, gives to owner.
func keyOwnedBy(t *testing.T, via *node.Node, owner string) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("tenant:%d", i); via.Ring().Owner(k).ID == owner {
			return k
		}
	}
	t.Fatalf("no key of %s's", owner)
	return ""
}
