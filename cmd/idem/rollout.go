package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/registry"
)

// runRollout implements "idem rollout" (docs/operations.md, "Rolling
// idempotency out"): the rollout state of each operation in the registry,
// which every running instance follows within its refresh (about a
// second by default), without a restart.
//
//	idem rollout status [--db DSN]
//
// prints every operation's row: mode ("configured" when no operator set
// one: each instance uses its --mode), percent, by principal, the allow
// and deny lists, forced, when it was first enforced, the version and
// who changed it last.
//
//	idem rollout report OPERATION [--db DSN]
//
// prints the verdict totals of the operation per tenant, side by side:
// what shadow predicted enforce would answer (execute, replay, conflict,
// in_flight, key_refused, key_retired, refused) and what enforce did
// answer, then the totals over every tenant. The counts are statistics
// flushed by each instance at every refresh and at shutdown; a crash
// loses at most one refresh's counts.
//
//	idem rollout OPERATION off|shadow|enforce [--percent N] [--tenants a,b] [--deny-tenants c]
//	    [--by-principal] [--force] [--expect-version V] [--reason TEXT] [--actor NAME] [--db DSN]
//
// changes the operation's row in one compare-and-set, with its audit
// entry (action rollout.set, actor --actor, else $USER, else "operator")
// in the same transaction. --percent defaults to 100 with enforce and to
// 0 otherwise; --tenants (always enforced), --deny-tenants (never
// enforced) and --by-principal keep the row's values unless given
// (--tenants "" clears the list). Without --expect-version the command
// reads the row and sets it on the version it read; with it, on version
// V (what "idem rollout status" or the console showed): of two operators
// racing from one version exactly one wins.
//
// Exit codes: 0 changed (or printed), 1 refused or failed (invalid
// change, store error), 2 bad usage, 3 stale: the row changed since the
// version the change was based on — nothing was written, read it again
// and decide again, 4 force required: the operation has been enforced,
// so turning it off (instances writing without idempotency) needs
// --force — nothing was written.
func runRollout(ctx context.Context, args []string, std stdio) int {
	fs := newFlags("rollout", "status | report OPERATION | OPERATION off|shadow|enforce [--percent N] [--tenants a,b] "+
		"[--deny-tenants c] [--by-principal] [--force] [--expect-version V] [--reason TEXT] [--actor NAME] [--db DSN]", std)
	db := fs.db(defaultDB, "registry database `DSN`: sqlite:PATH, postgres://… or mysql://…")
	var percent, expect optInt
	fs.Var(&percent, "percent", "with enforce: the share of callers enforced, `N` 0 to 100 (default 100; 0 with off and shadow)")
	tenants := fs.String("tenants", "", "with enforce: `TENANTS` (comma-separated) always enforced; default: the row's list; \"\" clears it")
	deny := fs.String("deny-tenants", "", "with enforce: `TENANTS` (comma-separated) never enforced (served in shadow); default: the row's list; \"\" clears it")
	byPrincipal := fs.Bool("by-principal", false, "ramp by tenant and principal instead of whole tenants; default: the row's setting")
	force := fs.Bool("force", false, "with off: turn off an operation that has been enforced (audited; instances then write without idempotency)")
	fs.Var(&expect, "expect-version", "set the row only if its version is still `V` (as status showed; 0: no row yet); default: the version read now")
	reason := fs.String("reason", "", "why (`TEXT`), written to the audit log")
	actor := fs.String("actor", defaultActor(), "who changes it (`NAME`; default $USER, else operator)")
	fs.notes = rolloutNotes
	words, code, ok := fs.parse(args)
	if !ok {
		return code
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	changeFlags := []string{"percent", "tenants", "deny-tenants", "by-principal", "force", "expect-version", "reason", "actor"}
	if len(words) == 0 {
		return fs.usage("an action is expected: status, report OPERATION, or OPERATION off|shadow|enforce")
	}
	if words[0] == "status" || words[0] == "report" {
		for _, f := range changeFlags {
			if given[f] {
				return fs.usage(fmt.Sprintf("--%s applies to a change only (idem rollout OPERATION MODE)", f))
			}
		}
	}
	switch {
	case words[0] == "status" && len(words) == 1:
		return withControl(ctx, "rollout", *db, std, func(store registry.Store) error {
			rs, err := store.Rollouts(ctx)
			if err != nil {
				return err
			}
			return printRollouts(std.out, rs)
		})
	case words[0] == "report" && len(words) == 2:
		return withControl(ctx, "rollout", *db, std, func(store registry.Store) error {
			return rolloutReport(ctx, store, words[1], std.out)
		})
	case words[0] == "status" || words[0] == "report":
		return fs.usage(fmt.Sprintf("unexpected arguments %q", words))
	case len(words) != 2:
		return fs.usage(fmt.Sprintf("want OPERATION off|shadow|enforce, got %q", words))
	}
	mode := words[1]
	if mode != registry.RolloutOff && mode != registry.RolloutShadow && mode != registry.RolloutEnforce {
		return fs.usage(fmt.Sprintf("unknown mode %q: want off, shadow or enforce", mode))
	}
	if mode != registry.RolloutEnforce && given["percent"] {
		return fs.usage("--percent applies to enforce only")
	}
	if expect.set && expect.n < 0 {
		return fs.usage("--expect-version must be a version >= 0")
	}
	if strings.TrimSpace(*actor) == "" {
		return fs.usage("--actor must not be empty")
	}
	c := registry.RolloutChange{Operation: words[0], Mode: mode, Percent: int(percent.n), Force: *force, Actor: *actor, Reason: *reason}
	if !percent.set && mode == registry.RolloutEnforce {
		c.Percent = 100
	}
	code = exitOK
	done := withControl(ctx, "rollout", *db, std, func(store registry.Store) error {
		row, err := store.Rollout(ctx, c.Operation)
		if err != nil {
			return err
		}
		c.Seen = row.Version
		if expect.set {
			c.Seen = expect.n
		}
		c.Allow, c.Deny, c.ByPrincipal = row.Allow, row.Deny, row.ByPrincipal
		if given["tenants"] {
			c.Allow = tenantList(*tenants)
		}
		if given["deny-tenants"] {
			c.Deny = tenantList(*deny)
		}
		if given["by-principal"] {
			c.ByPrincipal = *byPrincipal
		}
		if row.Version == 0 {
			if counts, err := store.Verdicts(ctx, c.Operation); err == nil && len(counts) == 0 {
				fmt.Fprintf(std.err, "idem rollout: note: no instance has reported serving %s yet (no row, no verdicts): "+
					"check the name — rollout rows are never deleted\n", printable(c.Operation))
			}
		}
		if c.Seen != row.Version { // the lists read above are of another version
			err = registry.ErrRolloutStale
		} else if err = c.Validate(); err == nil {
			var after registry.Rollout
			if after, err = store.SetRollout(ctx, c); err == nil {
				printChange(std.out, row, after)
				return nil
			}
		}
		switch {
		case errors.Is(err, registry.ErrRolloutStale):
			now, _ := store.Rollout(ctx, c.Operation)
			fmt.Fprintf(std.err, "idem rollout: STALE: %s changed since version %d (it is at version %d, %s): nothing was changed; "+
				"read it again (idem rollout status) and decide again\n", printable(c.Operation), c.Seen, now.Version, describeRollout(now))
			code = exitStale
			return nil
		case errors.Is(err, registry.ErrForceRequired):
			fmt.Fprintf(std.err, "idem rollout: FORCE_REQUIRED: %s has been enforced (since %s): turned off, instances would write "+
				"without idempotency and a retry of an answered request could execute again; nothing was changed. "+
				"Use shadow to stop enforcing safely, or add --force (audited) if that is really meant\n",
				printable(c.Operation), stamp(row.EnforcedAt))
			code = exitForce
			return nil
		}
		return err
	})
	if done != exitOK {
		return done
	}
	return code
}

// rolloutNotes end "idem help rollout".
const rolloutNotes = `Every instance follows a change within its refresh (about a second), without a restart.
A change sets the row in one compare-and-set on the version read (or --expect-version V)
and writes its audit entry (rollout.set) in the same transaction.
Ramp: shadow first, read "idem rollout report OPERATION", then enforce --percent 10, 50,
100; the callers enforced at a lower percent stay enforced at a higher one.
Turning off an operation that has been enforced needs --force: without it instances
started with the operation off serve it read-only (replays; 503 READ_ONLY for new keys).
Rollback: docs/operations.md, "Rolling idempotency out".

exit codes:
  0  changed, or printed
  1  refused or failed: an invalid change (bad tenant, percent), a store error
  2  bad usage
  3  STALE: the row changed since the version the change was based on; nothing
     was changed: read it again (idem rollout status) and decide again
  4  FORCE_REQUIRED: the operation has been enforced; off needs --force; nothing
     was changed
`

// optInt is an integer flag that knows whether it was given; its help
// shows no default.
type optInt struct {
	n   int64
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatInt(o.n, 10)
}

func (o *optInt) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return errors.New("want a whole number")
	}
	o.n, o.set = n, true
	return nil
}

// Exit codes of "idem rollout" besides exitOK, exitRefused and exitUsage.
const (
	exitStale = 3 // registry.ErrRolloutStale: nothing written
	exitForce = 4 // registry.ErrForceRequired: nothing written
)

// tenantList splits a comma-separated list, dropping blanks; "" is the
// empty list.
func tenantList(s string) []string {
	var out []string
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// describeRollout says a row's state in a few words: "enforce 10% (by
// tenant; allow a; deny b)", "shadow", "off (forced)", "configured".
func describeRollout(r registry.Rollout) string {
	var s string
	switch r.Mode {
	case "":
		s = "configured (no mode set: each instance uses its --mode)"
	case registry.RolloutEnforce:
		by := "by tenant"
		if r.ByPrincipal {
			by = "by tenant and principal"
		}
		s = fmt.Sprintf("enforce %d%% (%s", r.Percent, by)
		if len(r.Allow) > 0 {
			s += "; always " + printable(strings.Join(r.Allow, ","))
		}
		if len(r.Deny) > 0 {
			s += "; never " + printable(strings.Join(r.Deny, ","))
		}
		s += ")"
	default:
		s = r.Mode
	}
	if r.Forced {
		s += " (forced)"
	}
	return s
}

// printChange prints what a change did and what follows from it.
func printChange(w io.Writer, before, after registry.Rollout) {
	fmt.Fprintf(w, "%s: %s -> %s (version %d -> %d)\n", printable(after.Operation), describeRollout(before), describeRollout(after), before.Version, after.Version)
	switch after.Mode {
	case registry.RolloutEnforce:
		fmt.Fprintln(w, "the callers selected are served under the contract; the others in shadow")
	case registry.RolloutShadow:
		fmt.Fprintln(w, "new keys execute with their records as under enforce; what enforce would answer is counted (idem rollout report); "+
			"stored answers are kept, and once enforced, answered as enforce does")
	case registry.RolloutOff:
		if after.Forced {
			fmt.Fprintln(w, "turned off by force: instances now write this operation without idempotency")
		} else {
			fmt.Fprintln(w, "no idempotency for this operation")
		}
	}
	if !after.EnforcedAt.IsZero() {
		fmt.Fprintf(w, "first enforced at %s\n", stamp(after.EnforcedAt))
	}
	fmt.Fprintln(w, "every instance follows within its refresh (about a second by default); the change is in the audit log (idem ops audit)")
}

// printRollouts prints the rows as a table, or a sentence when there are
// none.
func printRollouts(w io.Writer, rs []registry.Rollout) error {
	if len(rs) == 0 {
		_, err := fmt.Fprintln(w, "no rollout rows: every instance serves each operation in its configured mode (idem serve --mode)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tMODE\tPERCENT\tBY PRINCIPAL\tALLOW\tDENY\tFORCED\tENFORCED AT\tVERSION\tUPDATED BY\tUPDATED AT")
	for _, r := range rs {
		mode := r.Mode
		if mode == "" {
			mode = "configured"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", printable(r.Operation), mode, r.Percent, yesNo(r.ByPrincipal),
			orDash(printable(strings.Join(r.Allow, ","))), orDash(printable(strings.Join(r.Deny, ","))), yesNo(r.Forced),
			orDash(stampOrEmpty(r.EnforcedAt)), r.Version, orDash(printable(r.UpdatedBy)), orDash(stampOrEmpty(r.UpdatedAt)))
	}
	return tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// stampOrEmpty is stamp, or "" for the zero time.
func stampOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return stamp(t)
}

// verdictOrder is the order in which reports list the verdicts.
var verdictOrder = []string{registry.VerdictExecute, registry.VerdictReplay, registry.VerdictConflict, registry.VerdictInFlight,
	registry.VerdictKeyRefused, registry.VerdictKeyRetired, registry.VerdictRefused}

// verdictTotals are one tenant's (or every tenant's) counts by verdict:
// predicted in shadow, answered in enforce.
type verdictTotals struct {
	Tenant            string
	Shadow, Enforce   map[string]int64
	ShadowN, EnforceN int64
}

// tallyVerdicts sums counts per tenant (ordered) and over every tenant.
func tallyVerdicts(counts []registry.VerdictCount) (tenants []verdictTotals, all verdictTotals) {
	all = verdictTotals{Shadow: map[string]int64{}, Enforce: map[string]int64{}}
	idx := map[string]int{}
	for _, c := range counts {
		i, ok := idx[c.Tenant]
		if !ok {
			i = len(tenants)
			idx[c.Tenant] = i
			tenants = append(tenants, verdictTotals{Tenant: c.Tenant, Shadow: map[string]int64{}, Enforce: map[string]int64{}})
		}
		for _, t := range []*verdictTotals{&tenants[i], &all} {
			switch c.Mode {
			case registry.RolloutShadow:
				t.Shadow[c.Verdict] += c.Count
				t.ShadowN += c.Count
			case registry.RolloutEnforce:
				t.Enforce[c.Verdict] += c.Count
				t.EnforceN += c.Count
			}
		}
	}
	slices.SortFunc(tenants, func(a, b verdictTotals) int { return strings.Compare(a.Tenant, b.Tenant) })
	return tenants, all
}

// verdicts returns verdictOrder, then any other verdict in the counts,
// sorted.
func verdicts(counts []registry.VerdictCount) []string {
	out := slices.Clone(verdictOrder)
	var extra []string
	for _, c := range counts {
		if !slices.Contains(out, c.Verdict) && !slices.Contains(extra, c.Verdict) {
			extra = append(extra, c.Verdict)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// rolloutReport prints the operation's row and its verdict totals:
//
//	payments.create: enforce 10% (by tenant) (version 3)
//	TENANT  VERDICT   SHADOW (PREDICTED)  ENFORCE (ANSWERED)
//	acme    execute   120                 14
//	acme    replay    3                   1
//	…
//	(all)   execute   …
func rolloutReport(ctx context.Context, store registry.Store, op string, w io.Writer) error {
	row, err := store.Rollout(ctx, op)
	if err != nil {
		return err
	}
	counts, err := store.Verdicts(ctx, op)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %s (version %d)\n", printable(op), describeRollout(row), row.Version)
	if len(counts) == 0 {
		_, err := fmt.Fprintln(w, "no verdicts counted yet: no instance has served this operation in shadow or enforce since counting began (counts are flushed at each refresh)")
		return err
	}
	tenants, all := tallyVerdicts(counts)
	names := verdicts(counts)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tVERDICT\tSHADOW (PREDICTED)\tENFORCE (ANSWERED)")
	line := func(t verdictTotals, label string, every bool) {
		for _, v := range names {
			if every || t.Shadow[v] != 0 || t.Enforce[v] != 0 {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", label, v, t.Shadow[v], t.Enforce[v])
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", label, "(total)", t.ShadowN, t.EnforceN)
	}
	for _, t := range tenants {
		line(t, orDash(printable(t.Tenant)), false)
	}
	line(all, "(all)", true)
	return tw.Flush()
}
