package main

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/registry"
)

// runDrain implements "idem drain [show|on|off] [--db DSN] [--json]" (SPEC
// E6, docs/operations.md). on sets the registry's drain flag: every server
// on the registry refuses new operations with 503 DRAINING within its
// refresh interval (about a second), while replays of finished operations
// and operations already in flight go on. off clears it. show, the
// default, prints the control row as "idem epoch show" does. on and off
// are written to the registry's audit log first, under $USER (else
// "operator"); when that cannot be written nothing is changed.
//
// Human output of on:
//
//	draining on
//	new operations are refused with 503 DRAINING within about a second; …
//
// With --json every action prints the control row as it is afterwards, on
// one line: {"writer_epoch":4,"draining":true,"updated_at":"…"}.
func runDrain(ctx context.Context, args []string, std stdio) int {
	action, dsn, asJSON, code, ok := controlArgs("drain", []string{"show", "on", "off"}, args, std)
	if !ok {
		return code
	}
	return withControl(ctx, "drain", dsn, std, func(store registry.Store) error {
		if action != "show" {
			entry := registry.AuditEntry{Actor: defaultActor(), Action: map[string]string{"on": registry.AuditDrainOn, "off": registry.AuditDrainOff}[action], Detail: "idem drain " + action}
			if err := registry.Audited(ctx, store, entry, func() error { return store.SetDraining(ctx, action == "on") }); err != nil {
				return err
			}
			if !asJSON {
				if action == "on" {
					fmt.Fprintln(std.out, "draining on")
					fmt.Fprintln(std.out, "new operations are refused with 503 DRAINING within about a second; "+
						"replays and operations in flight go on")
				} else {
					fmt.Fprintln(std.out, "draining off")
					fmt.Fprintln(std.out, "new operations are accepted again within about a second")
				}
				return nil
			}
		}
		return printControl(ctx, store, asJSON, std.out)
	})
}
