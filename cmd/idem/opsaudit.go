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
	// Shard names the shard whose audit log holds the entry ("--shard").
	Shard       string    `json:"shard,omitempty"`
	Seq         int64     `json:"seq"`
	At          time.Time `json:"at"`
	Actor       string    `json:"actor"`
	Action      string    `json:"action"`
	OperationID string    `json:"operation_id,omitempty"`
	Detail      string    `json:"detail"`
}

func opsAudit(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("audit", std)
	f.addShards()
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
	f.keys = new(string) // the audit log holds no sealed bodies
	rows, code := readShards(ctx, f, "ops audit", std, func(store registry.Store) ([]registry.AuditEntry, error) {
		return store.AuditLog(ctx, registry.AuditFilter{OperationID: *op, Before: *before, Limit: *limit})
	}, func(a, b registry.AuditEntry) int { return b.At.Compare(a.At) }, *limit) // newest first
	if code != exitOK {
		return code
	}
	sharded := f.sharded()
	if *f.asJSON {
		out := make([]auditJSON, 0, len(rows))
		for _, r := range rows {
			e := r.v
			out = append(out, auditJSON{Shard: r.shard, Seq: e.Seq, At: e.At, Actor: e.Actor, Action: e.Action, OperationID: e.OperationID, Detail: e.Detail})
		}
		if err := printJSON(std.out, struct {
			Audit []auditJSON `json:"audit"`
		}{out}); err != nil {
			fmt.Fprintf(std.err, "idem ops audit: %v\n", err)
			return exitRefused
		}
		return exitOK
	}
	if err := printAudit(std.out, rows, sharded); err != nil {
		fmt.Fprintf(std.err, "idem ops audit: %v\n", err)
		return exitRefused
	}
	if len(rows) == *limit && !sharded {
		fmt.Fprintf(std.err, "idem ops audit: showing the newest %d; --before %d shows older ones\n", *limit, rows[len(rows)-1].v.Seq)
	}
	return exitOK
}

// printAudit prints audit entries as a table, or "no audit entries".
// With sharded, a first column SHARD names each entry's shard.
func printAudit(w io.Writer, log []onShard[registry.AuditEntry], sharded bool) error {
	if len(log) == 0 {
		_, err := fmt.Fprintln(w, "no audit entries")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if sharded {
		fmt.Fprint(tw, "SHARD\t")
	}
	fmt.Fprintln(tw, "SEQ\tAT\tACTOR\tACTION\tOPERATION ID\tDETAIL")
	for _, r := range log {
		e := r.v
		if sharded {
			fmt.Fprintf(tw, "%s\t", r.shard)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, stamp(e.At), oneLine(e.Actor), oneLine(e.Action), orDash(oneLine(e.OperationID)), oneLine(e.Detail))
	}
	return tw.Flush()
}
