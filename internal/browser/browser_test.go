package browser

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// testPage says by its #mode whether its script ran, and posts a form to
// /echo, which shows the value sent.
const testPage = `<!doctype html><html><body>
<p id="mode">static</p>
<script>document.getElementById("mode").textContent = "script";</script>
<form id="f" method="post" action="/echo"><input name="v"><button id="go">go</button></form>
</body></html>`

func site(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(testPage)) })
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`<!doctype html><p id="echo">` + html.EscapeString(r.PostFormValue("v")) + `</p>`))
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// TestNew drives a page in a real browser with and without JavaScript:
// the page's script runs only in the first, and a plain form posts in
// both (typing and a mouse click, as a user would).
func TestNew(t *testing.T) {
	srv := site(t)
	for _, tc := range []struct {
		name string
		opts []Option
		mode string
	}{{"js", nil, "script"}, {"nojs", []Option{NoJavaScript()}, "static"}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := New(t, tc.opts...)
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#f"))); err != nil {
				t.Fatal(err)
			}
			mode, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#mode")))
			if err != nil || mode != tc.mode {
				t.Fatalf("#mode = %q, %v; want %q", mode, err, tc.mode)
			}
			err = chromedp.Do(ctx,
				chromedp.SendKeys(chromedp.CSS(`input[name="v"]`), "hello <b>"),
				ClickNavigate("#go"),
				chromedp.WaitVisible(chromedp.CSS("#echo")),
				Capture("echo"))
			if err != nil {
				t.Fatal(err)
			}
			if echo, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#echo"))); err != nil || echo != "hello <b>" {
				t.Fatalf("#echo = %q, %v", echo, err)
			}
		})
	}
}

// TestWriteShots checks what a failing test leaves: each capture's PNG,
// HTML and address, numbered in order, in a new directory under root.
func TestWriteShots(t *testing.T) {
	srv := site(t)
	ctx := New(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#f")), Capture("home page")); err != nil {
		t.Fatal(err)
	}
	rec := ctx.Value(recorderKey{}).(*recorder)
	root := t.TempDir()
	dir, err := writeShots(root, t.Name(), rec.shots)
	if err != nil || filepath.Dir(dir) != root {
		t.Fatalf("writeShots: %q, %v", dir, err)
	}
	png, err := os.ReadFile(filepath.Join(dir, "01-home_page.png"))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("screenshot: %d bytes, %v; want a PNG", len(png), err)
	}
	h, err := os.ReadFile(filepath.Join(dir, "01-home_page.html"))
	if err != nil || !bytes.Contains(h, []byte(`id="mode"`)) {
		t.Fatalf("page HTML: %q, %v", h, err)
	}
	u, err := os.ReadFile(filepath.Join(dir, "01-home_page.url"))
	if err != nil || string(u) != srv.URL+"/\n" {
		t.Fatalf("page address: %q, %v", u, err)
	}
}

// TestFind: Find returns an executable file or "".
func TestFind(t *testing.T) {
	p := Find()
	if p == "" {
		t.Skip("no browser on this machine")
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("Find() = %q: %v", p, err)
	}
}

// recordingTB records New's Skip or Fatal instead of ending the test.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()           {}
func (r *recordingTB) Skip(args ...any)  { r.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *recordingTB) Fatal(args ...any) { r.failed = fmt.Sprint(args...); runtime.Goexit() }

// TestNewWithoutBrowser: with no browser New skips, or with
// IDEM_REQUIRE_BROWSER=1 fails saying how to install one.
func TestNewWithoutBrowser(t *testing.T) {
	saved, savedFallbacks := candidates, fallbacks
	candidates, fallbacks = []string{"idem-no-such-browser"}, []string{filepath.Join(t.TempDir(), "chromium")}
	defer func() { candidates, fallbacks = saved, savedFallbacks }()
	for _, require := range []string{"", "1"} {
		t.Setenv(RequireEnv, require)
		r := &recordingTB{TB: t}
		done := make(chan struct{})
		go func() { defer close(done); New(r) }()
		<-done
		const install = "apt-get install -y chromium"
		switch {
		case require == "" && (r.failed != "" || !strings.Contains(r.skipped, install)):
			t.Errorf("without a browser: skipped %q, failed %q; want a skip saying %q", r.skipped, r.failed, install)
		case require == "1" && (r.skipped != "" || !strings.Contains(r.failed, install) || !strings.Contains(r.failed, RequireEnv)):
			t.Errorf("without a browser, %s=1: skipped %q, failed %q; want a failure saying %q", RequireEnv, r.skipped, r.failed, install)
		}
	}
}
