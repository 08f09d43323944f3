package idemhttp

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// CodeNotFound (404): no operation with that ID is visible to the caller —
// unknown, or another principal's; the two answers are the same bytes.
const CodeNotFound idem.Code = "NOT_FOUND"

// Monitor serves the operation monitor that the Link of a 409 points at
// (SPEC A6): GET {Prefix}{operationID} answers 200 with the operation's
// state and links (OperationView) to the principal that owns it; any
// other caller, and an unknown ID, get the same 404 NOT_FOUND; a request
// without a known identity gets 401 UNAUTHENTICATED. It shows no request
// data and no response body. Mount it where Prefix says, for example
//
//	mux.Handle("GET /v1/operations/", mw.MonitorHandler())
//
// and set Middleware.MonitorPrefix to the same prefix. Safe for
// concurrent use; the request's context bounds the read.
type Monitor struct {
	// Store is the registry. Required.
	Store registry.Store
	// Identity authenticates the caller, as Middleware.Identity. Required.
	Identity func(r *http.Request) (idem.Identity, error)
	// Prefix is the path prefix before the operation ID, for example
	// "/v1/operations/". Required.
	Prefix string
	// Challenge is the WWW-Authenticate value of a 401; empty sends none.
	Challenge string
}

// OperationView is the body Monitor answers.
type OperationView struct {
	OperationID string     `json:"operation_id"`
	Operation   string     `json:"operation"`
	State       idem.State `json:"state"`
	// Status is the stored response's status, for terminal operations
	// whose response is still kept.
	Status    int            `json:"status,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
	Links     OperationLinks `json:"links"`
}

// OperationLinks are the links of an OperationView.
type OperationLinks struct {
	Self string `json:"self"`
	// Resource is the Location of the stored response, if it has one.
	Resource string `json:"resource,omitempty"`
}

// MonitorHandler returns the Monitor of m's store and identity at
// m.MonitorPrefix (which must be set).
func (m *Middleware) MonitorHandler() http.Handler {
	if m.MonitorPrefix == "" {
		panic("idemhttp: MonitorHandler needs Middleware.MonitorPrefix")
	}
	return &Monitor{Store: m.Store, Identity: m.Identity, Prefix: m.MonitorPrefix, Challenge: m.Challenge}
}

func (mo *Monitor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		Problem{Status: http.StatusMethodNotAllowed, Code: "METHOD_NOT_ALLOWED"}.Write(w)
		return
	}
	id, err := mo.Identity(r)
	if err != nil {
		if mo.Challenge != "" {
			w.Header().Set("WWW-Authenticate", mo.Challenge)
		}
		WriteProblem(w, idem.CodeUnauthenticated, "authentication required")
		return
	}
	opID, ok := strings.CutPrefix(r.URL.Path, mo.Prefix)
	if !ok || opID == "" || strings.Contains(opID, "/") || !utf8.ValidString(opID) || strings.ContainsRune(opID, 0) {
		// No operation ID holds such bytes; PostgreSQL would refuse the lookup.
		Problem{Status: http.StatusNotFound, Code: CodeNotFound, Detail: "no such operation"}.Write(w)
		return
	}
	rec, err := mo.Store.GetByID(r.Context(), opID)
	switch {
	case errors.Is(err, registry.ErrNotFound) || err == nil && rec.Owner != registry.OwnerOf(id):
		Problem{Status: http.StatusNotFound, Code: CodeNotFound, Detail: "no such operation"}.Write(w)
		return
	case gone(r, err): // the client went away: no storage trouble
		WriteProblem(w, CodeClientGone, "the request ended before it was answered")
		return
	case err != nil:
		WriteProblem(w, idem.CodeStoreUnavailable, "the registry did not answer; retry later")
		return
	}
	v := OperationView{
		OperationID: rec.OperationID,
		Operation:   rec.Operation,
		State:       rec.State,
		CreatedAt:   rec.CreatedAt.UTC(),
		UpdatedAt:   rec.UpdatedAt.UTC(),
		Links:       OperationLinks{Self: mo.Prefix + rec.OperationID},
	}
	if rec.State.Terminal() && rec.Response != nil {
		v.Status = rec.Response.Status
		v.Links.Resource = rec.Response.Location
	}
	body, err := json.Marshal(v)
	if err != nil {
		Problem{Status: http.StatusInternalServerError, Code: "INTERNAL"}.Write(w)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}
