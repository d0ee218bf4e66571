// Package toolbus is the Go client of a toolbus fleet: it lists the
// fleet's tools as declarations for a model API, and calls them — one at
// a time or in a batch, with progress, cancellation and the whole stored
// output of a call that was too long for its result. Every call goes
// through the fleet's policy, confirmation and audit, under the client's
// identity.
//
// It is the only Go API of the module meant for use from outside it; its
// types are its own, never the fleet's internal ones.
//
//	c, err := toolbus.Connect(ctx, "nats://127.0.0.1:4222",
//		toolbus.WithIdentity(toolbus.Identity{ID: "agent:my-bot", Session: "s1"}))
//	if err != nil { ... }
//	defer c.Close()
//	decls, err := c.Declarations(ctx, toolbus.OpenAI) // hand these to the model
//	res, err := c.Invoke(ctx, "read_file", map[string]any{"file_path": "README.md"})
//	switch {
//	case res == nil:
//		// the call could not be made: err says why
//	case errors.Is(err, toolbus.ErrPolicyDenied):
//		// res.LLMContent holds the policy's reason, for the model
//	}
//
// # Failures
//
// A call that was made always has a Result. A failed call's Result has
// Error set and its LLMContent says what went wrong in words meant for
// the model; Invoke also returns that *ToolError, whose ErrorType is a
// sentinel for errors.Is. An agent loop hands res.LLMContent back to the
// model whatever happened, and stops only when res is nil.
package toolbus
