// Package discovery is the second way tools enter toolbus, after the
// built-ins: a project's own discovery command (seed 000
// discoverAndRegisterToolsFromCommand), configured as Gemini CLI
// configures it (tools.discoveryCommand and tools.callCommand in
// settings.json, settings.go).
//
// The executor that runs the discovery hosts the tools it finds: they run
// in its workspace. A Source (source.go) runs the command from the
// workspace root without a shell, its output capped (run.go), parses the
// declarations it prints (parse.go) and hosts them on the executor as one
// set, which each discovery replaces as a whole, so that routing,
// validation, policy, confirmation, deadlines, output caps and audit
// apply to them as to any tool. A discovered tool (tool.go) is of kind
// other and source discovered; a call runs the call command with the
// tool's name appended and the arguments as JSON on stdin (seed 001
// DiscoveredToolInvocation), as a process tree that ends as a whole
// (internal/proctree), with an environment that keeps the executor's
// secrets out (env.go).
package discovery
