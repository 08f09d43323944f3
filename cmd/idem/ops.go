package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// runOps implements "idem ops list|show|lookup|reconcile|approve|dead-letters|requeue|audit"
// (SPEC O2, E2, E4): the operator's view of the registry's operations, the
// human end of reconciliation, and the outbox's dead letters. Every action takes --db DSN (default sqlite:idem.db;
// migrations are applied as by every command with --db) and --json; flags
// may come before or after the action and the operation ID.
//
//	idem ops list [--state S] [--older-than D] [--limit N] [--json] --db DSN
//
// lists operations, oldest first: all of them, or those in state S
// (RESERVED, EXECUTING, SUCCEEDED, FAILED_FINAL, UNKNOWN, REJECTED; case
// does not matter) and created at least D ago (a Go duration: 90s, 15m,
// 24h; measured against the database's clock). At most N (default 100)
// are printed; when that many are, a note on stderr says so. "idem ops
// list --state unknown --older-than 15m" is the list of operations waiting
// for reconciliation past a 15-minute recovery SLO. Human output is a
// table (OPERATION ID, STATE, OPERATION, GEN, AGE, CREATED AT); --json
// prints one line {"operations":[…]} with the objects of ops show.
//
//	idem ops show ID [--json] --db DSN
//
// prints one operation: its record (state, owner generation, writer epoch,
// scope and fingerprint in hex, times, and the stored response's status,
// media type, Location, ETag, size and digest — never its body, which may
// hold personal data), its effect attempts (name, downstream key, owner
// generation, handle, result), its reconciliation log, its recorded
// lookups and its settlement request waiting for approval, if any. --json
// prints {"operation":{…},"effects":[…],"reconciliations":[…],
// "lookups":[…],"pending":{…}} on one line.
//
//	idem ops lookup ID --provider URL [--effect NAME] [--provider-timeout D] [--actor NAME] [--json] --db DSN
//
// asks the downstream provider at URL what it did with the downstream key
// of each effect of the operation (or of effect NAME only), executing
// nothing — as the console's "Ask the downstream" does
// (effect.Set.LookupByOperator) — and records the question and the answer
// on the effect: the effect, the key, the answer (executed with its
// handle, declined, not found, no answer), who asked (--actor, default
// $USER, else "operator") and when, plus two audit entries. It prints one
// line per answer; --json prints {"lookups":[…]}. An answer that proves
// nothing (a timeout, a 5xx) is recorded too and exits 1. Every later
// decision is checked against what was recorded.
//
//	idem ops reconcile ID --outcome succeeded|failed [--handle H] --evidence TEXT [--actor NAME] [--json] --db DSN
//
// settles an UNKNOWN operation on an operator's written evidence: every
// unsettled effect attempt is stored as executed (succeeded, with the
// downstream's handle H when known) or declined (failed: the downstream
// did not and never will execute its key), and the operation's own
// rendering of that result is stored (with its digest) for every later
// retry with its key to replay — for a transfer, 201 with the Transfer, or
// 422 TRANSFER_DECLINED — exactly as if the worker had settled it from
// the provider's answer (effect.Operation.SettleByOperator). The decision
// is logged with method "operator", the actor (default $USER, else
// "operator"), the evidence and the time. Nothing is executed.
//
// The evidence must name something that can be checked: at least 10
// characters and a reference — the provider's handle or ID (tr_2), a
// ticket (OPS-123, #4711) or a URL (exit 2, EVIDENCE_TOO_WEAK). A decision
// that contradicts an answer of the downstream recorded for the
// operation — a stored result, or a lookup by anyone (ops lookup, the
// console, the recovery worker, a client's retry) — is refused, nothing
// changed (exit 1, CONTRADICTS_EVIDENCE): "failed" after any "executed",
// "succeeded" after a "declined" or with another handle than the recorded
// one. "failed" without a recorded "declined" can make a client pay
// twice, so it takes two people: it is stored as a request that waits
// (exit 0, the operation still UNKNOWN) until another operator runs ops
// approve. An operation that is not UNKNOWN is refused (exit 1, nothing
// changed) — so of two operators reconciling at once exactly one
// succeeds — and so is an operation this command cannot render (only the
// reference service's transfers.create; a service of one's own settles
// its operations with effect.Operation.SettleByOperator). Look up the
// provider first (ops lookup).
//
//	idem ops approve ID [--actor NAME] [--json] --db DSN
//
// settles an UNKNOWN operation as its pending request says, on the
// approval of --actor, who must not be its requester (exit 1,
// SELF_APPROVAL). The request is checked again against what was recorded
// meanwhile. Of concurrent approvals one settles; the others exit 1. The
// reconciliation log names both ("alice, approved by bob"), and both are
// in the audit log.
//
//	idem ops dead-letters [--limit N] [--json] --db DSN
//
// lists the outbox messages the relay gave up on (SPEC E4: too many failed
// delivery attempts, or too old), oldest first, at most N (default 100):
// message ID, topic, attempts, when it died and the last error — never the
// payload. --json prints {"dead_letters":[…]} on one line (opsdead.go).
//
//	idem ops requeue MESSAGE-ID [--json] --db DSN
//
// makes a dead letter pending again with no attempts: the next relay round
// delivers it (with the same webhook-id, so receivers still dedupe). A
// message that is not dead is refused (exit 1, nothing changed). The
// requeue, like a reconciliation, is written to the audit log first.
//
//	idem ops audit [--operation ID] [--before SEQ] [--limit N] [--json] --db DSN
//
// prints the registry's audit log, newest first, at most N (default 100):
// who (an operator's name, or $USER for these commands) did what and
// when — console logins and lookups, reconciliations, drain, epoch bumps,
// requeues — each written before the change it announces, and a "failed"
// entry when that change then failed. --operation keeps the entries about
// one operation; --before SEQ reads the next page. --json prints
// {"audit":[…]} on one line (opsaudit.go).
//
// list, show, reconcile and audit take, instead of --db, the shards of
// a sharded service ("idem serve --shard"): --shard NAME=DSN, repeated.
// list and audit read every shard, merge the rows (oldest first, newest
// first; at most --limit in all) and name each row's shard (a SHARD
// column, a "shard" member); audit's --before applies to each shard's own
// sequence numbers. show and reconcile find the operation on the shard
// that holds it and name that shard ("shard" in the output; "not found
// on any shard", exit 1, when none does).
//
// Exit codes: 0 done, 1 refused or failed (not found, not UNKNOWN, not
// dead, store error), 2 bad usage.
func runOps(ctx context.Context, args []string, std stdio) int {
	action, rest := opsAction(args)
	switch action {
	case "list":
		return opsList(ctx, rest, std)
	case "show":
		return opsShow(ctx, rest, std)
	case "reconcile":
		return opsReconcile(ctx, rest, std)
	case "dead-letters":
		return opsDeadLetters(ctx, rest, std)
	case "requeue":
		return opsRequeue(ctx, rest, std)
	case "audit":
		return opsAudit(ctx, rest, std)
	case "lookup":
		return opsLookup(ctx, rest, std)
	case "approve":
		return opsApprove(ctx, rest, std)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && slices.Contains(opsActions, rest[0]) { // "idem ops help list"
			return runOps(ctx, []string{rest[0], "--help"}, std)
		}
		opsUsage(std.out)
		return exitOK
	case "":
		fmt.Fprintln(std.err, "idem ops: no action")
	default:
		fmt.Fprintf(std.err, "idem ops: unknown action %q\n", action)
	}
	opsUsage(std.err)
	return exitUsage
}

// opsActions are the actions of "idem ops".
var opsActions = []string{"list", "show", "lookup", "reconcile", "approve", "dead-letters", "requeue", "audit"}

// opsAction splits the action from the other arguments. The action is the
// first argument, or, when that is a flag ("idem ops --db DSN list"), the
// first argument that names an action.
func opsAction(args []string) (action string, rest []string) {
	if len(args) == 0 {
		return "", nil
	}
	if strings.HasPrefix(args[0], "-") && !isHelp(args[0]) {
		for i, a := range args {
			if slices.Contains(opsActions, a) {
				return a, append(slices.Clip(args[:i]), args[i+1:]...)
			}
		}
	}
	return args[0], args[1:]
}

// opsSynopses are the synopses of the ops actions, after "idem ops ACTION".
var opsSynopses = map[string]string{
	"list":         "[--state S] [--older-than D] [--limit N] [--json] [--encryption-keys FILE] --db DSN | --shard NAME=DSN …",
	"show":         "ID [--json] [--encryption-keys FILE] --db DSN | --shard NAME=DSN …",
	"lookup":       "ID --provider URL [--effect NAME] [--provider-timeout D] [--actor NAME] [--json] [--encryption-keys FILE] --db DSN",
	"reconcile":    "ID --outcome succeeded|failed [--handle H] --evidence TEXT [--actor NAME] [--json] [--encryption-keys FILE] --db DSN | --shard NAME=DSN …",
	"approve":      "ID [--actor NAME] [--json] [--encryption-keys FILE] --db DSN",
	"dead-letters": "[--limit N] [--json] --db DSN",
	"requeue":      "MESSAGE-ID [--json] --db DSN",
	"audit":        "[--operation ID] [--before SEQ] [--limit N] [--json] --db DSN | --shard NAME=DSN …",
}

// opsUsage prints the synopsis of every action, with its summary, to w.
func opsUsage(w io.Writer) {
	fmt.Fprintln(w, "usage:")
	for _, a := range opsActions {
		fmt.Fprintf(w, "  idem ops %s %s\n", a, opsSynopses[a])
	}
	fmt.Fprintln(w, "\nactions:")
	for _, a := range opsActions {
		fmt.Fprintf(w, "  %-14s %s\n", a, summary("ops "+a))
	}
	fmt.Fprintln(w, "\nidem help ops ACTION (or idem ops ACTION --help) prints an action's flags.")
}

// opsFlags is a flag set with the flags every ops action has.
type opsFlags struct {
	*flags
	db     *string
	keys   *string
	asJSON *bool
	shards *shardList // --shard, on the actions that call addShards; else nil
}

func newOpsFlags(action string, std stdio) opsFlags {
	fs := newFlags("ops "+action, opsSynopses[action], std)
	return opsFlags{
		flags:  fs,
		db:     fs.db(defaultDB, "registry database `DSN`: sqlite:PATH, postgres://… or mysql://…"),
		keys:   addKeysFlag(fs.FlagSet),
		asJSON: fs.Bool("json", false, "print JSON on one line"),
	}
}

// parse parses args, flags before and after the positional arguments,
// and returns the positional ones. When ok is false the action exits
// with code: help was printed on stdout, or a usage error reported on
// stderr.
func (f opsFlags) parse(args []string, positional int) (words []string, code int, ok bool) {
	words, code, ok = f.flags.parse(args)
	if !ok {
		return nil, code, false
	}
	if len(words) != positional {
		what := "operation ID"
		if f.Name() == "ops requeue" {
			what = "message ID"
		}
		return nil, f.usage(fmt.Sprintf("want %d %s argument(s), got %q", positional, what, words)), false
	}
	return words, exitOK, true
}

func opsList(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("list", std)
	f.addShards()
	state := f.String("state", "", "list operations in state `S` only (e.g. UNKNOWN)")
	olderThan := f.Duration("older-than", 0, "list operations created at least `D` ago (e.g. 15m)")
	limit := f.Int("limit", registry.DefaultListLimit, "print at most `N` operations")
	if _, code, ok := f.parse(args, 0); !ok {
		return code
	}
	filter := registry.ListFilter{State: idem.State(strings.ToUpper(*state)), OlderThan: *olderThan, Limit: *limit}
	switch {
	case filter.State != "" && !filter.State.Valid():
		fmt.Fprintf(std.err, "idem ops list: unknown state %q: want one of %v\n", *state, idem.States())
		return exitUsage
	case *olderThan < 0:
		fmt.Fprintf(std.err, "idem ops list: --older-than %v is negative\n", *olderThan)
		return exitUsage
	case *limit <= 0:
		fmt.Fprintf(std.err, "idem ops list: --limit %d: want a positive number\n", *limit)
		return exitUsage
	}
	rows, code := readShards(ctx, f, "ops list", std, func(store registry.Store) ([]registry.Record, error) {
		return store.ListOperations(ctx, filter)
	}, func(a, b registry.Record) int { return a.CreatedAt.Compare(b.CreatedAt) }, *limit) // oldest first
	if code != exitOK {
		return code
	}
	sharded := f.sharded()
	if err := printOpsList(std, rows, sharded, *f.asJSON); err != nil {
		fmt.Fprintf(std.err, "idem ops list: %v\n", err)
		return exitRefused
	}
	if !*f.asJSON && len(rows) == *limit {
		fmt.Fprintf(std.err, "idem ops list: showing the first %d; raise --limit to see more\n", *limit)
	}
	return exitOK
}

// printOpsList prints ops list's rows, naming each row's shard when
// sharded.
func printOpsList(std stdio, rows []onShard[registry.Record], sharded, asJSON bool) error {
	if asJSON {
		ops := make([]operationJSON, 0, len(rows))
		for _, r := range rows {
			o := toOperationJSON(r.v)
			o.Shard = r.shard
			ops = append(ops, o)
		}
		return printJSON(std.out, struct {
			Operations []operationJSON `json:"operations"`
		}{ops})
	}
	recs := make([]registry.Record, len(rows))
	var shards []string
	for i, r := range rows {
		recs[i] = r.v
		if sharded {
			shards = append(shards, r.shard)
		}
	}
	return printShardList(std.out, recs, shards, time.Now())
}

func opsShow(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("show", std)
	f.addShards()
	words, code, ok := f.parse(args, 1)
	if !ok {
		return code
	}
	return f.withOperation(ctx, "ops show", words[0], std, func(shard string, store registry.Store) error {
		return showOn(ctx, shard, store, words[0], *f.asJSON, std)
	})
}

// show prints an operation with its effects and reconciliations.
func show(ctx context.Context, store registry.Store, id string, asJSON bool, std stdio) error {
	return showOn(ctx, "", store, id, asJSON, std)
}

// showOn is show naming the operation's shard ("" without shards).
func showOn(ctx context.Context, shard string, store registry.Store, id string, asJSON bool, std stdio) error {
	rec, err := store.GetByID(ctx, id)
	if errors.Is(err, registry.ErrNotFound) {
		return fmt.Errorf("operation %s not found", id)
	}
	if err != nil {
		return err
	}
	effs, err := store.Effects(ctx, id)
	if err != nil {
		return err
	}
	log, err := store.Reconciliations(ctx, id)
	if err != nil {
		return err
	}
	ls, pending, err := recordedEvidence(ctx, store, id)
	if err != nil {
		return err
	}
	if asJSON {
		out := evidenceJSON{Shard: shard, showJSON: toShowJSON(rec, effs, log), Lookups: []lookupJSON{}}
		for _, l := range ls {
			out.Lookups = append(out.Lookups, toLookupJSON(l))
		}
		if pending != nil {
			out.Pending = toPendingJSON(*pending)
		}
		return printJSON(std.out, out)
	}
	if shard != "" {
		fmt.Fprintf(std.out, "shard         %s\n", shard)
	}
	if err := printShow(std.out, rec, effs, log); err != nil {
		return err
	}
	printEvidence(std.out, ls, pending)
	return nil
}

func opsReconcile(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("reconcile", std)
	f.addShards()
	outcome := f.String("outcome", "", "what the downstream did: `succeeded` (executed) or failed (declined for good)")
	handle := f.String("handle", "", "the downstream's `ID` of the executed effect, when known (with --outcome succeeded)")
	evidence := f.String("evidence", "", "why the outcome is right (`TEXT`, required): at least 10 characters naming a reference — the provider's handle (tr_42), a ticket (OPS-123, #4711) or a URL")
	actor := f.String("actor", defaultActor(), "who decides (`NAME`; default $USER, else operator)")
	words, code, ok := f.parse(args, 1)
	if !ok {
		return code
	}
	req := effect.OperatorRequest{OperationID: words[0], Outcome: *outcome, Handle: *handle, Evidence: *evidence, Actor: *actor}
	if _, err := req.Validate(); err != nil {
		fmt.Fprintf(std.err, "idem ops reconcile: %s\n", printable(coded(err).Error()))
		return exitUsage
	}
	id := words[0]
	return f.withOperation(ctx, "ops reconcile", id, std, func(shard string, store registry.Store) error {
		s, err := renderers.SettleByOperator(ctx, store, req)
		if err != nil {
			return coded(err)
		}
		if *f.asJSON {
			return showOn(ctx, shard, store, id, true, std)
		}
		if shard != "" {
			fmt.Fprintf(std.out, "shard %s: ", shard)
		}
		if s.Pending != nil {
			fmt.Fprintf(std.out, "operation %s: outcome %s requested by %s; it waits for a second operator's approval (no definite answer from the downstream is recorded)\n",
				printable(id), printable(s.Pending.Outcome), printable(oneLine(s.Pending.RequestedBy)))
			fmt.Fprintf(std.out, "another operator settles it with: idem ops approve %s\n", printable(id))
			return nil
		}
		fmt.Fprintf(std.out, "operation %s reconciled: %s -> %s (method %s, actor %s)\n",
			printable(id), idem.StateUnknown, s.Record.State, registry.ReconcileOperator, printable(*actor))
		fmt.Fprintf(std.out, "retries with its key now replay %d %s\n", s.Record.Response.Status, printable(s.Record.Response.MediaType))
		return nil
	})
}

// renderers are the operations "idem ops reconcile" can render: the
// reference service's. Everything else it does is
// effect.Set.SettleByOperator, which the console (package console) shares. Settling by an operator calls no downstream, so
// the provider's address does not matter.
var renderers = effect.Set{payments.OperationTransfer: payments.TransferEffects("", 0)}

// defaultActor is $USER, or "operator".
func defaultActor() string {
	if u := strings.TrimSpace(os.Getenv("USER")); u != "" {
		return u
	}
	return "operator"
}
