package operation_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemsqlite"
	"github.com/idemkit/idem/operation"
	"github.com/idemkit/idem/registry"
)

// TestRunWithoutHTTP drives the core as a door that is not HTTP would (a
// queue consumer): an identity, a key, a fingerprint, a Config and an
// Execute that writes through the registry transaction and returns the
// answer to store. The first delivery executes and commits its row with
// the outcome; a redelivery is Replayed with the stored answer and
// writes nothing; the same key with another fingerprint is Refused
// PAYLOAD_CONFLICT; an answer that releases is Released and its writes
// roll back, so the next delivery executes afresh. Both styles.
func TestRunWithoutHTTP(t *testing.T) {
	for _, oneTx := range []bool{false, true} {
		t.Run(map[bool]string{false: "two-phase", true: "one-transaction"}[oneTx], func(t *testing.T) {
			ctx := t.Context()
			store, err := idemsqlite.OpenMemory(ctx, idemsqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if err := store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
				_, err := tx.Exec(ctx, `CREATE TABLE deliveries (id TEXT PRIMARY KEY, status INTEGER)`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			cfg := &operation.Config{Name: "orders.consume", APIRevision: "v1", OneTransaction: oneTx}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			core := operation.NewCore(operation.Core{Store: store, Config: cfg})
			id := idem.Identity{Tenant: "t1", Principal: "queue"}
			request := func(key string, fp idem.Fingerprint) operation.Request {
				k, err := idem.ParseKey([]string{key}, idem.KeyPolicy{})
				if err != nil {
					t.Fatal(err)
				}
				return operation.Request{Identity: id, Scope: idem.ScopeOf(id, cfg.Name, cfg.ScopeRevision(), k), Fingerprint: fp}
			}
			runs := 0
			door := func(status int) operation.ExecuteFunc {
				return func(ctx context.Context, tx registry.Tx, rec registry.Record) (operation.Answer, error) {
					runs++
					if _, err := tx.Exec(ctx, `INSERT INTO deliveries (id, status) VALUES ($1, $2)`, rec.OperationID, status); err != nil {
						return operation.Answer{Status: status, Failed: err}, err
					}
					ans := operation.Answer{Status: status, State: cfg.StateFor(status, true)}
					if ans.State == "" {
						return ans, operation.ErrRelease
					}
					ans.Response = idem.Response{Status: status, MediaType: "application/octet-stream", Body: []byte("accepted " + rec.OperationID)}
					return ans, nil
				}
			}
			rows := func() int {
				var n int
				if err := store.InTx(ctx, func(ctx context.Context, tx registry.Tx) error {
					return tx.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&n)
				}); err != nil {
					t.Fatal(err)
				}
				return n
			}

			first := core.Run(ctx, request("msg-1", idem.Fingerprint{1}), door(201))
			if first.Kind != operation.Executed || first.Record.Response == nil || first.Record.State != idem.StateSucceeded {
				t.Fatalf("first delivery: %+v, want Executed with a stored answer", first)
			}
			again := core.Run(ctx, request("msg-1", idem.Fingerprint{1}), door(201))
			if again.Kind != operation.Replayed || string(again.Record.Response.Body) != string(first.Record.Response.Body) ||
				again.Record.OperationID != first.Record.OperationID {
				t.Fatalf("redelivery: %+v, want Replayed with the first answer", again)
			}
			other := core.Run(ctx, request("msg-1", idem.Fingerprint{2}), door(201))
			if other.Kind != operation.Refused || other.Refusal.Code != idem.CodePayloadConflict {
				t.Fatalf("same key, other payload: %+v, want Refused PAYLOAD_CONFLICT", other)
			}
			if runs != 1 || rows() != 1 {
				t.Fatalf("executed %d time(s), %d row(s); want once", runs, rows())
			}

			released := core.Run(ctx, request("msg-2", idem.Fingerprint{3}), door(503))
			if released.Kind != operation.Released {
				t.Fatalf("a releasing answer: %+v, want Released", released)
			}
			if rows() != 1 {
				t.Fatalf("%d rows after a released execution; its write must roll back", rows())
			}
			retried := core.Run(ctx, request("msg-2", idem.Fingerprint{3}), door(201))
			if retried.Kind != operation.Executed || runs != 3 || rows() != 2 {
				t.Fatalf("retry after a release: %+v, %d runs, %d rows; want Executed afresh", retried, runs, rows())
			}
		})
	}
}
