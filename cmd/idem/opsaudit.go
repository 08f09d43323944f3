package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/registry"
)

// "idem ops audit" (ops.go): the registry's audit log, newest first.

// auditJSON is the JSON form of an audit entry.
type auditJSON struct {
	Seq         int64     `json:"seq"`
	At          time.Time `json:"at"`
	Actor       string    `json:"actor"`
	Action      string    `json:"action"`
	OperationID string    `json:"operation_id,omitempty"`
	Detail      string    `json:"detail"`
}

func opsAudit(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("audit", std)
	op := f.String("operation", "", "only the entries about operation `ID`")
	before := f.Int64("before", 0, "only entries older than sequence number `SEQ` (the next page)")
	limit := f.Int("limit", registry.DefaultAuditLimit, "print at most `N` entries")
	if _, code, ok := f.parse(args, 0); !ok {
		return code
	}
	if *limit <= 0 || *before < 0 {
		fmt.Fprintln(std.err, "idem ops audit: --limit must be positive and --before not negative")
		return exitUsage
	}
	return withControl(ctx, "ops audit", *f.db, std, func(store registry.Store) error {
		log, err := store.AuditLog(ctx, registry.AuditFilter{OperationID: *op, Before: *before, Limit: *limit})
		if err != nil {
			return err
		}
		if *f.asJSON {
			out := make([]auditJSON, 0, len(log))
			for _, e := range log {
				out = append(out, auditJSON(e))
			}
			return printJSON(std.out, struct {
				Audit []auditJSON `json:"audit"`
			}{out})
		}
		if err := printAudit(std.out, log); err != nil {
			return err
		}
		if len(log) == *limit {
			fmt.Fprintf(std.err, "idem ops audit: showing the newest %d; --before %d shows older ones\n", *limit, log[len(log)-1].Seq)
		}
		return nil
	})
}

// printAudit prints audit entries as a table, or "no audit entries".
func printAudit(w io.Writer, log []registry.AuditEntry) error {
	if len(log) == 0 {
		_, err := fmt.Fprintln(w, "no audit entries")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAT\tACTOR\tACTION\tOPERATION ID\tDETAIL")
	for _, e := range log {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, stamp(e.At), oneLine(e.Actor), oneLine(e.Action), orDash(oneLine(e.OperationID)), oneLine(e.Detail))
	}
	return tw.Flush()
}
