// Package bench measures what idem costs: in one run, on one machine and
// one database, it drives the reference payments service's create
// endpoint seven ways and reports their throughput side by side.
//
//   - plain: payments.Service.PlainCreate, the handler a careful service
//     would write without idem (same validation, its own transaction
//     writing one payment row and one outbox row, 201 with the same body);
//   - floor: the plain handler (payments.Service.PlainCreateWith) with
//     the smallest idempotency row in its transaction — a 32-byte scope,
//     SHA-256 of the caller and the Idempotency-Key header, as the only
//     column and primary key of idem_bench_floor (floor.sql) — served and
//     sent exactly like plain, a new key per request: what any
//     idempotency layer must at least add;
//   - idem first: the real service route behind the real
//     idemhttp.Middleware, a new Idempotency-Key per request, in the
//     two-phase style and, on a second instance of the service, in the
//     one-transaction style;
//   - idem replay: the same route, every request repeating one of
//     Config.ReplayKeys keys whose operations succeeded before timing
//     began, spread over all of them;
//   - idem replay, cached: the same replays sent to a third instance of
//     the service with the replay cache on (operation.ReplayCache, as
//     many entries as replayed keys), side by side with the replays
//     without it;
//   - db insert: the plain handler's transaction (payments.Service.InsertPlain)
//     run directly on the store's pool, without HTTP — the database's own
//     limit for these rows.
//
// Every HTTP variant goes through real net/http servers on loopback
// ports in this process and one net/http client that keeps enough idle
// connections for every client goroutine. The run gets a fresh database
// (a new schema on PostgreSQL, a new database on MySQL/MariaDB, a new
// file on SQLite) that every variant
// shares. Cells — one variant at one client count — are interleaved in
// rounds, their order rotated from round to round, and the report gives
// the median of the rounds, so slow drift of a shared machine hits every
// variant alike.
//
// The reservation latency is measured by a timing wrapper around
// registry.Store.Reserve that the service is built on (exact durations,
// not the middleware's idem_reservation_seconds histogram, whose buckets
// are 0.2 ms × 2^k wide): its p99 over every timed first execution of all
// rounds is Result.ReservationP99Ms.
//
// On PostgreSQL every timed cell also reads the WAL insert position
// before and after, on a connection of its own; the difference ÷ the
// requests completed is Result.WALBytesPerOp. The position is the
// cluster's: the run should have the cluster to itself.
//
// RunTail measures the tail instead: the default style and plain
// closed-loop at 64 clients, then the default style open-loop at fixed
// rates (driveOpen: latency from the scheduled send time, at most
// Config.Outstanding in flight, late sends counted), with each cell's
// Little's-law account (Queueing: CPU and run-queue time per request of
// this process and of PostgreSQL's, from Linux's schedstat). Config.Pin
// pins this process and PostgreSQL to separate CPUs with taskset (pin).
package bench
