package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/example/payments"
)

// allow lists the answers a scenario may legitimately produce besides
// executions, replays, conflicts, in-flight answers and refusals before
// the acceptance point.
type allow struct {
	// Errors: transport errors (a server killed mid-request).
	Errors bool
	// Unavailable: 503 STORE_UNAVAILABLE (storage trouble, failed closed).
	Unavailable bool
	// Retired: 409 KEY_RETIRED (a tombstone) for the accepted request.
	Retired bool
	// ExtraOperations: records the clients never saw an outcome of, made
	// by the test itself.
	ExtraOperations int
}

// tally counts what a history held.
type tally map[string]int

func (t tally) String() string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, t[k])
	}
	return b.String()
}

// check takes a snapshot of the database and checks the invariants of
// SPEC V1 over the recorded history and the snapshot (see checkHistory),
// failing the test with every violation found.
func (f *faultRun) check(a allow) tally {
	f.t.Helper()
	snap := f.takeSnapshot()
	bad, counts := checkHistory(f.hist.exchanges(), snap, a)
	for i, b := range bad {
		if i == 20 {
			f.t.Errorf("… and %d more violations", len(bad)-i)
			break
		}
		f.t.Errorf("violation: %s", b)
	}
	f.t.Logf("history: %d exchanges; %v", len(f.hist.exchanges()), counts)
	return counts
}

// checkHistory returns every violation of the fault suite's invariants:
//
//   - per scope, every terminal answer (executed or replayed outcome)
//     carries the same operation ID and answers the same fingerprint, and
//     no operation ID answers for two scopes;
//   - every request whose fingerprint differs from the accepted one got
//     422 PAYLOAD_CONFLICT (revealing no operation), and no request with
//     the accepted fingerprint did;
//   - per operation, at most one answer executed it and every terminal
//     answer is byte-identical (status, media type, Location, body
//     digest);
//   - in-flight answers name the scope's operation or one that was
//     released (no record left);
//   - answers outside the scenario's allowance are violations;
//   - the database holds, per successful payments.create operation,
//     exactly one payment (with the id and amount the answer showed) and
//     one outbox row, and no business or outbox row of anything else; its
//     records are all terminal, each one answered to a client, unless the
//     scenario declared extra ones;
//   - the provider executed each transfer operation at most once, and no
//     more transfers than there are successful transfer operations.
func checkHistory(hist []exchange, snap *snapshot, a allow) (bad []string, counts tally) {
	counts = tally{}
	violate := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	type scopeState struct {
		op, fp string
		first  *exchange // first terminal answer
	}
	scopes := map[string]*scopeState{}
	opScope := map[string]string{}
	executed := map[string]int{}
	// Pass 1: terminal answers fix each scope's operation and fingerprint.
	for i := range hist {
		e := &hist[i]
		if !e.idempotent() || !e.terminal() {
			continue
		}
		st := scopes[e.Scope]
		if st == nil {
			st = &scopeState{op: e.op(), fp: e.Fingerprint, first: e}
			scopes[e.Scope] = st
		}
		if e.op() != st.op {
			violate("scope %s answered for two operations: %s (#%d) and %s (#%d)", e.Scope, st.op, st.first.Seq, e.op(), e.Seq)
		}
		if e.Fingerprint != st.fp {
			violate("scope %s: #%d with fingerprint %.12s got the outcome of #%d's %.12s", e.Scope, e.Seq, e.Fingerprint, st.first.Seq, st.fp)
		}
		if other, ok := opScope[e.op()]; ok && other != e.Scope {
			violate("operation %s answers for two scopes: %s and %s (#%d)", e.op(), other, e.Scope, e.Seq)
		}
		opScope[e.op()] = e.Scope
		if !e.replayed() {
			executed[e.op()]++
			counts["executed"]++
		} else {
			counts["replayed"]++
		}
		if msg := sameOutcome(*st.first, *e); msg != "" {
			violate("operation %s: answer #%d differs from #%d: %s", e.op(), e.Seq, st.first.Seq, msg)
		}
	}
	for op, n := range executed {
		if n > 1 {
			violate("operation %s was executed %d times", op, n)
		}
	}

	records := map[string]map[string]string{}
	for _, r := range snap.Operations {
		records[r["operation_id"]] = r
	}
	// Pass 2: every other answer.
	for _, e := range hist {
		if !e.idempotent() || e.terminal() {
			continue
		}
		st := scopes[e.Scope]
		same := st == nil || e.Fingerprint == "" || e.Fingerprint == st.fp // "": refused before the acceptance point
		switch {
		case e.Err != "":
			counts["transport error"]++
			if !a.Errors {
				violate("#%d %s %s: transport error %s", e.Seq, e.Method, e.Path, e.Err)
			}
		case e.Code == string(idem.CodePayloadConflict):
			counts["conflict"]++
			if same {
				violate("#%d: PAYLOAD_CONFLICT for the accepted request of scope %s (a false hit)", e.Seq, e.Scope)
			}
			if e.op() != "" || e.Header["Location"] != "" {
				violate("#%d: PAYLOAD_CONFLICT reveals the first request: %v", e.Seq, e.Header)
			}
		case !same && e.Code != string(idem.CodeStoreUnavailable):
			violate("#%d: a request with another fingerprint under scope %s got %d %s; want PAYLOAD_CONFLICT", e.Seq, e.Scope, e.Status, e.Code)
		case e.Code == string(idem.CodeInProgress) || e.Code == string(idem.CodeOutcomeUnknown):
			counts[strings.ToLower(e.Code)]++
			if st != nil && e.op() != st.op && records[e.op()] != nil {
				violate("#%d: %s names operation %s, still recorded, but scope %s's outcome is %s", e.Seq, e.Code, e.op(), e.Scope, st.op)
			}
		case e.Code == string(idem.CodeKeyRetired):
			counts["retired"]++
			if !a.Retired {
				violate("#%d: unexpected KEY_RETIRED", e.Seq)
			} else if st != nil && e.op() != st.op {
				violate("#%d: KEY_RETIRED names operation %s, scope %s's is %s", e.Seq, e.op(), e.Scope, st.op)
			}
		case e.Code == string(idem.CodeStoreUnavailable):
			counts["unavailable"]++
			if !a.Unavailable {
				violate("#%d: unexpected 503 STORE_UNAVAILABLE", e.Seq)
			}
		case e.Status == http.StatusBadRequest || e.Status == http.StatusUnauthorized || e.Status == http.StatusRequestEntityTooLarge ||
			e.Status == http.StatusUnsupportedMediaType:
			counts["refused "+e.Code]++
			if e.op() != "" {
				violate("#%d: refusal %s names an operation %s", e.Seq, e.Code, e.op())
			}
		default:
			violate("#%d %s %s: unexpected answer %d %s %s", e.Seq, e.Method, e.Path, e.Status, e.Code, e.Body)
		}
	}
	bad = append(bad, checkRows(hist, snap, a)...)
	return bad, counts
}

// sameOutcome compares two terminal answers of one operation.
func sameOutcome(a, b exchange) string {
	var diffs []string
	if a.Status != b.Status || a.Digest != b.Digest {
		diffs = append(diffs, fmt.Sprintf("status/body %d %.12s vs %d %.12s", a.Status, a.Digest, b.Status, b.Digest))
	}
	for _, h := range []string{"Content-Type", "Location", "ETag", "Idempotency-Contract"} {
		if a.Header[h] != b.Header[h] {
			diffs = append(diffs, fmt.Sprintf("%s %q vs %q", h, a.Header[h], b.Header[h]))
		}
	}
	return strings.Join(diffs, "; ")
}

// checkRows checks the snapshot against the history's terminal answers;
// see checkHistory.
func checkRows(hist []exchange, snap *snapshot, a allow) (bad []string) {
	violate := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	answered := map[string]exchange{} // operation → its first terminal answer
	for _, e := range hist {
		if e.idempotent() && e.terminal() {
			if _, ok := answered[e.op()]; !ok {
				answered[e.op()] = e
			}
		}
	}
	records := map[string]map[string]string{}
	for _, r := range snap.Operations {
		op := r["operation_id"]
		records[op] = r
		switch r["state"] {
		case "SUCCEEDED", "FAILED_FINAL", "REJECTED":
		default:
			violate("record %s (%s) is left %s", op, r["operation"], r["state"])
		}
		if st, err := strconv.Atoi(r["resp_status"]); err == nil && st >= 500 {
			violate("record %s (%s) stores a %d: no 5xx is ever stored or replayed", op, r["operation"], st)
		}
		if _, ok := answered[op]; !ok && a.ExtraOperations == 0 {
			violate("record %s (%s, %s) was never answered to a client", op, r["operation"], r["state"])
		}
	}
	if n := len(snap.Operations) - len(answered); n != a.ExtraOperations && n > 0 {
		violate("%d records more than operations answered to clients; want %d", n, a.ExtraOperations)
	}
	for op, e := range answered {
		r := records[op]
		want := "SUCCEEDED"
		if e.Status/100 != 2 {
			want = "REJECTED" // the reference service's refusals change nothing
			if r != nil && r["operation"] == payments.OperationTransfer && e.Code == string(payments.CodeTransferDeclined) {
				want = "FAILED_FINAL"
			}
		}
		if r == nil {
			violate("operation %s answered in #%d has no record", op, e.Seq)
		} else if r["state"] != want {
			violate("operation %s answered %d in #%d is recorded %s", op, e.Status, e.Seq, r["state"])
		}
	}

	pays := map[string][]map[string]string{}
	for _, p := range snap.Payments {
		pays[p["operation_id"]] = append(pays[p["operation_id"]], p)
	}
	outbox := map[string]int{}
	topics := map[string]map[string]int{} // operation → topic → rows
	for _, m := range snap.Outbox {
		outbox[m["operation_id"]]++
		if topics[m["operation_id"]] == nil {
			topics[m["operation_id"]] = map[string]int{}
		}
		topics[m["operation_id"]][m["topic"]]++
	}
	transfers := 0
	for op, r := range records {
		isPayment := r["operation"] == payments.OperationCreate && r["state"] == "SUCCEEDED"
		if r["operation"] == payments.OperationTransfer {
			if r["state"] == "SUCCEEDED" {
				transfers++
			}
			checkTransferOutbox(violate, op, r["state"], topics[op], len(pays[op]))
			continue
		}
		want := 0
		if isPayment {
			want = 1
		}
		if len(pays[op]) != want || outbox[op] != want {
			violate("operation %s (%s, %s): %d payments and %d outbox rows; want %d of each", op, r["operation"], r["state"], len(pays[op]), outbox[op], want)
		}
		if !isPayment || len(pays[op]) != 1 {
			continue
		}
		row := pays[op][0]
		if row["id"] != payments.PaymentID(op) {
			violate("operation %s: payment id %s; want %s", op, row["id"], payments.PaymentID(op))
		}
		if e, ok := answered[op]; ok {
			var body struct{ ID, Amount string }
			if err := json.Unmarshal([]byte(e.Body), &body); err != nil || body.ID != row["id"] || body.Amount != row["amount"] {
				violate("operation %s: answer #%d shows %s, the database holds payment %s of %s", op, e.Seq, e.Body, row["id"], row["amount"])
			}
		}
	}
	for op := range pays {
		if records[op] == nil {
			violate("payment of operation %s, which has no record", op)
		}
	}
	for op, n := range outbox {
		if records[op] == nil {
			violate("%d outbox rows of operation %s, which has no record", n, op)
		}
	}
	if snap.ProviderExecuted > transfers {
		violate("the provider executed %d transfers for %d successful transfer operations: an effect ran twice", snap.ProviderExecuted, transfers)
	}
	return bad
}

// checkTransferOutbox checks a transfer operation's outbox rows: none and
// no payment while it is unsettled; once settled exactly one
// transfer.created (SUCCEEDED) or transfer.declined (FAILED_FINAL), plus
// at most one transfer.settled when a reconciliation settled it.
func checkTransferOutbox(violate func(string, ...any), op, state string, topics map[string]int, pays int) {
	want := map[string]string{"SUCCEEDED": payments.TopicTransferCreated, "FAILED_FINAL": payments.TopicTransferDeclined}[state]
	total := 0
	for _, n := range topics {
		total += n
	}
	switch {
	case pays != 0:
		violate("transfer operation %s: %d payments; want none", op, pays)
	case want == "" && total != 0:
		violate("transfer operation %s (%s): %d outbox rows; want none before it is settled", op, state, total)
	case want != "" && (topics[want] != 1 || topics[payments.TopicTransferSettled] > 1 || total != 1+topics[payments.TopicTransferSettled]):
		violate("transfer operation %s (%s): outbox topics %v; want one %s and at most one %s", op, state, topics, want, payments.TopicTransferSettled)
	}
}
