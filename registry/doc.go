// Package registry is the acceptance point of idem: the record of every
// idempotent operation, the rules for claiming, completing and taking it
// over, and the interface that storage drivers implement.
//
// A driver (idempg for PostgreSQL, idemsqlite for SQLite) stores Records in
// one table whose scope column is unique: inserting that row is the one
// atomic acceptance point. Every later change of a record is a single
// compare-and-set statement on (scope, owner generation, expected states);
// idem.CanTransition lists the legal changes and the drivers' migrations
// make the database refuse all others.
//
// Three integration styles exist:
//
//   - Two-phase (the HTTP middleware's default): Store.Reserve commits a
//     RESERVED record at once, so duplicates see the operation in flight;
//     Store.Complete later runs the business function in its own
//     transaction and commits business writes, the terminal state, the
//     response snapshot and the outbox rows together, fenced by the owner
//     generation. Store.Release deletes a reservation whose request
//     produced no outcome (5xx), so a retry can run.
//   - One transaction (Store.ExecuteOnce), for operations whose every
//     effect is a write in this database: the business function runs in a
//     new transaction and the record is then inserted already terminal,
//     with response and outbox rows, in that transaction; nothing is in
//     flight in the registry, ever. A concurrent duplicate's insert waits
//     and fails, its writes roll back, and it gets the winner's verdict.
//   - In-transaction: the drivers' ClaimAndExecute writes the claim inside
//     a transaction the caller owns, runs the business function and records
//     the outcome in that same transaction. If the caller's transaction
//     rolls back, the claim disappears with it.
//
// Decide is the one place that turns an existing record and a fingerprint
// into a verdict (execute, replay, conflict, in progress, unknown,
// retired).
package registry
