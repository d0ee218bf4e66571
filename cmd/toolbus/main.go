// Command toolbus is the user's one command: `toolbus up` runs the whole
// system on loopback, the other sub-commands talk to a running bus.
//
// The invoke path starts in up.go: the bus, then the registry, then the
// providers that register tools.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

const usage = `toolbus — one tool registry, one policy and one audit trail for a fleet of AI agents

Usage:
  toolbus up [--data DIR] [--listen HOST:PORT] [--settings FILE] [--mcp-config FILE] [--workspace DIR] [--policy DIR]
      run the bus, the registry and an executor with the built-in tools and the MCP servers
      of settings.json (Gemini CLI) and .mcp.json (Claude Code) in one process,
      the web console (--console ADDR|off) and the MCP endpoint (--mcp-listen ADDR|off)
  toolbus init DIR [--add ROLE:NAME]...
      make a fleet's identities: a seed per member (DIR/NAME.nk), the roster, and the bus's
      authorization config (bus --identities DIR); parts connect with $TOOLBUS_IDENTITY=DIR/NAME.nk
  toolbus console [--listen HOST:PORT] [--token TOKEN] [--as ID]
      the web console for a fleet's bus: answer confirmation requests, revoke allowlist entries
  toolbus tools list [--json] [--active] [--server NAME] [--format gemini|openai|anthropic|mcp]
  toolbus tools get NAME [--json] [--format gemini|openai|anthropic|mcp]
  toolbus tools enable|disable [NAME...] [--kind KIND] [--category CATEGORY]
  toolbus tools discover [--force] [--json]       run every executor's discovery command again
  toolbus tools discover --server NAME [--json]   list an MCP server's tools again
  toolbus mcp status [--json]         every MCP server's state, on every executor
  toolbus mcp serve [--agent ID] [--session ID] [--listen HOST:PORT] [--token T]
      the fleet's tools as one MCP server: over stdio for an agent, or over HTTP
  toolbus call NAME --args JSON [--json] [--timeout D] [--stream] [--id ID] [--workspace NAME]
      run a tool; exit 0 on success, 1 with the error type on stderr on failure, 130 on Ctrl-C
  toolbus cancel INVOCATION_ID
  toolbus policy test [DIR] [-v]      run a policy set's Rego tests (default: the built-in policy)
  toolbus policy push DIR             test, then enforce DIR's policy on every executor
  toolbus policy show [--json]        the pushed policy's revision
  toolbus policy explain ID [--policy DIR] [--trace] [--json]
      which rules of the pushed (or DIR's) policy make a recorded call's decision, from OPA's trace
  toolbus allowlist list [--json] | revoke KEY...
  toolbus confirm [--as ID] [--json]  answer confirmation requests in the terminal (--json: JSON lines, for scripts)
  toolbus audit list [--since D|T] [--until T] [--tool NAME] [--caller ID] [--verdict V] [--outcome TYPE] [--approver ID] [--json]
      every invocation in the audit stream with its decision, approver and outcome, secrets hidden
  toolbus audit show ID [--json] [--explain]   one invocation's whole story, event by event
  toolbus audit export [--since D|T] [--format jsonl]   one invocation a line, for a SIEM
  toolbus audit tail [filters] [--json]               invocations as they end, live
  toolbus audit verify [--since D|T] [--key FILE]      no event missing, every signed checkpoint matching
  toolbus audit init [--max-age D] [--max-bytes N] [--replicas N]
      make the audit stream on a NATS deployment with no toolbus bus node (as an admin)
  toolbus audit whatif --policy DIR [--since D|T] [filters] [--json] [--fail-on-change]
      judge the recorded calls again under DIR's policy, executing nothing: which decisions would change
  toolbus version

Every command that talks to a bus takes --nats URL (default $TOOLBUS_NATS,
else nats://127.0.0.1:4222, where 'toolbus up' listens).
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "toolbus:", err)
		}
		os.Exit(exitCode(err))
	}
}

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "up":
		return runUp(args[1:])
	case "init":
		return runInit(args[1:])
	case "tools":
		return runTools(args[1:])
	case "call":
		return runCall(args[1:])
	case "cancel":
		return runCancel(args[1:])
	case "policy":
		return runPolicy(args[1:])
	case "allowlist":
		return runAllowlist(args[1:])
	case "mcp":
		return runMCP(args[1:])
	case "console":
		return runConsole(args[1:])
	case "confirm":
		return runConfirm(args[1:])
	case "audit":
		return runAudit(args[1:])
	case "version":
		fmt.Println("toolbus", version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return usageError{fmt.Errorf("unknown command %q", args[0])}
}

// usageError marks a mistake in the command line (exit code 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitCode is 2 for a mistake in the command line, the code an error
// carries (ExitCode, as stoppedBy does), else 1.
func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return 1
}

// parseFlags parses the flags of a sub-command that takes nothing else.
func parseFlags(fs *flag.FlagSet, args []string) error {
	rest, err := parse(fs, args)
	if err == nil && len(rest) > 0 {
		err = usageError{fmt.Errorf("%s takes no arguments, got %q", fs.Name(), rest)}
	}
	return err
}

// parse parses a sub-command's flags, letting flags and positional
// arguments mix ("tools get NAME --json").
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(os.Stderr)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}
