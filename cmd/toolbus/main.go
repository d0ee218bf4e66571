// Command toolbus is the user's one command: `toolbus up` runs the whole
// system on loopback, the other sub-commands talk to a running bus.
//
// The invoke path starts in up.go: the bus, then the registry, then the
// providers that register tools.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/buscontext"
	"github.com/toolbus/toolbus/internal/cli"
)

// docs/cli.md, the reference of every command, is made from the command
// tree by a test (reference_test.go):
//go:generate go test -run ^TestCLIReference$ -update-cli-reference .

func main() {
	os.Exit(execute(os.Args[1:]))
}

// execute runs the command line args and returns the exit code. The
// command's defers have run when it returns.
func execute(args []string) int {
	root := newRootCommand()
	root.SetArgs(args)
	var cmd *cobra.Command
	err := cli.WithTraces("toolbus", func() (err error) {
		cmd, err = root.ExecuteC()
		return err
	})
	if err == nil {
		return exitOK
	}
	reportError(os.Stderr, cmd, err, wantsJSON(cmd, args))
	return exitCode(err)
}

// wantsJSON says whether the command line asked for JSON output: --json,
// as parsed, or, when parsing stopped before it, as written.
func wantsJSON(cmd *cobra.Command, args []string) bool {
	if f := cmd.Flags().Lookup("json"); f != nil && f.Changed {
		return f.Value.String() == "true"
	}
	if end := slices.Index(args, "--"); end >= 0 {
		args = args[:end]
	}
	return slices.Contains(args, "--json") || slices.Contains(args, "--json=true")
}

// Command groups of the root command's help.
const (
	groupRun    = "run"
	groupTools  = "tools"
	groupPolicy = "policy"
	groupAudit  = "audit"
)

// newRootCommand is the whole command tree. Each command's RunE does the
// work; errors come back to execute, which prints them and picks the exit
// code.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "toolbus",
		Short: "One tool registry, one policy and one audit trail for a fleet of AI agents",
		Long: `toolbus runs the tools of AI agents for a fleet: one registry of tools, one
policy that judges every call, approvers who answer the calls the policy asks
about, and one audit trail, on a NATS bus.

'toolbus up' runs all of it in one process on this host. Every other command
talks to a running bus: the one --nats names, else $TOOLBUS_NATS, else the
context's ('toolbus up' writes one and selects it: toolbus context), else
nats://127.0.0.1:4222, where 'toolbus up' listens.

Exit codes: ` + exitCodeSummary() + ` (docs/cli.md).`,
		Example: `  # Run the bus, the registry and an executor for the current directory.
  toolbus up

  # From another terminal: list the tools, then call one.
  toolbus tools list
  toolbus call read_file --args '{"file_path": "README.md"}'

  # Talk to another bus.
  toolbus --nats nats://10.0.0.5:4222 tools list`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       versionText(readBuildInfo()),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// Declared here so that -v stays free; cobra would take it as the
	// version flag's shorthand.
	root.Flags().Bool("version", false, "print the version and build of toolbus")
	root.PersistentFlags().String("nats", "", "NATS `URL` of the bus (default $TOOLBUS_NATS, else the context's, else "+bus.DefaultURL+")")
	root.PersistentFlags().String("context", "", "the context `NAME`d to talk to the bus of (default $TOOLBUS_CONTEXT, else the selected one: toolbus context)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return useContext(cmd) }
	root.SetFlagErrorFunc(flagError)
	root.AddGroup(
		&cobra.Group{ID: groupRun, Title: "Run toolbus:"},
		&cobra.Group{ID: groupTools, Title: "Tools and calls:"},
		&cobra.Group{ID: groupPolicy, Title: "Policy and approval:"},
		&cobra.Group{ID: groupAudit, Title: "Audit:"},
	)
	inGroup := func(id string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = id
			root.AddCommand(c)
		}
	}
	inGroup(groupRun, newUpCommand(), newInitCommand(), newConsoleCommand(), newMCPCommand(), newContextCommand())
	inGroup(groupTools, newToolsCommand(), newCallCommand(), newCancelCommand(), newOutputCommand())
	inGroup(groupPolicy, newPolicyCommand(), newAllowlistCommand(), newConfirmCommand())
	inGroup(groupAudit, newAuditCommand())
	root.AddCommand(newVersionCommand())
	holdsCommands(root)
	completeTree(root)
	usage := root.UsageFunc()
	root.SetUsageFunc(func(c *cobra.Command) error {
		defer asCommandHolder(c)()
		return usage(c)
	})
	return root
}

// asCommandHolder has c, when it holds other commands, show as one that
// is not run itself, until the returned function puts it back: its usage
// names its commands, not a command line of its own. Such a command runs
// only to print its help or refuse an unknown command (holdsCommands).
func asCommandHolder(c *cobra.Command) (restore func()) {
	if !c.HasAvailableSubCommands() {
		return func() {}
	}
	run := c.RunE
	c.RunE = nil
	return func() { c.RunE = run }
}

// completeTree adds cobra's own commands (help and completion) now rather
// than when the command line runs, so that the reference and the tests
// see them, and gives every command what cobra leaves to the program:
// examples, and usage errors that exit 2.
func completeTree(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  toolbus help\n  toolbus help audit whatif"
		case "completion":
			c.Example = "  source <(toolbus completion bash)"
			for _, shell := range c.Commands() {
				shell.Example = completionExamples[shell.Name()]
			}
		}
	}
	walk(root, func(c *cobra.Command) {
		if validate := c.Args; validate != nil {
			c.Args = func(c *cobra.Command, args []string) error {
				if err := validate(c, args); err != nil {
					return usageError{err}
				}
				return nil
			}
		}
	})
}

var completionExamples = map[string]string{
	"bash":       "  # In this shell:\n  source <(toolbus completion bash)\n\n  # In every new shell:\n  toolbus completion bash > ~/.local/share/bash-completion/completions/toolbus",
	"zsh":        "  # In every new shell (compinit must be on):\n  toolbus completion zsh > \"${fpath[1]}/_toolbus\"",
	"fish":       "  toolbus completion fish > ~/.config/fish/completions/toolbus.fish",
	"powershell": "  toolbus completion powershell | Out-String | Invoke-Expression",
}

// walk calls f on c and every command below it.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// holdsCommands makes c, a command that only holds others, behave as
// kubectl's and gh's do: alone it prints its help; with a word that names
// none of its commands it is a usage error, with suggestions. Cobra alone
// would print the help for the unknown word too, and exit 0.
func holdsCommands(c *cobra.Command) {
	c.Args = cobra.ArbitraryArgs
	c.SuggestionsMinimumDistance = 2 // cobra's own for unknown commands
	c.RunE = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return c.Help()
		}
		msg := "unknown command \"" + args[0] + "\" for \"" + c.CommandPath() + "\""
		if suggestions := c.SuggestionsFor(args[0]); len(suggestions) > 0 {
			msg += "; did you mean " + strings.Join(suggestions, " or ") + "?"
		}
		return usageError{errorString(msg)}
	}
}

// errorString is an error that is its message.
type errorString string

func (e errorString) Error() string { return string(e) }

// noArgs is the Args of a command that takes no arguments.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{errorString(c.CommandPath() + " takes no arguments, got " + strings.Join(args, " "))}
	}
	return nil
}

// busURLFor is the bus the command c talks to: --nats when given, else
// defaultBusURL.
func busURLFor(c *cobra.Command) string {
	if f := c.Flag("nats"); f != nil && f.Changed {
		return f.Value.String()
	}
	return defaultBusURL()
}

// defaultBusURL is the bus a command talks to when --nats is not given:
// $TOOLBUS_NATS, else the context's (--context, $TOOLBUS_CONTEXT, or the
// selected one, which `toolbus up` writes), else where `toolbus up`
// listens unless told otherwise.
func defaultBusURL() string {
	if u := os.Getenv("TOOLBUS_NATS"); u != "" {
		return u
	}
	if c, err := contexts().Current(); err == nil {
		return c.URL
	}
	return bus.DefaultURL
}

// useContext makes the context --context names the command's: it must
// exist. It is passed on as $TOOLBUS_CONTEXT, which the connection reads
// for the identity to connect with (cli.Connect).
func useContext(cmd *cobra.Command) error {
	f := cmd.Flag("context")
	if f == nil || !f.Changed || cmd.Name() == "up" {
		// up writes the context it names, which need not exist yet.
		return nil
	}
	if _, err := contexts().Load(f.Value.String()); err != nil {
		return usageError{fmt.Errorf("--context: %w", err)}
	}
	return os.Setenv(buscontext.Env, f.Value.String())
}

// goFlags registers on fs the flags define declares on a Go flag set:
// the flags toolbus shares with the daemons (internal/cli,
// internal/busnode) are declared so.
func goFlags[T any](fs *pflag.FlagSet, define func(*flag.FlagSet) T) T {
	g := flag.NewFlagSet("", flag.ContinueOnError)
	v := define(g)
	g.VisitAll(func(f *flag.Flag) {
		pf := pflag.PFlagFromGoFlag(f)
		if t := pf.Value.Type(); t != strings.ToLower(t) {
			// A Go flag.Value's type is named after its Go type
			// (cli.Bytes): the help shows it lower case, as the rest.
			pf.Value = typeNamed{pf.Value, strings.ToLower(t)}
		}
		if pf.DefValue == (time.Duration(0)).String() {
			// pflag knows a zero default, which help leaves out, by
			// its own types; a Go flag's zero duration it knows as 0.
			pf.DefValue = "0"
		}
		fs.AddFlag(pf)
	})
	return v
}

// typeNamed is a flag value shown in help with the type name.
type typeNamed struct {
	pflag.Value
	name string
}

func (t typeNamed) Type() string { return t.name }
