package registry

// Audit actions of refused console logins (AuditEntry.Action). Their
// Actor is AuditActorUnknown: a refused token names nobody.
const (
	// AuditLoginFailed: a login token was looked at and is no operator's.
	// Detail names the source address. Written for every such attempt;
	// the console's throttle bounds how many can be made.
	AuditLoginFailed = "login.failed"
	// AuditLoginThrottled: logins refused unseen (429) because their
	// source, or the console as a whole, made too many refused ones.
	// They are counted, not written one by one: Detail holds the count
	// since the previous such entry of the same source, at most one
	// entry a source every five minutes.
	AuditLoginThrottled = "login.throttled"
	// AuditActorUnknown is the actor of the entries above.
	AuditActorUnknown = "(unknown)"
)
