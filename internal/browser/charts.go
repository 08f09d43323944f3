package browser

import (
	"context"

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
