package tool

// Owner is who a capability a tool hands out (a background shell's id)
// belongs to: the caller of the call that made it, as the executor
// checked it (Call.Caller). Two owners are the same only when both name
// the same caller and both are proven, or neither is: a caller the bus
// vouched for is never the same owner as a claim of its name. Owners are
// comparable.
type Owner struct {
	id     string
	proven bool
}

// Owner is the owner of what this call makes: its caller. Where the bus
// proves identities, a caller is its principal, or one of the callers it
// speaks for (principal/…, as the MCP facade names its clients), so each
// of those owns its own.
func (c *Call) Owner() Owner { return Owner{id: c.Caller.ID, proven: c.Caller.Proven} }

// Owns reports whether call comes from o: the one test a tool makes
// before it serves a capability of o's.
func (o Owner) Owns(call *Call) bool { return o == call.Owner() }
