package operation

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/canon"
	"github.com/idemkit/idem/registry"
)

// Codes of the core's refusals that are not in package idem.
const (
	// CodeResponseTooLarge: the execution's answer exceeded the snapshot
	// cap, so its outcome could not be stored; nothing was committed.
	CodeResponseTooLarge idem.Code = "RESPONSE_TOO_LARGE"
	// CodeResponseUnreadable: the stored answer is sealed at rest
	// (registry.Sealer) and could not be opened. Nothing was executed.
	CodeResponseUnreadable idem.Code = "RESPONSE_UNREADABLE"
	// CodeHandlerError: a statement the execution ran through its
	// transaction failed, so the transaction could not commit, yet the
	// execution answered as if it had succeeded; nothing was recorded.
	CodeHandlerError idem.Code = "HANDLER_ERROR"
	// CodeClientGone: the request ended before it was accepted; nothing
	// was accepted.
	CodeClientGone idem.Code = "CLIENT_GONE"
)

// Refusal is a refused request, for the door to render.
type Refusal struct {
	Code   idem.Code
	Detail string // safe to show the client
	// OperationID names the operation refused, "" to reveal none.
	OperationID string
	// RetryAfter, when not "", is the Retry-After in seconds.
	RetryAfter string
	// Monitor: the refusal is for an operation in flight or UNKNOWN; a
	// door that serves a monitor links it.
	Monitor bool
}

func refused(code idem.Code, detail, operationID string) Result {
	return Result{Kind: Refused, Refusal: Refusal{Code: code, Detail: detail, OperationID: operationID}}
}

// finish is Run's one exit: it turns what the run ended with into the
// Result its door renders — an error into its refusal (Refuse), a record
// to replay into the replay or its refusal (Replay), an operation in
// flight into its refusal with Retry-After and the monitor (InFlight).
func (c *Core) finish(ctx context.Context, res Result) Result {
	var out Result
	switch {
	case res.err != nil:
		out = c.Refuse(ctx, res.err)
	case res.Kind == Replayed:
		out = c.Replay(res.Record)
	case res.Kind == Refused && res.Refusal.Monitor:
		out = InFlight(res.Refusal.OperationID, res.Refusal.Code)
	default:
		return res
	}
	out.Waited = res.Waited
	return out
}

// detailRetired is the detail of KEY_RETIRED.
const detailRetired = "the operation with this key finished and its stored response has expired; " +
	"it is neither replayed nor run again"

// Replay answers from rec, a terminal record: Replayed, or refused
// KEY_RETIRED when it is a tombstone, or STORE_UNAVAILABLE when its
// stored answer is missing.
func (c *Core) Replay(rec registry.Record) Result {
	if rec.Retired() {
		return Retired(rec)
	}
	if rec.Response == nil {
		return refused(idem.CodeStoreUnavailable, "the stored outcome is not available", "")
	}
	return Result{Kind: Replayed, Record: rec}
}

// Retired refuses a retry of an operation whose record is a tombstone
// (SPEC E5): KEY_RETIRED with the operation ID, and no Retry-After since
// retrying cannot help.
func Retired(rec registry.Record) Result {
	return refused(idem.CodeKeyRetired, detailRetired, rec.OperationID)
}

// InFlight refuses a request for the operation opID that has no outcome
// to replay — code IN_PROGRESS (it is executing) or OUTCOME_UNKNOWN —
// with Retry-After 1, the monitor and the operation ID.
func InFlight(opID string, code idem.Code) Result {
	detail := "the first request with this key is still executing"
	if code == idem.CodeOutcomeUnknown {
		detail = "the operation's outcome is unknown and awaits reconciliation"
	}
	res := refused(code, detail, opID)
	res.Refusal.RetryAfter, res.Refusal.Monitor = "1", true
	return res
}

// tenantMoved refuses a request the registry refused because the
// caller's tenant is fenced there (registry.ErrTenantMoved): TENANT_MOVED
// with Retry-After 1 — nothing was accepted, and a retry with the same
// key, once the shard map names the tenant's new registry, lands there.
func tenantMoved() Result {
	res := refused(idem.CodeTenantMoved, "this tenant's operations moved to another registry; nothing was done — retry with the same key", "")
	res.Refusal.RetryAfter = "1"
	return res
}

// Refuse answers an error of serving a request whose context is ctx: a
// contract code if it carries one, STORE_UNAVAILABLE for storage trouble
// (fail closed), except when the store call failed because ctx itself
// was cancelled (gone) — the client went away before the request was
// accepted, which says nothing about the store: CLIENT_GONE.
func (c *Core) Refuse(ctx context.Context, err error) Result {
	code := idem.CodeOf(err)
	if (code == "" || code == idem.CodeStoreUnavailable) && gone(ctx, err) {
		return c.clientGone(ctx, err)
	}
	switch {
	case errors.Is(err, registry.ErrActiveLimit):
		code = idem.CodeKeyLimit
	case errors.Is(err, registry.ErrWriterFenced):
		code = idem.CodeWriterFenced
	case errors.Is(err, registry.ErrTenantMoved):
		return tenantMoved()
	case errors.Is(err, registry.ErrTampered):
		code = CodeResponseUnreadable
		c.obs().Tamper(c.name())
		c.log().Error("stored body fails authentication: possible tampering with the database; not replayed",
			"operation", c.name(), "err", err)
	case errors.Is(err, registry.ErrUnreadable):
		code = CodeResponseUnreadable
		c.log().Error("stored body cannot be opened", "operation", c.name(), "err", err)
	case code == "" && (errors.Is(err, registry.ErrUnavailable) || errors.Is(err, idem.ErrDigestMismatch)):
		code = idem.CodeStoreUnavailable
		c.log().Error("registry unavailable", "operation", c.name(), "err", err)
	case code == "":
		code = idem.CodeStoreUnavailable
		c.log().Error("registry error", "operation", c.name(), "err", err)
	}
	res := refused(code, "", "")
	var ie *idem.Error
	var ce *canon.Error
	switch {
	case code == idem.CodeStoreUnavailable:
	case code == CodeResponseUnreadable:
		res.Refusal.Detail = "the stored outcome of this operation cannot be read by this server; nothing was executed"
	case code == idem.CodeKeyLimit:
		res.Refusal.Detail = "too many operations in progress for this principal"
		res.Refusal.RetryAfter = c.keyLimitRetryAfter()
	case errors.As(err, &ie):
		res.Refusal.Detail = ie.Reason
	case errors.As(err, &ce):
		res.Refusal.Detail = ce.Reason
		if ce.Offset >= 0 {
			res.Refusal.Detail += " at byte " + strconv.Itoa(ce.Offset)
		}
	}
	return res
}

// keyLimitRetryAfter is the Retry-After of KEY_LIMIT: the operation's
// lease in whole seconds, rounded up. By then every execution in flight
// when the refusal was sent has finished, or its lease has expired and
// recovery may take it over, so a slot may be free.
func (c *Core) keyLimitRetryAfter() string {
	lease := registry.LeaseOrDefault(c.Config.Lease)
	return strconv.FormatInt(int64(max((lease+time.Second-1)/time.Second, 1)), 10)
}

// clientGone refuses a request whose client went away before it was
// accepted: nothing was accepted, so whatever the store call that failed
// had begun is as it would be after any failed call — rolled back, or a
// reservation left to its lease. Logged at Info, refused CLIENT_GONE,
// never counted as storage trouble.
func (c *Core) clientGone(ctx context.Context, err error) Result {
	c.log().Info("the client went away before the request was accepted", "operation", c.name(),
		"cause", context.Cause(ctx), "err", err)
	return refused(CodeClientGone, "the request ended before it was accepted; nothing was done — retry with the same key", "")
}
