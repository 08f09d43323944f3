package idemgrpc

import (
	"context"

	"github.com/idemkit/idem/registry"
)

// txKey is the context key of a call's transaction.
type txKey struct{}

// call is what a handler's context holds of its call.
type call struct {
	tx          registry.Tx
	operationID string
}

// Tx returns the registry transaction of the idempotent call whose
// handler's context ctx is: the handler's business writes go through it
// and commit together with the record of its response. nil outside an
// idempotent call's handler.
func Tx(ctx context.Context) registry.Tx {
	c, _ := ctx.Value(txKey{}).(call)
	return c.tx
}

// OperationID returns the operation ID of the idempotent call whose
// handler's context ctx is; "" outside one.
func OperationID(ctx context.Context) string {
	c, _ := ctx.Value(txKey{}).(call)
	return c.operationID
}
