package idemhttp

import (
	"context"
	"errors"
	"net/http"
)

// Whose failure is it: a request can fail for the store's sake (503,
// fail closed), the client's (it went away before its request was
// accepted) or the handler's (its own statement failed). Only the first
// is ever answered or counted as storage trouble. The core decides it
// for a run (operation.Core.Refuse, and its handlerFailed); gone is the
// same test for a plain execution (shadow.go).

// gone reports whether err, the failure of serving r, is r's client
// going away: net/http cancelled its context (the connection closed or
// was half-closed, or the client was slower than the server's read
// timeout) and err is that cancellation. Timing alone is not enough: a
// store error that is not the cancellation (an outage, a lost commit
// reply) stays storage trouble even when the client left meanwhile, and a
// deadline the application put on the request is not the client going.
func gone(r *http.Request, err error) bool {
	return errors.Is(r.Context().Err(), context.Canceled) && errors.Is(err, context.Canceled)
}
