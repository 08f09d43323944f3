package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/registry"
)

// "idem ops dead-letters" and "idem ops requeue" (ops.go): the outbox's
// dead letters.

// deadLetterJSON is the JSON form of a dead letter. The payload is never
// printed, only its size: it may hold personal data.
type deadLetterJSON struct {
	MessageID     string    `json:"message_id"`
	OperationID   string    `json:"operation_id"`
	Topic         string    `json:"topic"`
	Attempts      int       `json:"attempts"`
	LastError     string    `json:"last_error"`
	CreatedAt     time.Time `json:"created_at"`
	LastAttemptAt time.Time `json:"last_attempt_at"`
	DeadAt        time.Time `json:"dead_at"`
	PayloadBytes  int       `json:"payload_bytes"`
}

func opsDeadLetters(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("dead-letters", std)
	limit := f.Int("limit", registry.DefaultListLimit, "print at most `N` dead letters")
	if _, code, ok := f.parse(args, 0); !ok {
		return code
	}
	if *limit <= 0 {
		fmt.Fprintf(std.err, "idem ops dead-letters: --limit %d: want a positive number\n", *limit)
		return exitUsage
	}
	return withControl(ctx, "ops dead-letters", *f.db, std, func(store registry.Store) error {
		msgs, err := store.DeadLetters(ctx, *limit)
		if err != nil {
			return err
		}
		if *f.asJSON {
			out := make([]deadLetterJSON, 0, len(msgs))
			for _, m := range msgs {
				out = append(out, deadLetterJSON{
					MessageID: m.ID, OperationID: m.OperationID, Topic: m.Topic, Attempts: m.Attempts,
					LastError: m.LastError, CreatedAt: m.CreatedAt, LastAttemptAt: m.LastAttemptAt,
					DeadAt: m.DeadAt, PayloadBytes: len(m.Payload),
				})
			}
			return printJSON(std.out, struct {
				DeadLetters []deadLetterJSON `json:"dead_letters"`
			}{out})
		}
		if err := printDeadLetters(std.out, msgs); err != nil {
			return err
		}
		if len(msgs) == *limit {
			fmt.Fprintf(std.err, "idem ops dead-letters: showing the first %d; raise --limit to see more\n", *limit)
		}
		return nil
	})
}

// printDeadLetters prints dead letters as a table, or "no dead letters".
func printDeadLetters(w io.Writer, msgs []registry.OutboxMessage) error {
	if len(msgs) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE ID\tTOPIC\tATTEMPTS\tDEAD AT\tLAST ERROR")
	for _, m := range msgs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", oneLine(m.ID), oneLine(m.Topic), m.Attempts, stamp(m.DeadAt), oneLine(m.LastError))
	}
	return tw.Flush()
}

func opsRequeue(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("requeue", std)
	words, code, ok := f.parse(args, 1)
	if !ok {
		return code
	}
	id := words[0]
	return withControl(ctx, "ops requeue", *f.db, std, func(store registry.Store) error {
		entry := registry.AuditEntry{Actor: defaultActor(), Action: registry.AuditOutboxRequeue, OperationID: operationOfMessage(id), Detail: "idem ops requeue " + id}
		switch err := registry.Audited(ctx, store, entry, func() error { return store.RequeueOutbox(ctx, id) }); {
		case errors.Is(err, registry.ErrNotFound):
			return fmt.Errorf("outbox message %s not found", id)
		case errors.Is(err, registry.ErrFenced):
			return fmt.Errorf("outbox message %s is not a dead letter (delivered, or still being retried); nothing was changed", id)
		case err != nil:
			return err
		}
		if *f.asJSON {
			return printJSON(std.out, struct {
				Requeued string `json:"requeued"`
			}{id})
		}
		_, err := fmt.Fprintf(std.out, "outbox message %s requeued: pending again with no attempts; the next relay round delivers it\n", id)
		return err
	})
}

// operationOfMessage returns the operation ID of an outbox message ID
// (registry.MessageID), "" when it has none.
func operationOfMessage(id string) string {
	op, _, ok := strings.Cut(id, "/")
	if !ok {
		return ""
	}
	return op
}
