package payments

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// getTransfer handles GET /v1/transfers/{id}. A transfer has no table of
// its own: the provider holds the transfer and the registry holds the
// answer that created it, so the transfer is read from its operation's
// stored response (TransferID and the operation ID share their suffix).
// Another principal's transfer, an unknown id, or an operation that did
// not create a transfer (refused, failed or not finished) answers 404
// NOT_FOUND.
func (s *Service) getTransfer(w http.ResponseWriter, r *http.Request, id idem.Identity) {
	tid := r.PathValue("id")
	suffix, ok := strings.CutPrefix(tid, "tr_")
	if !ok || !storable(tid) {
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such transfer")
		return
	}
	rec, err := s.store.GetByID(r.Context(), "op_"+suffix)
	switch {
	case errors.Is(err, registry.ErrNotFound) || err == nil && (rec.Owner != registry.OwnerOf(id) ||
		rec.Operation != OperationTransfer || rec.State != idem.StateSucceeded || rec.Response == nil):
		writeProblem(w, http.StatusNotFound, CodeNotFound, "no such transfer")
		return
	case errors.Is(err, idem.ErrDigestMismatch):
		s.internal(w, r, "get transfer", err)
		return
	case err != nil:
		s.storeFailed(w, r, "get transfer", err)
		return
	}
	resp := rec.Response
	w.Header().Set("Content-Type", resp.MediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(http.StatusOK)
	w.Write(resp.Body)
}
