package events

// Every envelope about one invocation says which, so that a reader (the
// audit join) can find it without a case per type. Most carry the id in a
// field named InvocationID, which is part of their Go API and of their
// wire form: a method of that name would clash with it, and renaming the
// field would touch every producer and consumer for no gain. So the method
// has a name of its own, ForInvocation, on every such envelope, the
// Invocation included (its id is its own).

// ForInvocation is the id of the invocation itself: the Header's ID.
func (i *Invocation) ForInvocation() string { return i.ID }

// ForInvocation is the id of the invocation decided on (InvocationID).
func (d *Decision) ForInvocation() string { return d.InvocationID }

// ForInvocation is the id of the invocation the confirmation is asked for
// (InvocationID).
func (c *ConfirmRequest) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation the answer is for
// (InvocationID).
func (c *ConfirmAnswer) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation whose answer is acknowledged
// (InvocationID).
func (c *ConfirmAck) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation whose question was dismissed
// (InvocationID).
func (c *ConfirmDismissed) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation whose answer was refused
// (InvocationID).
func (c *ConfirmRejected) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation whose confirmation closed
// (InvocationID).
func (c *ConfirmClosed) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation that waits for an answer
// (InvocationID).
func (c *ConfirmWaiting) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation that passed the step
// (InvocationID).
func (s *Step) ForInvocation() string { return s.InvocationID }

// ForInvocation is the id of the invocation the hook ran around
// (InvocationID).
func (h *HookRun) ForInvocation() string { return h.InvocationID }

// ForInvocation is the id of the invocation to cancel (InvocationID).
func (c *CancelRequest) ForInvocation() string { return c.InvocationID }

// ForInvocation is the id of the invocation answered (InvocationID).
func (r *Result) ForInvocation() string { return r.InvocationID }

// ForPrincipal is the principal of the call an executor's event is about
// (Header.Principal); empty on other envelopes, and on events recorded
// before executors said it.
func (h *Header) ForPrincipal() string { return h.Principal }

// ForCall is the id the executor minted for the call an executor's event
// is about (Header.Call); empty on other envelopes, and on events
// recorded before executors minted one.
func (h *Header) ForCall() string { return h.Call }
