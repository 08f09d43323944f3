package browser

import (
	"context"
	"fmt"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// ClickNavigate is an action that clicks, as a user would (a mouse event
// on the element's centre), the first element matching the CSS selector
// sel, and returns once the page the click leads to has loaded (the
// page's next load event, to which it subscribes before clicking). Use
// it for links and form submits: waiting for an element instead could
// find it still on the page being left. The page being left must have
// finished loading (as it has after chromedp.Navigate or ClickNavigate),
// else its own late load event would be taken for the next page's. The
// action's context bounds the wait.
func ClickNavigate(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the subscription
		loaded := cdp.Events(ctx, t, page.LoadEventFired)
		if _, err := chromedp.Click(chromedp.CSS(sel))(ctx, t); err != nil {
			return chromedp.Void{}, fmt.Errorf("browser: clicking %s: %w", sel, err)
		}
		for _, err := range loaded {
			if err != nil {
				return chromedp.Void{}, fmt.Errorf("browser: waiting for the page after clicking %s: %w", sel, err)
			}
			return chromedp.Void{}, nil
		}
		return chromedp.Void{}, fmt.Errorf("browser: the tab closed after clicking %s", sel)
	}
}
