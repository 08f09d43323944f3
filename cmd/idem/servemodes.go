package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/idemhttp"
)

// "idem serve --mode OP=MODE --revision OP=REV[:ACCEPTS]": each
// operation's configured mode and API revision (payments.Config.Modes,
// payments.Config.Revisions).

// modeFlag collects --mode OP=MODE, repeatable.
type modeFlag map[string]idemhttp.Mode

func (m modeFlag) String() string { return "" }

func (m modeFlag) Set(v string) error {
	op, mode, ok := strings.Cut(v, "=")
	if !ok || op == "" {
		return fmt.Errorf("want OPERATION=off|shadow|enforce, got %q", v)
	}
	switch idemhttp.Mode(mode) {
	case idemhttp.Off, idemhttp.Shadow, idemhttp.Enforce:
	default:
		return fmt.Errorf("%s: unknown mode %q (off, shadow or enforce)", op, mode)
	}
	if _, dup := m[op]; dup {
		return fmt.Errorf("%s: --mode given twice", op)
	}
	m[op] = idemhttp.Mode(mode)
	return nil
}

// revisionFlag collects --revision OP=REV[:ACCEPTS], repeatable.
type revisionFlag map[string]payments.Revision

func (m revisionFlag) String() string { return "" }

func (m revisionFlag) Set(v string) error {
	op, rev, ok := strings.Cut(v, "=")
	api, accepts, _ := strings.Cut(rev, ":")
	switch {
	case !ok || op == "" || api == "" || strings.HasSuffix(rev, ":"):
		return fmt.Errorf("want OPERATION=REVISION or OPERATION=REVISION:ACCEPTS (payments.create=v2:v1), got %q", v)
	case api == accepts:
		return fmt.Errorf("%s: revision %s cannot accept its own records as an older revision's", op, api)
	}
	if _, dup := m[op]; dup {
		return fmt.Errorf("%s: --revision given twice", op)
	}
	m[op] = payments.Revision{API: api, AcceptsRecordsOf: accepts}
	return nil
}

// addRolloutFlags registers --mode and --revision on fs.
func addRolloutFlags(fs *flag.FlagSet) (modeFlag, revisionFlag) {
	modes, revisions := modeFlag{}, revisionFlag{}
	fs.Var(modes, "mode", "`OPERATION=MODE`, repeatable: the operation's configured mode, off, shadow or enforce (default enforce), "+
		"used while its rollout row sets none (idem rollout); an operation that has been enforced and is off here is served read-only")
	fs.Var(revisions, "revision", "`OPERATION=REV[:ACCEPTS]`, repeatable: the operation's API revision (default --api-revision); "+
		"with :ACCEPTS it declares that REV accepts the records of the older revision ACCEPTS as its own, so a retry crossing the deploy replays (payments.create=v2:v1)")
	return modes, revisions
}

// checkOperations reports an operation named in modes or revisions that
// the service configured by cfg does not serve, and transfers.create off.
func checkOperations(cfg payments.Config, modes modeFlag, revisions revisionFlag) error {
	ops := payments.Operations(cfg)
	for _, op := range append(slices.Sorted(maps.Keys(modes)), slices.Sorted(maps.Keys(revisions))...) {
		if !slices.Contains(ops, op) {
			return fmt.Errorf("unknown operation %q (this service's: %s)", op, strings.Join(ops, ", "))
		}
	}
	if modes[payments.OperationTransfer] == idemhttp.Off {
		return fmt.Errorf("--mode %s=off: a transfer's provider call needs the downstream key its record holds; use shadow", payments.OperationTransfer)
	}
	return nil
}
