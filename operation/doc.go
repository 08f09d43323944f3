// Package operation is the transport-agnostic core of an idempotent
// operation: the one place where a request that a door has reduced to an
// identity, a scope (from its key) and a fingerprint is claimed in the
// registry, executed in its style, settled, and answered — executed,
// replayed or refused. It is named for what it holds: the run of one
// operation under the contract (docs/contract.md), not any one way in.
//
// A door — idemhttp for HTTP; a gRPC interceptor, a message consumer or a
// webhook receiver the same way — keeps only its own mapping: where the
// key comes from, who the caller is, what the canonical payload and the
// fingerprint are, and how a Result is written back to its client. It
// calls Core.Run with a Request and a Door whose Execute runs the business
// once, in the registry transaction it is given, and returns the Answer to
// store (an idem.Response snapshot: status, media type, body; a gRPC door
// maps its code and message bytes into it). Run returns a typed Result:
// Executed, Replayed (the stored answer), Released (nothing was recorded:
// the door sends its execution's own answer), Refused (a contract code
// and its Retry-After) or Plain (shadow rollout: execute without a
// record).
//
// One file per execution style, each reading straight down:
//
//	run.go        claim → decide → execute, replay, wait or refuse: the loop every door enters (Core.Run)
//	twophase.go   reserve, then execute in the fenced business transaction (Store.Complete)
//	onetx.go      one transaction: look up, then execute and insert the record (Store.ExecuteOnce)
//	effects.go    effects outside the database: BeginEffect, evidence, UNKNOWN (Effect)
//	onetxeffects.go  effects in the one-transaction style: the record and the attempt in one
//	              commit at the first Effect (Store.ReserveEffect), the answer with the
//	              outcome (Store.CompleteEffects): two commits per execution
//	settle.go     continue an operation: settle an UNKNOWN one, take over an expired lease
//	outcome.go    what every style answers once its outcome committed or not: release,
//	              resolve a lost commit reply, the execution's context and heartbeat
//	refuse.go     Run's one exit: an error, a replay or an operation in flight as a Result
//
// and beside them: decide.go (the pure decision, Decide, and its rollout
// verdict), wait.go (waiting for an operation in flight), flights.go (a
// duplicate waiting for an execution of its key in this Core),
// replaycache.go (settled records kept in memory for replays, when
// Config.ReplayCache is on; docs/contract.md §8), config.go (Config: one
// operation's configuration), trace.go (the run's spans,
// Core.TracerProvider; docs/tracing.md).
//
// Concurrency: a Core is safe for concurrent use once built; its fields
// must not change afterwards. ctx passed to Run is the request's: it
// governs everything up to the acceptance point; an accepted execution
// runs on a context detached from it and bounded by
// Config.ExecutionLimit (A8).
package operation
