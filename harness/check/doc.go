// Package check is a black-box idempotency checker for any HTTP API
// (SPEC V3): it sends real requests carrying an idempotency key to one
// write endpoint and judges, from the answers alone, whether the endpoint
// is safe to retry. It does not need the API to be built with idem; "idem
// check URL" is its command-line face and docs/check.md its user guide.
//
// A run is a sequence of scenarios, each checking one property with fresh
// keys and fresh payloads (see Scenarios):
//
//	replay      a retry with the same key gets the same status and body
//	conflict    a changed payload with the same key is refused and creates nothing
//	concurrent  N concurrent identical requests cause one effect
//	in-flight   duplicates of a request still in flight are not executed again
//	scoping     a second credential reusing a key never gets the first one's outcome
//	hygiene     a replay carries a fresh Date and not the first answer's Set-Cookie
//	load        many keys at the configured concurrency: one resource per key
//	key-entropy a low-entropy key is refused; accepting one is a warning
//
// The request body comes from a template (Config.Body) in which every
// {{unique}} becomes a fresh number per key and {{variant}} becomes
// VariantSame, or VariantChanged in the changed payload of the conflict
// scenario. Which resource an accepted (2xx) answer created is told by
// Config.IDField, else by its Location header, else by the digest of its
// body: the number of distinct resources among the 2xx answers to one key
// is the number of effects that key caused. When Config.CountURL is set,
// the checker also reads the number of resources before and after a
// scenario and requires the growth it caused to be exact, so the target
// must see no other traffic from the same credential during a run.
//
// "Refused" means any 4xx answer that created nothing. Answers meaning
// "retry later" (409, 425, 429 and 503) are tolerated from duplicates of
// a request in flight; the checker then asks again, honouring
// Retry-After, until it gets the outcome.
//
// A scenario that cannot apply (scoping without Config.AltHeader, conflict
// without {{variant}}, in-flight when no duplicate could ever be sent
// before the original was answered) is reported as skipped, never as
// passed. A scenario whose property does not hold although no retry broke
// (key-entropy: the API accepted a guessable key) is reported as a
// warning (Warned), which does not fail the run. Report.Passed is true
// only when none failed and at least one passed or warned.
package check
