package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// pageSize is the number of operations per page of the list.
const pageSize = 50

// maxScan bounds the batches of pageSize records one page reads when it
// filters by operation name; then it offers the next page.
const maxScan = 20

// listView is the operations page's data.
type listView struct {
	States    []idem.State
	State     string
	Operation string
	OlderThan string
	Records   []registry.Record
	Next      string // the next page's URL, "" on the last page
}

// operations lists operations, oldest first, 50 a page (GET
// /operations?state=&operation=&older_than=&cursor=). operation filters
// the page's records by operation name; cursor is the last operation ID
// of the previous page.
func (h *handler) operations(w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	v := listView{States: idem.States(), State: strings.ToUpper(q.Get("state")),
		Operation: strings.TrimSpace(q.Get("operation")), OlderThan: strings.TrimSpace(q.Get("older_than"))}
	f := registry.ListFilter{State: idem.State(v.State), Limit: pageSize + 1}
	invalid := func(msg string) {
		h.render(w, r, s, http.StatusUnprocessableEntity, "operations", "Operations", v, &pageError{Code: CodeInvalid, Message: msg})
	}
	if f.State != "" && !f.State.Valid() {
		invalid("Unknown state " + q.Get("state") + ".")
		return
	}
	if v.OlderThan != "" {
		d, err := time.ParseDuration(v.OlderThan)
		if err != nil || d < 0 {
			invalid("older_than wants a Go duration such as 90s, 15m or 24h.")
			return
		}
		f.OlderThan = d
	}
	if c := q.Get("cursor"); c != "" {
		after, err := h.cfg.Store.GetByID(r.Context(), c)
		switch {
		case errors.Is(err, registry.ErrNotFound):
			invalid("The cursor names no operation; start again from the first page.")
			return
		case err != nil:
			h.storeFailed(w, r, s, err)
			return
		}
		f.After = after
	}
	// The operation name is no filter of the registry: read batches until
	// the page is full, the listing ends, or maxScan batches were read.
	cursor := ""
	for batch := 0; cursor == ""; batch++ {
		recs, err := h.cfg.Store.ListOperations(r.Context(), f)
		if err != nil {
			h.storeFailed(w, r, s, err)
			return
		}
		more := len(recs) > pageSize
		recs = recs[:min(len(recs), pageSize)]
		for i, rec := range recs {
			if v.Operation != "" && rec.Operation != v.Operation {
				continue
			}
			v.Records = append(v.Records, rec)
			if len(v.Records) == pageSize {
				if more || i < len(recs)-1 {
					cursor = rec.OperationID
				}
				break
			}
		}
		if len(v.Records) == pageSize || !more {
			break
		}
		f.After = recs[len(recs)-1]
		if batch+1 == maxScan {
			cursor = f.After.OperationID
		}
	}
	if cursor != "" {
		next := url.Values{"cursor": {cursor}}
		for k, val := range map[string]string{"state": v.State, "operation": v.Operation, "older_than": v.OlderThan} {
			if val != "" {
				next.Set(k, val)
			}
		}
		v.Next = h.cfg.Prefix + "/operations?" + next.Encode()
	}
	h.render(w, r, s, http.StatusOK, "operations", "Operations", v, nil)
}
