// Package bench measures what idem costs: in one run, on one machine and
// one database, it drives the reference payments service's create
// endpoint four ways and reports their throughput side by side.
//
//   - plain: payments.Service.PlainCreate, the handler a careful service
//     would write without idem (same validation, its own transaction
//     writing one payment row and one outbox row, 201 with the same body);
//   - idem first: the real service route behind the real
//     idemhttp.Middleware, a new Idempotency-Key per request;
//   - idem replay: the same route, every request repeating one of
//     Config.ReplayKeys keys whose operations succeeded before timing
//     began, spread over all of them;
//   - db insert: the plain handler's transaction (payments.InsertPlain)
//     run directly on the store's pool, without HTTP — the database's own
//     limit for these rows.
//
// Every HTTP variant goes through real net/http servers on loopback
// ports in this process and one net/http client that keeps enough idle
// connections for every client goroutine. The run gets a fresh database
// (a new schema on PostgreSQL, a new file on SQLite) that every variant
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
package bench
