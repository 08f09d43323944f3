package registrytest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/registry"
)

// Cases of what operators read: the audit log, the recent prune runs and
// an operation's outbox messages.

// testAuditLog: AppendAudit numbers and dates entries (by the store's
// clock) and keeps every text as given; AuditLog lists them newest first,
// by operation, page by page; an invalid entry is refused with nothing
// written.
func testAuditLog(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	if got, err := e.h.Store.AuditLog(e.ctx, registry.AuditFilter{}); err != nil || len(got) != 0 {
		t.Fatalf("AuditLog of a new registry: %v, %v; want none", got, err)
	}
	var want []registry.AuditEntry
	for i, in := range []registry.AuditEntry{
		{Actor: "alice", Action: registry.AuditLogin},
		{Actor: "alice", Action: registry.AuditLookup, OperationID: "op_a", Detail: "asked transfer for key k1: succeeded, handle h-1"},
		{Actor: "bob", Action: registry.AuditDrainOn, Detail: "«drain» — ünïcode\nand a second line"},
		{Actor: "cli:root", Action: registry.AuditEpochBump, Detail: strings.Repeat("x", registry.MaxAuditDetail)},
		{Actor: "alice", Action: registry.AuditReconcile, OperationID: "op_a", Detail: "succeeded: ticket 7"},
		{Actor: "alice", Action: "custom.action", OperationID: "op_b"},
	} {
		e.setNow(base.Add(time.Duration(i) * time.Second))
		got, err := e.h.Store.AppendAudit(e.ctx, in)
		if err != nil {
			t.Fatalf("AppendAudit %d: %v", i, err)
		}
		if !got.At.Equal(base.Add(time.Duration(i)*time.Second)) || got.Seq <= 0 {
			t.Errorf("AppendAudit %d: at %v seq %d, want at the store's now and a positive Seq", i, got.At, got.Seq)
		}
		if len(want) > 0 && got.Seq <= want[len(want)-1].Seq {
			t.Errorf("AppendAudit %d: Seq %d not above the previous %d", i, got.Seq, want[len(want)-1].Seq)
		}
		in.Seq, in.At = got.Seq, got.At
		if got != in {
			t.Errorf("AppendAudit %d returned %+v, want %+v", i, got, in)
		}
		want = append(want, in)
	}
	newestFirst := slices.Clone(want)
	slices.Reverse(newestFirst)
	check := func(what string, f registry.AuditFilter, want []registry.AuditEntry) {
		t.Helper()
		got, err := e.h.Store.AuditLog(e.ctx, f)
		if err != nil {
			t.Fatalf("AuditLog %s: %v", what, err)
		}
		if len(got) != len(want) {
			t.Fatalf("AuditLog %s: %d entries, want %d: %+v", what, len(got), len(want), got)
		}
		for i := range got {
			if got[i] != want[i] || !got[i].At.Equal(want[i].At) {
				t.Errorf("AuditLog %s [%d]: %+v, want %+v", what, i, got[i], want[i])
			}
		}
	}
	check("all", registry.AuditFilter{}, newestFirst)
	check("limit 2", registry.AuditFilter{Limit: 2}, newestFirst[:2])
	check("page after 2", registry.AuditFilter{Limit: 2, Before: newestFirst[1].Seq}, newestFirst[2:4])
	check("op_a", registry.AuditFilter{OperationID: "op_a"}, []registry.AuditEntry{want[4], want[1]})
	check("op_a before its newest", registry.AuditFilter{OperationID: "op_a", Before: want[4].Seq}, []registry.AuditEntry{want[1]})
	check("no such operation", registry.AuditFilter{OperationID: "op_none"}, nil)

	for _, bad := range []registry.AuditEntry{
		{Action: registry.AuditLogin},
		{Actor: "alice"},
		{Actor: "alice", Action: registry.AuditLogin, Detail: strings.Repeat("x", registry.MaxAuditDetail+1)},
		{Actor: strings.Repeat("a", registry.MaxAuditField+1), Action: registry.AuditLogin},
		{Actor: "alice", Action: registry.AuditLogin, Detail: "nul\x00byte"},
		{Actor: "alice\xff", Action: registry.AuditLogin},
	} {
		if _, err := e.h.Store.AppendAudit(e.ctx, bad); err == nil {
			t.Errorf("AppendAudit(%.60q) accepted an invalid entry", fmt.Sprintf("%+v", bad))
		}
	}
	check("after refused entries", registry.AuditFilter{}, newestFirst)

	// The log is append-only in the database itself.
	if err := e.h.Exec(e.ctx, `UPDATE idem_audit SET actor = 'someone else'`); err == nil {
		t.Error("UPDATE of idem_audit succeeded, want the database to refuse it")
	}
	if err := e.h.Exec(e.ctx, `DELETE FROM idem_audit`); err == nil {
		t.Error("DELETE FROM idem_audit succeeded, want the database to refuse it")
	}
	// (SQLite has no TRUNCATE: there the statement is refused as unknown.)
	if err := e.h.Exec(e.ctx, `TRUNCATE idem_audit`); err == nil {
		t.Error("TRUNCATE idem_audit succeeded, want the database to refuse it")
	}
	check("after the refused changes", registry.AuditFilter{}, newestFirst)
}

// testAuditConcurrent: concurrent appends each get their own Seq and none
// is lost.
func testAuditConcurrent(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	const n = 20
	var wg sync.WaitGroup
	seqs := make([]int64, n)
	for i := range n {
		wg.Go(func() {
			got, err := e.h.Store.AppendAudit(e.ctx, registry.AuditEntry{Actor: fmt.Sprintf("op%d", i), Action: registry.AuditLookup})
			if err != nil {
				t.Errorf("AppendAudit %d: %v", i, err)
			}
			seqs[i] = got.Seq
		})
	}
	wg.Wait()
	got, err := e.h.Store.AuditLog(e.ctx, registry.AuditFilter{Limit: 2 * n})
	if err != nil || len(got) != n {
		t.Fatalf("AuditLog: %d entries, %v; want %d", len(got), err, n)
	}
	slices.Sort(seqs)
	if len(slices.Compact(seqs)) != n {
		t.Errorf("Seqs %v are not distinct", seqs)
	}
}

// testPruneRuns: recorded runs come back newest first with every field;
// only the newest MaxPruneRuns are kept; a run without an actor is
// refused and a long error is cut.
func testPruneRuns(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	if got, err := e.h.Store.PruneRuns(e.ctx, 10); err != nil || len(got) != 0 {
		t.Fatalf("PruneRuns of a new registry: %v, %v; want none", got, err)
	}
	run := func(i int) registry.PruneRun {
		return registry.PruneRun{
			Actor:      "idem serve",
			StartedAt:  base.Add(time.Duration(i) * time.Minute),
			FinishedAt: base.Add(time.Duration(i)*time.Minute + 1500*time.Millisecond),
			Result:     registry.PruneResult{Retired: i, Deleted: 2 * i},
		}
	}
	first := run(0)
	first.Error = "registry: prune: store unavailable"
	if err := e.h.Store.RecordPruneRun(e.ctx, first); err != nil {
		t.Fatalf("RecordPruneRun: %v", err)
	}
	for i := 1; i < registry.MaxPruneRuns+5; i++ {
		if err := e.h.Store.RecordPruneRun(e.ctx, run(i)); err != nil {
			t.Fatalf("RecordPruneRun %d: %v", i, err)
		}
	}
	got, err := e.h.Store.PruneRuns(e.ctx, 10*registry.MaxPruneRuns)
	if err != nil {
		t.Fatalf("PruneRuns: %v", err)
	}
	if len(got) != registry.MaxPruneRuns {
		t.Fatalf("PruneRuns: %d runs kept, want %d", len(got), registry.MaxPruneRuns)
	}
	for j, r := range got {
		w := run(registry.MaxPruneRuns + 4 - j)
		if r.Actor != w.Actor || !r.StartedAt.Equal(w.StartedAt) || !r.FinishedAt.Equal(w.FinishedAt) || r.Result != w.Result || r.Error != "" {
			t.Fatalf("PruneRuns[%d] = %+v, want %+v (newest first)", j, r, w)
		}
		if j > 0 && r.Seq >= got[j-1].Seq {
			t.Fatalf("PruneRuns[%d].Seq %d not below %d", j, r.Seq, got[j-1].Seq)
		}
	}
	if got, err := e.h.Store.PruneRuns(e.ctx, 3); err != nil || len(got) != 3 || got[0].Result.Retired != registry.MaxPruneRuns+4 {
		t.Errorf("PruneRuns(3): %+v, %v; want the newest three", got, err)
	}
	if got, err := e.h.Store.PruneRuns(e.ctx, 0); err != nil || len(got) != 0 {
		t.Errorf("PruneRuns(0): %v, %v; want none", got, err)
	}

	long := run(1000)
	long.Error = strings.Repeat("é", registry.MaxAuditDetail)
	if err := e.h.Store.RecordPruneRun(e.ctx, long); err != nil {
		t.Fatalf("RecordPruneRun with a long error: %v", err)
	}
	if got, err := e.h.Store.PruneRuns(e.ctx, 1); err != nil || len(got) != 1 ||
		len(got[0].Error) > registry.MaxAuditDetail || !strings.HasPrefix(long.Error, got[0].Error) || got[0].Error == "" {
		t.Errorf("the long error came back as %d bytes (%v), want it cut to at most %d", len(got[0].Error), err, registry.MaxAuditDetail)
	}
	if err := e.h.Store.RecordPruneRun(e.ctx, registry.PruneRun{StartedAt: base, FinishedAt: base}); err == nil {
		t.Error("RecordPruneRun without an actor: accepted")
	}
}

// testOperationOutbox: an operation's messages come back in the order its
// outcome wrote them, with their delivery state, and only its own.
func testOperationOutbox(t *testing.T, nh NewHarness) {
	e := setup(t, nh)
	e.setNow(base)
	rec := e.reserve(e.claim("conformance.opoutbox"))
	e.complete(rec, outcome("mine", 3))
	other := e.reserve(e.claim("conformance.opoutbox"))
	e.complete(other, outcome("other", 1))
	ids := []string{registry.MessageID(rec.OperationID, 0), registry.MessageID(rec.OperationID, 1), registry.MessageID(rec.OperationID, 2)}

	e.setNow(base.Add(time.Second))
	if err := e.h.Store.MarkPublished(e.ctx, ids[:1]); err != nil {
		t.Fatalf("MarkPublished: %v", err)
	}
	e.claimIDs()
	e.setNow(base.Add(2 * time.Second))
	if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: ids[1], Error: "gone for good", Dead: true}); err != nil {
		t.Fatalf("FailOutbox dead: %v", err)
	}
	if err := e.h.Store.FailOutbox(e.ctx, registry.OutboxFailure{ID: ids[2], Error: "503", RetryAfter: time.Minute}); err != nil {
		t.Fatalf("FailOutbox: %v", err)
	}

	got, err := e.h.Store.OperationOutbox(e.ctx, rec.OperationID)
	if err != nil {
		t.Fatalf("OperationOutbox: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("OperationOutbox: %d messages, want 3: %+v", len(got), got)
	}
	want := outcome("mine", 3).Outbox
	for i, m := range got {
		if m.ID != ids[i] || m.OperationID != rec.OperationID || m.Topic != want[i].Topic || string(m.Payload) != string(want[i].Payload) || !m.CreatedAt.Equal(base) {
			t.Errorf("message %d: %+v, want %s of %s with its topic, payload and creation time", i, m, ids[i], rec.OperationID)
		}
	}
	if m := got[0]; !m.PublishedAt.Equal(base.Add(time.Second)) || !m.DeadAt.IsZero() || m.Attempts != 0 {
		t.Errorf("published message: %+v, want PublishedAt %v, not dead, no attempts", m, base.Add(time.Second))
	}
	if m := got[1]; !m.PublishedAt.IsZero() || !m.DeadAt.Equal(base.Add(2*time.Second)) || m.Attempts != 1 || m.LastError != "gone for good" {
		t.Errorf("dead letter: %+v, want DeadAt %v, 1 attempt, its error", m, base.Add(2*time.Second))
	}
	if m := got[2]; !m.PublishedAt.IsZero() || !m.DeadAt.IsZero() || m.Attempts != 1 || m.LastError != "503" || !m.LastAttemptAt.Equal(base.Add(2*time.Second)) {
		t.Errorf("pending message: %+v, want 1 attempt at %v, its error, neither published nor dead", m, base.Add(2*time.Second))
	}
	if got, err := e.h.Store.OperationOutbox(e.ctx, "op_nothing"); err != nil || len(got) != 0 {
		t.Errorf("OperationOutbox of an unknown operation: %v, %v; want none", got, err)
	}
}
