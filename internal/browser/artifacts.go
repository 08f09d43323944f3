package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// shot is one captured page: a full-page PNG, its HTML and address.
type shot struct {
	name, url, html string
	png             []byte
}

// recorder holds a test's captured pages until its end.
type recorder struct {
	t interface {
		Failed() bool
		Name() string
		Logf(string, ...any)
	}
	mu    sync.Mutex
	shots []shot
}

type recorderKey struct{}

// Capture is an action that takes a full-page PNG screenshot of the page,
// with its HTML and address, and keeps it in memory under name. The test
// saves nothing while it passes; when it fails (or IDEM_TEST_KEEP=1), its
// end writes every capture, in order, plus one of the page the test ended
// on, into a new directory under $IDEM_TEST_ARTIFACTS (default
// os.TempDir()) and logs the directory's path:
//
//	NN-NAME.png, NN-NAME.html   each capture (NN its order)
//	NN-NAME.url                 the page's address
//
// Capture the pages a test visits right after waiting for each, so that a
// failure shows how it got there. On a context not made by New it only
// takes the screenshot.
func Capture(name string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		s, err := take(ctx, t, name)
		if err != nil {
			return chromedp.Void{}, fmt.Errorf("browser: capturing %s: %w", name, err)
		}
		if rec, ok := ctx.Value(recorderKey{}).(*recorder); ok {
			rec.mu.Lock()
			rec.shots = append(rec.shots, s)
			rec.mu.Unlock()
		}
		return chromedp.Void{}, nil
	}
}

func take(ctx context.Context, t *chromedp.Target, name string) (shot, error) {
	s := shot{name: name}
	var err error
	if s.url, err = chromedp.Location()(ctx, t); err != nil {
		return s, err
	}
	if s.png, err = chromedp.FullScreenshot(100)(ctx, t); err != nil {
		return s, err
	}
	s.html, err = chromedp.OuterHTML(chromedp.CSS("html"))(ctx, t)
	return s, err
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// save runs in the test's cleanup, before the browser closes: when the
// test failed or IDEM_TEST_KEEP=1, it adds a capture of the current page
// ("final") and writes every capture (see Capture).
func (r *recorder) save(ctx context.Context) {
	if !r.t.Failed() && os.Getenv(KeepEnv) != "1" {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := chromedp.Run(tctx, Capture("final")); err != nil {
		r.t.Logf("artifacts: %v", err)
	}
	r.mu.Lock()
	shots := append([]shot(nil), r.shots...)
	r.mu.Unlock()
	dir, err := writeShots(os.Getenv(ArtifactsEnv), r.t.Name(), shots)
	if err != nil {
		r.t.Logf("artifacts: %v", err)
	}
	if dir != "" {
		r.t.Logf("browser artifacts (%d pages) saved in %s", len(shots), dir)
	}
}

// writeShots writes shots into a new directory under root (os.TempDir()
// if ""), named after the test, and returns its path.
func writeShots(root, test string, shots []shot) (string, error) {
	if root == "" {
		root = os.TempDir()
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(root, "idem-browser-"+unsafeName.ReplaceAllString(test, "_")+"-")
	if err != nil {
		return "", err
	}
	var first error
	for i, s := range shots {
		base := filepath.Join(dir, fmt.Sprintf("%02d-%s", i+1, unsafeName.ReplaceAllString(s.name, "_")))
		for ext, b := range map[string][]byte{".png": s.png, ".html": []byte(s.html), ".url": []byte(s.url + "\n")} {
			if err := os.WriteFile(base+ext, b, 0o644); err != nil && first == nil {
				first = err
			}
		}
	}
	return dir, first
}
