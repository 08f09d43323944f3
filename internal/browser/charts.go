package browser

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chartMeasure is ChartProblems' script.
const chartMeasure = `(() => {
	  const out = [];
	  document.querySelectorAll("svg").forEach((svg, n) => {
	    const name = svg.getAttribute("aria-label") || ("chart " + n);
	    if (!svg.querySelector("text.axis-title.x")) out.push(name + ": no x-axis title");
	    if (!svg.querySelector("text.axis-title.y")) out.push(name + ": no y-axis title");
	    const boxes = [...svg.querySelectorAll("text.label")].map(e => [e.textContent, e.getBoundingClientRect()]);
	    if (boxes.length === 0) out.push(name + ": no labels");
	    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
	      const [ta, a] = boxes[i], [tb, b] = boxes[j];
	      if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
	        out.push(name + ": label " + JSON.stringify(ta) + " overlaps " + JSON.stringify(tb));
	    }
	  });
	  return {charts: document.querySelectorAll("svg").length, problems: out};
	})()`

// ChartProblems measures every <svg> chart of the page in ctx as drawn
// (package internal/chart): each needs an x-axis and a y-axis title
// (text.axis-title.x, .y), and no two of its labels (text.label) may
// overlap — their boxes by getBoundingClientRect, rotation included. It
// returns the number of charts and what is wrong, one line each. It runs
// a script in the page through DevTools: the page's own scripts may be
// off. ctx bounds it.
func ChartProblems(ctx context.Context) (charts int, problems []string, err error) {
	got, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
		Charts   int
		Problems []string
	}](chartMeasure))
	return got.Charts, got.Problems, err
}

// CheckCharts serves page (a whole HTML document) on a throwaway HTTP
// server, opens it in a fresh browser (New), captures it as name, and
// fails t unless it holds want charts that ChartProblems finds nothing
// wrong with, one error per problem.
func CheckCharts(t testing.TB, page, name string, want int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	step, cancel := context.WithTimeout(New(t), 30*time.Second)
	defer cancel()
	if err := chromedp.Do(step, chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("svg text.label")), Capture(name)); err != nil {
		t.Fatal(err)
	}
	charts, problems, err := ChartProblems(step)
	if err != nil || charts != want {
		t.Fatalf("measuring the charts: %d charts, %v; want %d", charts, err, want)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
