package webhook

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/sqlfile"
	"github.com/idemkit/idem/registry"
)

//go:embed sequence.sql
var sequenceFS embed.FS

var sequenceQueries = sqlfile.MustLoad(sequenceFS, "sequence.sql")

// MaxStreamLength bounds a sequence stream's name, in bytes.
const MaxStreamLength = 255

// AdvanceSequence is the sequence check for a sender that numbers its
// events: it records, in tx — the delivery's transaction, from
// idemhttp.Tx in a Receiver's handler — that stream has reached seq, and
// reports whether seq is newer than every event of stream seen before.
// An older or equal seq changes nothing and reports false: the handler
// then ignores (or parks) the event and answers 2xx, and that answer is
// stored like any other, so re-sends of the stale event get it too.
//
// stream names what the sender orders its events within, for example
// "psp:transfer:tr_123" (a sender whose numbering is global uses one
// stream); put the sender in it, as streams of every Receiver share one
// table (idem_webhook_sequences, in the registry's database). It is 1 to
// MaxStreamLength bytes, compared byte for byte.
//
// The check is one read and one compare-and-set: it never moves a
// stream back, and two deliveries of one stream at once are serialised
// by the database (the second waits for the first's transaction, then
// sees its sequence; two first events at once: one fails on the primary
// key, and its sender retries). ctx governs the statements.
func AdvanceSequence(ctx context.Context, tx registry.Tx, stream string, seq int64) (fresh bool, err error) {
	if tx == nil {
		return false, errors.New("webhook: AdvanceSequence needs the delivery's transaction")
	}
	if len(stream) == 0 || len(stream) > MaxStreamLength {
		return false, fmt.Errorf("webhook: a sequence stream is 1 to %d bytes, not %d", MaxStreamLength, len(stream))
	}
	now := time.Now().UnixMilli()
	var found, last int64
	switch err := tx.QueryRow(ctx, sequenceQueries.Get("sequence_get"), stream).Scan(&found, &last); {
	case err != nil:
		return false, fmt.Errorf("webhook: sequence of %q: %w", stream, err)
	case found == 0:
		if _, err := tx.Exec(ctx, sequenceQueries.Get("sequence_insert"), stream, seq, now); err != nil {
			return false, fmt.Errorf("webhook: sequence of %q: %w", stream, err)
		}
		return true, nil
	case seq <= last:
		return false, nil
	}
	n, err := tx.Exec(ctx, sequenceQueries.Get("sequence_advance"), stream, seq, now)
	if err != nil {
		return false, fmt.Errorf("webhook: sequence of %q: %w", stream, err)
	}
	return n == 1, nil
}
