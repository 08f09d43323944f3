package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// The output of "idem ops" (ops.go): JSON forms and human tables.

// operationJSON is the JSON form of a record. The stored body is never
// printed: only its size and the digest it is checked against.
type operationJSON struct {
	// Shard names the shard holding the record ("idem ops list --shard").
	Shard       string        `json:"shard,omitempty"`
	OperationID string        `json:"operation_id"`
	Operation   string        `json:"operation"`
	State       idem.State    `json:"state"`
	OwnerGen    int64         `json:"owner_gen"`
	WriterEpoch int64         `json:"writer_epoch"`
	Contract    string        `json:"contract"`
	Scope       string        `json:"scope"`
	Fingerprint string        `json:"fingerprint"`
	CreatedAt   time.Time     `json:"created_at"`
	UpdatedAt   time.Time     `json:"updated_at"`
	LeaseUntil  time.Time     `json:"lease_until"`
	ExpiresAt   time.Time     `json:"expires_at"`
	Response    *responseJSON `json:"response,omitempty"`
	// Tombstone is set once prune retired the record (409 KEY_RETIRED).
	Tombstone *tombstoneJSON `json:"tombstone,omitempty"`
}

// tombstoneJSON describes a retired record. Until is omitted while the
// tombstone is kept forever (TTL 0).
type tombstoneJSON struct {
	RetiredAt  time.Time  `json:"retired_at"`
	Until      *time.Time `json:"until,omitempty"`
	TTLSeconds float64    `json:"ttl_seconds"`
}

type responseJSON struct {
	Status    int    `json:"status"`
	MediaType string `json:"media_type"`
	Location  string `json:"location,omitempty"`
	ETag      string `json:"etag,omitempty"`
	BodyBytes int    `json:"body_bytes"`
	Digest    string `json:"digest"`
}

type effectJSON struct {
	Name          string    `json:"name"`
	DownstreamKey string    `json:"downstream_key"`
	OwnerGen      int64     `json:"owner_gen"`
	Handle        string    `json:"handle,omitempty"`
	Result        string    `json:"result,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

type reconciliationJSON struct {
	Outcome   idem.State `json:"outcome"`
	Method    string     `json:"method"`
	Actor     string     `json:"actor"`
	Evidence  string     `json:"evidence"`
	CreatedAt time.Time  `json:"created_at"`
}

type showJSON struct {
	Operation       operationJSON        `json:"operation"`
	Effects         []effectJSON         `json:"effects"`
	Reconciliations []reconciliationJSON `json:"reconciliations"`
}

func toOperationJSON(r registry.Record) operationJSON {
	o := operationJSON{
		OperationID: r.OperationID, Operation: r.Operation, State: r.State, OwnerGen: r.OwnerGen,
		WriterEpoch: r.WriterEpoch, Contract: r.Contract,
		Scope: hex.EncodeToString(r.Scope[:]), Fingerprint: hex.EncodeToString(r.Fingerprint[:]),
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), LeaseUntil: r.LeaseUntil.UTC(), ExpiresAt: r.ExpiresAt.UTC(),
	}
	if resp := r.Response; resp != nil {
		d := resp.Digest()
		o.Response = &responseJSON{Status: resp.Status, MediaType: resp.MediaType, Location: resp.Location,
			ETag: resp.ETag, BodyBytes: len(resp.Body), Digest: "sha256:" + hex.EncodeToString(d[:])}
	}
	if r.Retired() {
		tomb := &tombstoneJSON{RetiredAt: r.RetiredAt.UTC(), TTLSeconds: r.TombstoneTTL.Seconds()}
		if !r.TombstoneUntil.IsZero() {
			until := r.TombstoneUntil.UTC()
			tomb.Until = &until
		}
		o.Tombstone = tomb
	}
	return o
}

func toShowJSON(r registry.Record, effs []registry.Effect, log []registry.ReconciliationEntry) showJSON {
	s := showJSON{Operation: toOperationJSON(r), Effects: []effectJSON{}, Reconciliations: []reconciliationJSON{}}
	for _, e := range effs {
		s.Effects = append(s.Effects, effectJSON{Name: e.Name, DownstreamKey: e.DownstreamKey, OwnerGen: e.OwnerGen,
			Handle: e.Handle, Result: e.Result, CreatedAt: e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC()})
	}
	for _, l := range log {
		s.Reconciliations = append(s.Reconciliations, reconciliationJSON{Outcome: l.Outcome, Method: l.Method,
			Actor: l.Actor, Evidence: l.Evidence, CreatedAt: l.CreatedAt.UTC()})
	}
	return s
}

// printJSON prints v as one line of JSON, with the characters a terminal
// must not get escaped (escapeJSON).
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", escapeJSON(b))
	return err
}

// stamp formats a time for humans, UTC.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// printList prints records as a table, or "no operations".
func printList(w io.Writer, recs []registry.Record, now time.Time) error {
	return printShardList(w, recs, nil, now)
}

// printShardList is printList with a first column SHARD naming each
// record's shard (shards[i] of recs[i]); nil shards: no such column.
func printShardList(w io.Writer, recs []registry.Record, shards []string, now time.Time) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintln(w, "no operations")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if shards != nil {
		fmt.Fprint(tw, "SHARD\t")
	}
	fmt.Fprintln(tw, "OPERATION ID\tSTATE\tOPERATION\tGEN\tAGE\tCREATED AT")
	for i, r := range recs {
		if shards != nil {
			fmt.Fprintf(tw, "%s\t", shards[i])
		}
		age := max(now.Sub(r.CreatedAt), 0).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", printable(r.OperationID), r.State, printable(r.Operation), r.OwnerGen, age, stamp(r.CreatedAt))
	}
	return tw.Flush()
}

// printShow prints one operation for humans.
func printShow(w io.Writer, r registry.Record, effs []registry.Effect, log []registry.ReconciliationEntry) error {
	o := toOperationJSON(r)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"operation id", o.OperationID}, {"operation", o.Operation}, {"state", string(o.State)},
		{"owner gen", fmt.Sprint(o.OwnerGen)}, {"writer epoch", fmt.Sprint(o.WriterEpoch)},
		{"contract", o.Contract}, {"scope", o.Scope}, {"fingerprint", o.Fingerprint},
		{"created at", stamp(o.CreatedAt)}, {"updated at", stamp(o.UpdatedAt)},
		{"lease until", stamp(o.LeaseUntil)}, {"expires at", stamp(o.ExpiresAt)},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", kv[0], printable(kv[1]))
	}
	if resp := o.Response; resp != nil {
		fmt.Fprintf(tw, "response\t%d %s, %d body bytes, digest %s\n", resp.Status, printable(resp.MediaType), resp.BodyBytes, resp.Digest)
		if resp.Location != "" {
			fmt.Fprintf(tw, "location\t%s\n", printable(resp.Location))
		}
		if resp.ETag != "" {
			fmt.Fprintf(tw, "etag\t%s\n", printable(resp.ETag))
		}
	} else {
		fmt.Fprintf(tw, "response\tnone\n")
	}
	if tomb := o.Tombstone; tomb != nil {
		until := "kept forever"
		if tomb.Until != nil {
			until = "deletable after " + stamp(*tomb.Until)
		}
		fmt.Fprintf(tw, "tombstone\tretired at %s, %s\n", stamp(tomb.RetiredAt), until)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\neffects (%d):\n", len(effs))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(effs) > 0 {
		fmt.Fprintln(tw, "  NAME\tDOWNSTREAM KEY\tGEN\tHANDLE\tRESULT\tCREATED AT\tUPDATED AT")
	}
	for _, e := range effs {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\t%s\t%s\n", printable(e.Name), printable(e.DownstreamKey), e.OwnerGen,
			orDash(printable(e.Handle)), orDash(printable(e.Result)), stamp(e.CreatedAt), stamp(e.UpdatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nreconciliations (%d):\n", len(log))
	for _, l := range log {
		fmt.Fprintf(w, "  %s  %s by %s (%s): %s\n", stamp(l.CreatedAt), l.Outcome, printable(l.Actor), printable(l.Method), printable(l.Evidence))
	}
	return nil
}

// oneLine is s with every run of white space, line breaks included, made
// one space, and then printable: a table row's cell.
func oneLine(s string) string { return printable(strings.Join(strings.Fields(s), " ")) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
