package console

import (
	"net/http"

	"github.com/idemkit/idem/registry"
)

// audited takes an action of the operator of s the way every change is
// taken (registry.Audited): its audit entry first, then change (nil: the
// entry is all), then an AuditFailed entry if change failed. It returns
// true when all went well; else it has rendered 503 STORE_UNAVAILABLE —
// when the entry could not be written, change was not run.
func (h *handler) audited(w http.ResponseWriter, r *http.Request, s session, action, operationID, detail string, change func() error) bool {
	e := registry.AuditEntry{Actor: s.op.Name, Action: action, OperationID: operationID, Detail: detail}
	if err := registry.Audited(r.Context(), h.cfg.Store, e, change); err != nil {
		h.storeFailed(w, r, s, err)
		return false
	}
	return true
}
