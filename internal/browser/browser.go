// Package browser runs tests in a real, headless Chromium: it finds the
// browser, starts one per test with a private profile, and on failure
// saves full-page screenshots of the pages the test captured (see
// Capture) and of the page it was on.
//
// A test that finds no browser is skipped, unless IDEM_REQUIRE_BROWSER=1
// (as .ci/run sets), which makes it fail with how to install one.
package browser

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// Environment variables read by this package.
const (
	// RequireEnv, set to "1", turns "no browser found" from a skip into a
	// failure, so that CI cannot pass without running browser tests.
	RequireEnv = "IDEM_REQUIRE_BROWSER"
	// ArtifactsEnv names the directory under which failing tests save
	// their screenshots; default os.TempDir().
	ArtifactsEnv = "IDEM_TEST_ARTIFACTS"
	// KeepEnv, set to "1", saves the artifacts of passing tests too.
	KeepEnv = "IDEM_TEST_KEEP"
)

// Window size of the browser, in CSS pixels.
const (
	windowWidth  = 1280
	windowHeight = 900
)

// startAttempts is how many times New starts a browser that died before
// it listened.
const startAttempts = 2

// startTimeout bounds starting the browser and opening its first tab.
const startTimeout = time.Minute

// candidates are the names looked up on PATH, in order, then the paths
// tried directly.
var (
	candidates = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}
	fallbacks  = []string{"/usr/bin/chromium"}
)

// Find returns the path of a Chromium or Chrome executable — the first of
// chromium, chromium-browser, google-chrome and google-chrome-stable on
// PATH, else /usr/bin/chromium if it is executable — or "" if there is
// none.
func Find() string {
	for _, name := range candidates {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	for _, p := range fallbacks {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// Option changes how New starts the browser.
type Option func(*config)

type config struct {
	noJS bool
}

// NoJavaScript disables script execution in the page (the DevTools
// Emulation.setScriptExecutionDisabled), before the first navigation:
// the pages must then work as plain HTML forms and links. The test still
// drives the page through DevTools; only the page's own scripts are off.
func NoJavaScript() Option { return func(c *config) { c.noJS = true } }

// New starts a headless browser for t and returns a chromedp context on
// its one tab. The browser runs with a private user-data directory under
// t.TempDir(), a 1280×900 window and, when the test runs as root,
// --no-sandbox. When t ends the browser is closed; before that, if t
// failed (or IDEM_TEST_KEEP=1), the screenshots taken with Capture and
// one of the current page are saved (see Capture for where).
//
// A browser that dies before it listens is started once more, afresh
// (startAttempts); the attempt is logged. Without a browser (see Find)
// New skips t, or fails it when IDEM_REQUIRE_BROWSER=1. The context has no deadline: bound each step
// with a context derived from it (context.WithTimeout), never the first
// use, which New has already made.
func New(t testing.TB, opts ...Option) context.Context {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	path := Find()
	if path == "" {
		msg := "no browser found (tried chromium, chromium-browser, google-chrome, google-chrome-stable on PATH and /usr/bin/chromium); install one: apt-get install -y chromium"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(msg + " (" + RequireEnv + "=1)")
		}
		t.Skip(msg)
	}
	// A browser that dies before it listens (it happens on a loaded
	// machine: the process exits with nothing but its start-up noise) is
	// started once more, afresh; any other failure, or a second death,
	// fails t.
	var ctx context.Context
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		ctx, err = start(t, path, c)
		if err == nil || !strings.Contains(err.Error(), "chrome failed to start") {
			break
		}
		t.Logf("starting %s, attempt %d of %d: %v", path, attempt, startAttempts, err)
	}
	if err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	rec := &recorder{t: t}
	ctx = context.WithValue(ctx, recorderKey{}, rec)
	t.Cleanup(func() { rec.save(ctx) }) // runs before the browser closes
	return ctx
}

// start starts the browser at path with a fresh profile and opens its
// first tab (with scripts off when c.noJS); the browser ends with t.
func start(t testing.TB, path string, c config) (context.Context, error) {
	alloc := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(windowWidth, windowHeight),
	}
	if os.Geteuid() == 0 {
		alloc = append(alloc, chromedp.NoSandbox)
	}
	ctx, cancel := chromedp.NewContext(context.Background(), chromedp.WithAllocatorOptions(alloc...))
	t.Cleanup(func() {
		// Bounded: a wedged browser must not hang the test binary.
		done, stop := context.WithTimeout(ctx, 10*time.Second)
		defer stop()
		chromedp.Cancel(done) //nolint:errcheck // best effort; cancel below ends it regardless
		cancel()
	})
	// The first use starts the browser; it must run on ctx itself (its
	// lifetime becomes the browser's), so a watchdog bounds it instead.
	watchdog := time.AfterFunc(startTimeout, cancel)
	err := chromedp.Do(ctx)
	if err == nil && c.noJS {
		_, err = chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
	}
	if !watchdog.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	return ctx, err
}
