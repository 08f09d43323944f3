// Package console is idem's operator console: server-rendered web pages
// (html/template, embedded templates and stylesheet, no JavaScript) that
// show an on-call engineer what the CLI "idem ops", "idem epoch" and
// "idem drain" show, and let them act the same way:
//
//   - the status page ({Prefix}/): writer epoch, drain flag, the number of
//     UNKNOWN operations and the age of the oldest, the operations in
//     flight, the outbox's pending messages, relay lag and dead letters;
//     forms to turn drain on or off and to bump the writer epoch, each
//     with a required confirmation box;
//   - the operations list ({Prefix}/operations), oldest first, 50 a page,
//     filtered by state, operation name and age;
//   - one operation ({Prefix}/operations/{id}): its record (hashes, never
//     the request), its stored response's metadata (the body only for
//     operators with ShowResponses), its effect attempts with their
//     downstream keys, a lookup by key of each (changing nothing), its
//     reconciliation log, and — while it is UNKNOWN — a form that settles
//     it only with written evidence, through effect.Set.SettleByOperator,
//     the very path of "idem ops reconcile", the operator's name as actor.
//
// Access: operators log in ({Prefix}/login) with a token from the
// operators file (LoadOperators), never with an API token. A login sets
// a session cookie (HttpOnly, SameSite=Strict, Path=Prefix, Secure over
// TLS) holding a session ID, a fingerprint of the operator's token, the
// operator's name and an expiry 12 hours on, signed with HMAC-SHA-256
// under a key New draws at random. The session is live only while its ID
// is in the console's table of live sessions: logout removes it, and
// SetOperators removes those of operators and tokens no longer listed;
// sessions end with the process. Refused logins are throttled per source
// address and console-wide (429 LOGIN_THROTTLED with Retry-After) and
// audited. Every form carries a CSRF
// token bound to the cookie; a POST without it is refused (403
// CSRF_INVALID). Errors are shown in an element #error with a stable
// data-code (the Code constants) and the matching HTTP status. Every
// action is logged at Info with the operator's name.
//
// Defaults and zero values are documented on Config. The handler New
// returns is safe for concurrent use; the context of each request
// governs the registry and downstream calls made for it.
package console
