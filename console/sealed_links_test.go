package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/console"
	"github.com/idemkit/idem/effect"
)

// TestSealedLinks: the signed lookup answer and flash message a redirect
// carries are shown on their own page only — copied onto another
// operation's page they are not — and a lookup answer is shown for ten
// minutes, not after.
func TestSealedLinks(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{Kind: effect.Executed, Handle: "tr_9", Detail: "found"}, func(t *testing.T, e *env) {
		var skew atomic.Int64
		console.SetClock(e.h, func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
		a, b := e.unknown(), e.unknown()
		c, csrf := e.login(aliceToken)
		code, loc, _ := e.do(c, "/admin/operations/"+a.OperationID+"/effects/transfer/lookup", url.Values{"csrf": {csrf}})
		u, err := url.Parse(loc)
		if code != http.StatusSeeOther || err != nil || u.Query().Get("lookup") == "" || u.Query().Get("flash") == "" {
			t.Fatalf("lookup: %d %q", code, loc)
		}
		if _, _, body := e.do(c, loc, nil); !strings.Contains(body, `id="lookup-result"`) || !strings.Contains(body, `id="flash"`) {
			t.Fatalf("the lookup's own page shows no answer or flash: %s", body)
		}
		other := "/admin/operations/" + b.OperationID + "?" + u.RawQuery
		if _, _, body := e.do(c, other, nil); strings.Contains(body, `id="lookup-result"`) || strings.Contains(body, "tr_9") || strings.Contains(body, `id="flash"`) {
			t.Errorf("operation %s's page shows the lookup answer or flash signed for %s's: %s", b.OperationID, a.OperationID, body)
		}
		if _, _, body := e.do(c, "/admin/?"+u.RawQuery, nil); strings.Contains(body, `id="flash"`) {
			t.Errorf("the status page shows a flash signed for an operation's page")
		}
		skew.Store(int64(11 * time.Minute))
		if _, _, body := e.do(c, loc, nil); strings.Contains(body, `id="lookup-result"`) {
			t.Errorf("a lookup answer 11 minutes old is still shown")
		}
	})
}
