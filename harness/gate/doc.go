// Package gate is the launch gate of SPEC V2: it starts several "idem serve"
// instances on one database, drives N keys × R concurrent retries of
// POST /v1/payments through them (optionally killing one instance with
// SIGKILL mid-run and restarting it), then reads the database back and
// decides whether every gate holds:
//
//   - duplicate logical effects = 0: per key at most the one payment row and
//     the one outbox row its operation committed;
//   - payload-conflict false hits = 0: no 422 PAYLOAD_CONFLICT for a
//     request whose payload is canonically identical to the first;
//   - terminal replay digest consistency = 100 %: every terminal answer of
//     a key carries the same response digest as the snapshot stored in the
//     registry (and the snapshot still matches its stored digest);
//   - UNKNOWN past the recovery SLO < 0.01 % of the operations, after a
//     final recovery pass;
//   - p99 of the reservation (idem_reservation_seconds, merged over every
//     instance) ≤ 5 % of the endpoint's latency budget (200 ms by default).
//
// Besides these, the run fails when a key never got a terminal answer,
// when an accepted key has no effect, when a deliberately different
// payload was not refused, or when a server answered something the
// contract does not allow for the request.
//
// Each logical payment carries its own identity in its memo ("gate RUN
// kINDEX"), independent of the idempotency machinery, so a second payment
// for one key is found even if it was recorded under another operation.
//
// The transfers workload (Config.Workload) drives POST /v1/transfers
// instead, through an "idem provider" child whose mode the gate switches
// during the load (hang, fail-after, decline, fail, hang-before), and
// verifies against the provider's executions, attributed to keys by
// payee: at most one per key, exactly one for a key answered 2xx, none
// for a key answered 422; no stored 5xx response; every key settled
// within Config.UnknownSLO of its first request (VerifyTransfers). With
// Config.Retention it also runs the late-settlement phase: a short
// retention on the instances, a provider outage longer than it as the
// load starts, and every operation UNKNOWN for longer than the retention
// retried after it settled and a prune pass ran — it must replay its
// settled answer (Report.Late, gate late_settled_replayed).
//
// Config.Rollout runs the rollout phase instead of the storm: two or
// more instances serve payments.create as the registry's rollout row
// says, and the gate ramps the row through RolloutStages under load —
// shadow, enforce 10 %, 50 % (an instance killed midway), shadow, 100 % —
// with "idem rollout", then judges each key's business rows against the
// attempts it sent before the operation was first enforced and every
// later answer against the stored one (VerifyRollout, Report.Rollout),
// and compares shadow's predicted verdicts with enforce's answered ones.
//
// For failover tests, Config.Midway is a hook called once midway through
// the load while it goes on (kill the database's primary, promote its
// standby) and Config.Resend sends every answered key once more after
// the load, so the verification sees what a client retrying after the
// failover gets; Verification.AcknowledgedLost and ReExecuted count the
// keys whose acknowledged operation the database lost and the keys
// executed twice (e2e.TestFailover).
//
// Run is the whole gate; Load, Verify and the report types are its parts,
// usable on their own (the tests run Load against in-process servers and
// Verify on real databases). See docs/gate.md.
package gate
