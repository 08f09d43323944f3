package payments

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/idemkit/idem/idemhttp"
)

// Rollout of the service's operations (docs/operations.md, "Rolling
// idempotency out"): each operation has a configured mode
// (Config.Modes) and an API revision (Config.Revisions), and follows its
// row in the registry (Config.Rollouts, "idem rollout").

// Revision is an operation's API revision and the older revision whose
// records it accepts as its own (idemhttp.Operation.AcceptsRecordsOf).
type Revision struct {
	// API is the revision bound into the operation's scope; "" means
	// Config.APIRevision.
	API string
	// AcceptsRecordsOf names an older revision whose records this one
	// replays, conflicts with and waits for as its own (the oldest of the
	// compatible family): a retry crossing the deploy of API finds the
	// first request's record. "" (the default): the seed's rule — a new
	// revision never replays, conflicts with or waits for an older one's
	// operations.
	AcceptsRecordsOf string
}

// Operations returns the names of the service's idempotent operations
// that cfg serves: payments.create, payments.refund, and transfers.create
// when cfg.Provider is set.
func Operations(cfg Config) []string {
	ops := []string{OperationCreate, OperationRefund}
	if cfg.Provider != "" {
		ops = append(ops, OperationTransfer)
	}
	sort.Strings(ops)
	return ops
}

// checkRollout reports whether every operation named in cfg.Modes and
// cfg.Revisions is one the service serves, every mode is known and every
// declared compatibility names another revision.
func checkRollout(cfg Config) error {
	ops := Operations(cfg)
	known := func(what, op string) error {
		if !slices.Contains(ops, op) {
			return fmt.Errorf("payments: %s: unknown operation %q (the service's: %s)", what, op, strings.Join(ops, ", "))
		}
		return nil
	}
	for op, m := range cfg.Modes {
		if err := known("Config.Modes", op); err != nil {
			return err
		}
		switch {
		case op == OperationTransfer && m == idemhttp.Off:
			return fmt.Errorf("payments: Config.Modes: %s cannot be off: its provider call needs the downstream key its record holds", op)
		case m == idemhttp.Enforce, m == idemhttp.Shadow, m == idemhttp.Off:
		default:
			return fmt.Errorf("payments: Config.Modes: operation %s: unknown mode %q (off, shadow or enforce)", op, m)
		}
	}
	for op, r := range cfg.Revisions {
		if err := known("Config.Revisions", op); err != nil {
			return err
		}
		if api := cmp.Or(r.API, cfg.APIRevision, APIRevision); r.AcceptsRecordsOf == api {
			return fmt.Errorf("payments: Config.Revisions: operation %s: revision %s cannot accept its own records as an older revision's", op, api)
		}
	}
	return nil
}

// configure sets op's configured mode and revision from cfg.
func configure(op *idemhttp.Operation, cfg Config) {
	op.Mode = cmp.Or(cfg.Modes[op.Name], idemhttp.Enforce)
	r := cfg.Revisions[op.Name]
	op.APIRevision = cmp.Or(r.API, cfg.APIRevision, APIRevision)
	op.AcceptsRecordsOf = r.AcceptsRecordsOf
	op.ReplayCache = cfg.ReplayCache
}

// Rollouts returns the rollout rows every operation of the service
// follows (Config.Rollouts, or the one New built); "idem serve" flushes
// its verdict counts at shutdown (idemhttp.Rollouts.Flush).
func (s *Service) Rollouts() *idemhttp.Rollouts { return s.rollouts }
