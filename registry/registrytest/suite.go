package registrytest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/registry"
)

// Run runs every conformance case against the driver nh builds, each as a
// parallel subtest on a fresh database of its own (nh is called once per
// case, or once per style in cases that check both styles). Random inputs
// come from a seed each case logs; set IDEM_CONFORMANCE_SEED to replay one.
//
// Besides the Store, the suite relies on the driver's schema: it creates
// a business table conformance_effects (operation_id TEXT, note TEXT), and
// through Harness.Exec and QueryInt it reads and changes the columns of
// idem_operations and idem_outbox with portable SQL ($n placeholders,
// byte strings for scope, fingerprint and digest), to check what the
// database itself refuses.
func Run(t *testing.T, nh NewHarness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, nh)
		})
	}
}

var cases = []struct {
	name string
	run  func(*testing.T, NewHarness)
}{
	{"ConcurrentSameFingerprint", testConcurrentSameFingerprint},
	{"ConcurrentSameFingerprintInTx", testConcurrentSameFingerprintInTx},
	{"DifferentFingerprintConflicts", testDifferentFingerprintConflicts},
	{"ReserveReleaseChurn", testReserveReleaseChurn},
	{"WinnerRollbackFreesScope", testWinnerRollbackFreesScope},
	{"StaleOwnerCannotCommit", testStaleOwnerCannotCommit},
	{"LeaseExpiryRecoveryNoSecondRow", testLeaseExpiryRecovery},
	{"NonConflictErrorSurfaced", testNonConflictErrorSurfaced},
	{"OutboxExactlyWhenCommitted", testOutboxExactlyWhenCommitted},
	{"OutboxRelayClaims", testOutboxRelayClaims},
	{"OutboxBackoff", testOutboxBackoff},
	{"OutboxDeadLetters", testOutboxDeadLetters},
	{"OutboxFailureRace", testOutboxFailureRace},
	{"OutboxTrace", testOutboxTrace},
	{"TransitionsEnforcedByDatabase", testTransitionsEnforced},
	{"TerminalRequiresSnapshot", testTerminalRequiresSnapshot},
	{"DigestCheckedOnReplay", testDigestCheckedOnReplay},
	{"ResponseSnapshotReplayed", testResponseSnapshotReplayed},
	{"ReplayCacheRetirementWins", testReplayCacheRetirementWins},
	{"ReplayCacheScopes", testReplayCacheScopes},
	{"ReplayCacheKeyRing", testReplayCacheKeyRing},
	{"ReplayCacheRules", testReplayCacheRules},
	{"CompleteValidatesOutcome", testCompleteValidatesOutcome},
	{"GetByIDAndTimestamps", testGetByIDAndTimestamps},
	{"GetByIDScopeLed", testGetByIDScopeLed},
	{"ClosedStoreErrors", testClosedStoreErrors},
	{"InTxCommitsOrRollsBack", testInTx},
	{"QueryRows", testQueryRows},
	{"QueryScanError", testQueryScanError},
	{"QueryCloseEarly", testQueryCloseEarly},
	{"QueryError", testQueryError},
	{"MaxActive", testMaxActive},
	{"MaxActiveRace", testMaxActiveRace},
	{"ControlRowInitial", testControlRowInitial},
	{"BumpEpochAtomic", testBumpEpochAtomic},
	{"ReserveFencedByEpoch", testReserveFencedByEpoch},
	{"CompleteFencedByEpoch", testCompleteFencedByEpoch},
	{"ClaimFencedByEpoch", testClaimFencedByEpoch},
	{"DrainingRoundTrip", testDrainingRoundTrip},
	{"PruneRetiresExpiredTerminal", testPruneRetiresExpired},
	{"RetiredScopeRefused", testRetiredScopeRefused},
	{"TombstoneTTLDeletion", testTombstoneTTL},
	{"PruneRetryRace", testPruneRetryRace},
	{"TombstoneImmutable", testTombstoneImmutable},
	{"EffectKeyStable", testEffectKeyStable},
	{"BeginEffectDurable", testBeginEffectDurable},
	{"StaleGenerationCannotRecord", testStaleGenerationCannotRecord},
	{"MarkUnknown", testMarkUnknown},
	{"Reconcile", testReconcile},
	{"ReconcileOutbox", testReconcileOutbox},
	{"EffectRequestAnswer", testEffectRequestAnswer},
	{"EffectReserveAtomic", testEffectReserveAtomic},
	{"EffectReserveRace", testEffectReserveRace},
	{"CompleteEffectsAtomic", testCompleteEffectsAtomic},
	{"ListOperationsAfter", testListOperationsAfter},
	{"ReconcileRace", testReconcileRace},
	{"ListOperations", testListOperations},
	{"ExpiredLeases", testExpiredLeases},
	{"ExtendLease", testExtendLease},
	{"SQLTxCommitsWithOutcome", testSQLTx},
	{"SQLTxEndedRecordsNothing", testSQLTxEnded},
	{"SQLTxCommitRefused", testSQLTxCommitRefused},
	{"OnceExecutesAndStores", testOnceExecutesAndStores},
	{"OnceHandsExecuting", testOnceHandsExecuting},
	{"OnceTerminalStates", testOnceTerminalStates},
	{"OnceConcurrentSameScope", testOnceConcurrentSameScope},
	{"OnceDuplicateWaitsForClaim", testOnceDuplicateWaitsForClaim},
	{"OnceRollsBackOnError", testOnceRollsBackOnError},
	{"OnceExistingScope", testOnceExistingScope},
	{"OnceFencedByEpoch", testOnceFencedByEpoch},
	{"OnceOldWriterReplays", testOnceOldWriterReplays},
	{"SealedAtRest", testSealedAtRest},
	{"SealedBodyBound", testSealedBodyBound},
	{"ResealRotates", testResealRotates},
	{"SealedForgeryFailsClosed", testSealedForgeryFailsClosed},
	{"SettledBodyGuard", testSettledBodyGuard},
	{"ResealSkipsUnopenable", testResealSkipsUnopenable},
	{"ResealUpgradesLegacy", testResealUpgradesLegacy},
	{"KeyRoster", testKeyRoster},
	{"SealedOutbox", testSealedOutbox},
	{"AuditLog", testAuditLog},
	{"AuditConcurrent", testAuditConcurrent},
	{"PruneRuns", testPruneRuns},
	{"OperationOutbox", testOperationOutbox},
	{"LookupLog", testLookupLog},
	{"RecoveryAttempts", testRecoveryAttempts},
	{"PendingSettlement", testPendingSettlement},
	{"ResponseRulesEnforced", testResponseRulesEnforced},
	{"ResponseRulesInDatabase", testResponseRulesInDatabase},
	{"EvidenceNotWiped", testEvidenceNotWiped},
	{"RetentionFromSettlement", testRetentionFromSettlement},
	{"AbandonedReservationsRetire", testAbandonedReservationsRetire},
	{"AbandonedRetireRace", testAbandonedRetireRace},
	{"MaxActiveExpiredLeases", testMaxActiveExpiredLeases},
	{"RolloutCompareAndSet", testRolloutCompareAndSet},
	{"RolloutRace", testRolloutRace},
	{"RolloutEnforcedAt", testRolloutEnforcedAt},
	{"RolloutMarkEnforced", testRolloutMarkEnforced},
	{"RolloutVerdictCounts", testVerdictCounts},
	{"RolloutRulesInDatabase", testRolloutRulesInDatabase},
	{"TenantAttribution", testTenantAttribution},
	{"TenantFence", testTenantFence},
	{"TenantInFlight", testTenantInFlight},
	{"TenantCopy", testTenantCopy},
}

const (
	// racers is how many goroutines race for one scope.
	racers = 100
	// caseTimeout bounds every case, so a deadlocked driver fails the case
	// instead of hanging the test binary.
	caseTimeout = 2 * time.Minute
	// seedEnv names the environment variable that fixes the random seed.
	seedEnv = "IDEM_CONFORMANCE_SEED"
)

// base is the injected "now" of cases that control time: whole seconds, so
// every driver stores it exactly.
var base = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

const (
	createEffects = `CREATE TABLE conformance_effects (operation_id TEXT, note TEXT)`
	insertEffect  = `INSERT INTO conformance_effects (operation_id, note) VALUES ($1, $2)`
	countEffects  = `SELECT count(*) FROM conformance_effects WHERE operation_id = $1`
	countOutbox   = `SELECT count(*) FROM idem_outbox WHERE operation_id = $1`

	countAllEffects = `SELECT count(*) FROM conformance_effects`
	countAllOutbox  = `SELECT count(*) FROM idem_outbox`
	// countDigest counts the records of a scope whose stored digest is
	// the given one.
	countDigest = `SELECT count(*) FROM idem_operations WHERE scope = $1 AND resp_digest = $2`
)

// env is one case's harness, context and random source. rng is used from
// the test goroutine only.
type env struct {
	t   *testing.T
	h   *Harness
	ctx context.Context
	rng *rand.Rand
}

// setup builds a fresh harness for t and creates the business table.
func setup(t *testing.T, nh NewHarness) *env {
	t.Helper()
	h := nh(t)
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	t.Cleanup(cancel)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
		seed = v
	}
	t.Logf("driver %s, seed %d (%s=%d to replay)", h.Name, seed, seedEnv, seed)
	e := &env{t: t, h: h, ctx: ctx, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	e.exec(createEffects)
	return e
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if err := e.h.Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("exec %q: %v", sql, err)
	}
}

func (e *env) count(sql string, args ...any) int64 {
	e.t.Helper()
	n, err := e.h.QueryInt(e.ctx, sql, args...)
	if err != nil {
		e.t.Fatalf("query %q: %v", sql, err)
	}
	return n
}

// effects counts the business rows of an operation.
func (e *env) effects(opID string) int64 { e.t.Helper(); return e.count(countEffects, opID) }

// outbox counts the outbox rows of an operation.
func (e *env) outbox(opID string) int64 { e.t.Helper(); return e.count(countOutbox, opID) }

func (e *env) bytes32() (b [32]byte) {
	for i := range b {
		b[i] = byte(e.rng.Uint32())
	}
	return b
}

func (e *env) fingerprint() idem.Fingerprint { return idem.Fingerprint(e.bytes32()) }

// claim returns a claim on a new random scope with a random fingerprint.
func (e *env) claim(operation string) registry.Claim {
	return registry.Claim{
		Scope:       idem.ScopeHash(e.bytes32()),
		Fingerprint: e.fingerprint(),
		Operation:   operation,
		Owner:       e.bytes32(),
		WriterEpoch: 7,
	}
}

// reserve reserves c and fails the test unless it created the record.
func (e *env) reserve(c registry.Claim) registry.Record {
	e.t.Helper()
	rec, created, err := e.h.Store.Reserve(e.ctx, c)
	if err != nil || !created {
		e.t.Fatalf("Reserve: created=%v err=%v, want a new record", created, err)
	}
	return rec
}

// complete completes rec with out, writing one business row, and fails
// the test on error.
func (e *env) complete(rec registry.Record, out registry.Outcome) registry.Record {
	e.t.Helper()
	done, err := e.h.Store.Complete(e.ctx, rec, effect("complete", out))
	if err != nil {
		e.t.Fatalf("Complete: %v", err)
	}
	return done
}

// setNow injects the store's clock.
func (e *env) setNow(t time.Time) { e.h.SetNow(t) }

// effect is a business function that inserts one conformance_effects row
// for the record's operation and returns out.
func effect(note string, out registry.Outcome) registry.BusinessFunc {
	return func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		if rec.OperationID == "" {
			return registry.Outcome{}, fmt.Errorf("business function got a record without operation ID")
		}
		n, err := tx.Exec(ctx, insertEffect, rec.OperationID, note)
		if err != nil {
			return registry.Outcome{}, err
		}
		if n != 1 {
			return registry.Outcome{}, fmt.Errorf("insert affected %d rows, want 1", n)
		}
		return out, nil
	}
}

// failing is a business function that inserts a row and then fails with
// err, so the row shows whether the rollback happened.
func failing(err error) registry.BusinessFunc {
	return func(ctx context.Context, tx registry.Tx, rec registry.Record) (registry.Outcome, error) {
		if _, xerr := tx.Exec(ctx, insertEffect, rec.OperationID, "failing"); xerr != nil {
			return registry.Outcome{}, xerr
		}
		return registry.Outcome{}, err
	}
}

// outcome is a SUCCEEDED outcome whose response sets every snapshot field
// and whose body holds bytes that text columns would mangle, with msgs
// outbox messages.
func outcome(tag string, msgs int) registry.Outcome {
	body := append([]byte(`{"tag":"`+tag+`"}`), 0x00, 0xff, 0xfe, '\n')
	o := registry.Outcome{State: idem.StateSucceeded, Response: idem.Response{
		Status:    201,
		MediaType: "application/json",
		Location:  "/conformance/" + tag,
		ETag:      `"` + tag + `-v1"`,
		Body:      body,
	}}
	for i := range msgs {
		o.Outbox = append(o.Outbox, registry.Message{
			Topic:   "conformance." + tag,
			Payload: fmt.Appendf(nil, "%s/%d\x00\xff", tag, i),
		})
	}
	return o
}

// sameResponse reports whether got is exactly want: every snapshot field,
// body byte for byte.
func sameResponse(got *idem.Response, want idem.Response) bool {
	return got != nil && got.Status == want.Status && got.MediaType == want.MediaType &&
		got.Location == want.Location && got.ETag == want.ETag && bytes.Equal(got.Body, want.Body)
}

// recordDiff lists the fields in which two records differ.
func recordDiff(a, b registry.Record) []string {
	var d []string
	add := func(field string, x, y any) { d = append(d, fmt.Sprintf("%s: %v != %v", field, x, y)) }
	if a.Scope != b.Scope {
		add("Scope", a.Scope, b.Scope)
	}
	if a.OperationID != b.OperationID {
		add("OperationID", a.OperationID, b.OperationID)
	}
	if a.Operation != b.Operation {
		add("Operation", a.Operation, b.Operation)
	}
	if a.Owner != b.Owner {
		add("Owner", a.Owner, b.Owner)
	}
	if a.Fingerprint != b.Fingerprint {
		add("Fingerprint", a.Fingerprint, b.Fingerprint)
	}
	if a.Contract != b.Contract {
		add("Contract", a.Contract, b.Contract)
	}
	if a.State != b.State {
		add("State", a.State, b.State)
	}
	if a.OwnerGen != b.OwnerGen {
		add("OwnerGen", a.OwnerGen, b.OwnerGen)
	}
	if a.WriterEpoch != b.WriterEpoch {
		add("WriterEpoch", a.WriterEpoch, b.WriterEpoch)
	}
	for _, f := range []struct {
		name string
		x, y time.Time
	}{{"LeaseUntil", a.LeaseUntil, b.LeaseUntil}, {"ExpiresAt", a.ExpiresAt, b.ExpiresAt},
		{"CreatedAt", a.CreatedAt, b.CreatedAt}, {"UpdatedAt", a.UpdatedAt, b.UpdatedAt}} {
		if !f.x.Equal(f.y) {
			add(f.name, f.x, f.y)
		}
	}
	if (a.Response == nil) != (b.Response == nil) || (a.Response != nil && !sameResponse(a.Response, *b.Response)) {
		add("Response", a.Response, b.Response)
	}
	return d
}

// race runs fn(0) … fn(n-1) on n goroutines released together once all
// of them are running, and returns when all have returned.
func race(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	for i := range n {
		done.Go(func() {
			ready.Done()
			<-start
			fn(i)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// closed reports whether ch is closed, without blocking.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
