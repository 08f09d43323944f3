package console_test

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/registry"
)

var (
	rowRe  = regexp.MustCompile(`<tr class="operation" data-id="(op_[^"]+)">`)
	nextRe = regexp.MustCompile(`<a id="next" href="([^"]+)">`)
)

// TestPaging: 50 operations a page, oldest first, a#next while more
// exist; the operation filter keeps the kind named.
func TestPaging(t *testing.T) {
	t.Parallel()
	stores(t, effect.Answer{}, func(t *testing.T, e *env) {
		var ids []string
		for i := range 53 {
			c := registry.Claim{Operation: opKind}
			if i%2 == 1 {
				c.Operation = "other.kind"
			}
			c.Scope[0], c.Scope[1] = byte(i), 9
			rec, _, err := e.store.Reserve(t.Context(), c)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec.OperationID)
		}
		c, _ := e.login(bobToken)
		var seen []string
		path, pages := "/admin/operations?state=RESERVED", 0
		for path != "" {
			code, _, body := e.do(c, strings.ReplaceAll(path, "&amp;", "&"), nil)
			if code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
			rows := rowRe.FindAllStringSubmatch(body, -1)
			if pages == 0 && len(rows) != 50 {
				t.Errorf("first page: %d rows; want 50", len(rows))
			}
			for _, r := range rows {
				seen = append(seen, r[1])
			}
			path = ""
			if m := nextRe.FindStringSubmatch(body); m != nil {
				path = m[1]
			}
			if pages++; pages > 3 {
				t.Fatal("more pages than operations")
			}
		}
		// Two operations made in one millisecond may list either way round
		// (created_at, then the ID's random part): compare as sets.
		slices.Sort(seen)
		slices.Sort(ids)
		if pages != 2 || !slices.Equal(seen, ids) {
			t.Errorf("%d pages listed %v; want 2 pages listing %v", pages, seen, ids)
		}
		_, _, body := e.do(c, "/admin/operations?operation=other.kind", nil)
		if rows := rowRe.FindAllStringSubmatch(body, -1); len(rows) != 26 || strings.Contains(body, `id="next"`) {
			t.Errorf("operation filter: %d rows; want 26 on one page", len(rows))
		}
	})
}
