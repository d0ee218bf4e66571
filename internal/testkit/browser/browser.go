// Package browser starts headless Chromium for tests that drive a page as
// a person would (chromedp). scripts/test.sh installs Debian's chromium
// when it is missing; a test that needs it and finds none skips, or fails
// under CI=true.
//
// Only tests import this package.
package browser

import (
	"context"
	"os"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/toolbus/toolbus/internal/testkit"
)

// DefaultPath is where Debian's chromium package puts the browser.
const DefaultPath = "/usr/bin/chromium"

// Path returns the Chromium to run: $TOOLBUS_CHROMIUM, else DefaultPath.
// When it is not there the test skips, or fails under CI=true, where a
// skipped browser would hide the tests that need it.
func Path(tb testing.TB) string {
	tb.Helper()
	testkit.Heavy(tb, "headless Chromium")
	path := os.Getenv("TOOLBUS_CHROMIUM")
	if path == "" {
		path = DefaultPath
	}
	if _, err := os.Stat(path); err != nil {
		testkit.Missing(tb, "chromium is not installed (%v): run ./scripts/test.sh, which installs Debian's chromium package, or set TOOLBUS_CHROMIUM", err)
	}
	return path
}

// New starts a headless Chromium with a fresh profile and returns a
// chromedp context for one tab; the browser is stopped, and its process
// waited for, when the test ends. The flags keep Chromium from reaching
// out on its own (updates, sync, safe browsing): on a closed network
// those connections fail and slow everything down.
func New(tb testing.TB) context.Context {
	tb.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Path(tb)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(tb.Logf))
	// Start the browser now, so a failure to start is reported here.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		tb.Fatalf("start chromium: %v", err)
	}
	tb.Cleanup(func() {
		// Cancelling the tab's context closes the browser; cancelling
		// the allocator waits for its process to end.
		cancel()
		cancelAlloc()
	})
	return ctx
}
