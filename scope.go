package idem

import "encoding/hex"

// Identity is the authenticated caller: it comes from the application's
// authentication, never from the request body or a client header.
type Identity struct {
	Tenant    string
	Principal string
}

// ScopeHash identifies one idempotent operation attempt: SHA-256 over the
// length-prefixed fields (tenant, principal, operation, API revision, key)
// under the domain tag "http.idempotency.v1/scope". Two requests share a
// ScopeHash only if all five are equal, so no hit crosses tenants,
// principals, operations or API revisions.
type ScopeHash [32]byte

// ScopeOf computes the scope hash. operation names the business operation
// (for example "payments.create"); apiRevision is the API major revision
// the request was served under.
func ScopeOf(id Identity, operation, apiRevision string, k Key) ScopeHash {
	h := newFieldHash(ContractVersion + "/scope")
	h.string(id.Tenant)
	h.string(id.Principal)
	h.string(operation)
	h.string(apiRevision)
	h.string(k.v)
	return ScopeHash(h.sum())
}

// String returns the hash in lower-case hex.
func (s ScopeHash) String() string { return hex.EncodeToString(s[:]) }

// Hash returns SHA-256 over the length-prefixed tenant and principal under
// the domain tag "http.idempotency.v1/identity": the stored form of an
// operation's owner, so operation status is shown to its owner only
// without storing who that is.
func (id Identity) Hash() [32]byte {
	h := newFieldHash(ContractVersion + "/identity")
	h.string(id.Tenant)
	h.string(id.Principal)
	return h.sum()
}
