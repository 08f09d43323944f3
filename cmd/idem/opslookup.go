package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/example/payments"
	"github.com/idemkit/idem/registry"
)

// "idem ops lookup" and "idem ops approve" (ops.go says what they do),
// and the recorded lookups and settlement request "idem ops show" adds.

func opsLookup(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("lookup", std)
	name := f.String("effect", "", "ask about the effect `NAME` only (default: every effect of the operation)")
	providerURL := f.String("provider", "", "downstream provider `URL` to ask (required)")
	timeout := f.Duration("provider-timeout", payments.DefaultProviderTimeout, "bound on one provider call")
	actor := f.String("actor", defaultActor(), "who asks (`NAME`; default $USER, else operator)")
	words, code, ok := f.parse(args, 1)
	if !ok {
		return code
	}
	if *providerURL == "" || *timeout <= 0 {
		return f.usage("--provider URL is required and --provider-timeout positive")
	}
	id, set := words[0], transferEffects(*providerURL, *timeout)
	var indefinite bool
	rc := withStore(ctx, "ops lookup", *f.db, *f.keys, std, func(store registry.Store) error {
		res, err := set.LookupByOperator(ctx, store, id, *name, *actor)
		for _, r := range res {
			if r.Lookup.Answer == registry.LookupNoAnswer {
				indefinite = true
			}
		}
		if *f.asJSON && len(res) > 0 {
			out := struct {
				Lookups []lookupJSON `json:"lookups"`
			}{[]lookupJSON{}}
			for _, r := range res {
				out.Lookups = append(out.Lookups, toLookupJSON(r.Lookup))
			}
			if perr := printJSON(std.out, out); perr != nil {
				return perr
			}
		} else {
			for _, r := range res {
				printLookup(std.out, r.Lookup)
			}
		}
		return coded(err)
	})
	if rc == exitOK && indefinite {
		fmt.Fprintln(std.err, "idem ops lookup: an answer proves nothing about its key (recorded all the same)")
		return exitRefused
	}
	return rc
}

func opsApprove(ctx context.Context, args []string, std stdio) int {
	f := newOpsFlags("approve", std)
	actor := f.String("actor", "", "who approves (`NAME`, as the requester was named — the console's operator name; required, no default: a login name like $USER would pass as a second person): not the requester")
	words, code, ok := f.parse(args, 1)
	if !ok {
		return code
	}
	if strings.TrimSpace(*actor) == "" {
		fmt.Fprintln(std.err, "idem ops approve: --actor is required: name yourself as the operators file (and the requester) names operators")
		return exitUsage
	}
	id := words[0]
	return withStore(ctx, "ops approve", *f.db, *f.keys, std, func(store registry.Store) error {
		s, err := renderers.ApproveByOperator(ctx, store, id, *actor)
		if err != nil {
			return coded(err)
		}
		if *f.asJSON {
			return show(ctx, store, id, true, std)
		}
		fmt.Fprintf(std.out, "operation %s approved by %s and reconciled: %s -> %s (method %s, actor %s)\n",
			printable(id), oneLine(*actor), idem.StateUnknown, s.Record.State, registry.ReconcileOperator, oneLine(s.Method))
		fmt.Fprintf(std.out, "retries with its key now replay %d %s\n", s.Record.Response.Status, printable(s.Record.Response.MediaType))
		return nil
	})
}

// lookupJSON is the JSON form of a recorded lookup.
type lookupJSON struct {
	Effect        string    `json:"effect"`
	DownstreamKey string    `json:"downstream_key"`
	Answer        string    `json:"answer"`
	Handle        string    `json:"handle,omitempty"`
	Detail        string    `json:"detail"`
	Actor         string    `json:"actor"`
	At            time.Time `json:"at"`
}

func toLookupJSON(l registry.Lookup) lookupJSON {
	return lookupJSON{Effect: l.Effect, DownstreamKey: l.DownstreamKey, Answer: l.Answer, Handle: l.Handle,
		Detail: l.Detail, Actor: l.Actor, At: l.At.UTC()}
}

// pendingJSON is the JSON form of a settlement request.
type pendingJSON struct {
	Outcome     string     `json:"outcome"`
	Handle      string     `json:"handle,omitempty"`
	Evidence    string     `json:"evidence"`
	RequestedBy string     `json:"requested_by"`
	RequestedAt time.Time  `json:"requested_at"`
	ApprovedBy  string     `json:"approved_by,omitempty"`
	ApprovedAt  *time.Time `json:"approved_at,omitempty"`
}

func toPendingJSON(p registry.PendingSettlement) *pendingJSON {
	j := &pendingJSON{Outcome: p.Outcome, Handle: p.Handle, Evidence: p.Evidence, RequestedBy: p.RequestedBy, RequestedAt: p.RequestedAt.UTC(), ApprovedBy: p.ApprovedBy}
	if !p.ApprovedAt.IsZero() {
		at := p.ApprovedAt.UTC()
		j.ApprovedAt = &at
	}
	return j
}

// evidenceJSON is what "ops show --json" prints: the operation with its
// recorded lookups and settlement request.
type evidenceJSON struct {
	// Shard names the shard holding the operation ("--shard").
	Shard string `json:"shard,omitempty"`
	showJSON
	Lookups []lookupJSON `json:"lookups"`
	Pending *pendingJSON `json:"pending,omitempty"`
}

// recordedEvidence reads an operation's recorded lookups and its
// settlement request (nil if none).
func recordedEvidence(ctx context.Context, store registry.Store, id string) ([]registry.Lookup, *registry.PendingSettlement, error) {
	ls, err := store.Lookups(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	p, err := store.PendingSettlement(ctx, id)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return ls, nil, nil
	case err != nil:
		return nil, nil, err
	}
	return ls, &p, nil
}

// printLookup prints one recorded lookup for humans, on one line.
func printLookup(w io.Writer, l registry.Lookup) {
	handle := ""
	if l.Handle != "" {
		handle = ", handle " + oneLine(l.Handle)
	}
	fmt.Fprintf(w, "  %s  %s key %s: %s%s (asked by %s): %s\n", stamp(l.At), oneLine(l.Effect), oneLine(l.DownstreamKey),
		l.Answer, handle, oneLine(l.Actor), oneLine(l.Detail))
}

// printEvidence prints an operation's recorded lookups and settlement
// request for humans, after printShow.
func printEvidence(w io.Writer, ls []registry.Lookup, p *registry.PendingSettlement) {
	fmt.Fprintf(w, "\nlookups (%d):\n", len(ls))
	for _, l := range ls {
		printLookup(w, l)
	}
	if p == nil {
		return
	}
	state := "waits for a second operator: idem ops approve " + oneLine(p.OperationID)
	if p.ApprovedBy != "" {
		state = "approved by " + oneLine(p.ApprovedBy) + " at " + stamp(p.ApprovedAt)
	}
	fmt.Fprintf(w, "\nsettlement request:\n  %s  %s by %s: %s; %s\n", stamp(p.RequestedAt), p.Outcome, oneLine(p.RequestedBy), oneLine(p.Evidence), state)
}

// coded prefixes an operator's refusal with its stable code
// (effect.OperatorCode), so scripts can branch on stderr:
// "CONTRADICTS_EVIDENCE: …". Other errors are returned as they are.
func coded(err error) error {
	if c := effect.OperatorCode(err); c != "" {
		return fmt.Errorf("%s: %w", c, err)
	}
	return err
}
