package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/buscontext"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/human"
)

// contexts are the host's contexts: where `toolbus up` writes its own.
func contexts() buscontext.Store { return buscontext.At(cli.DefaultDataDir()) }

func newContextCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "List, show, add, select and remove the contexts that name a bus",
		Long: `A context names a bus: its URL, the identity to connect with, and what the
'toolbus up' that wrote it serves (its data dir, console and MCP endpoint).
'toolbus up' writes one (named local unless --context says otherwise) and
selects it, so that every later command on this host talks to that bus,
wherever it listens. A command's bus is --nats when given, else
$TOOLBUS_NATS, else the context --context or $TOOLBUS_CONTEXT names, else
the selected context, else ` + bus.DefaultURL + `.

Contexts are kept in ` + "`$XDG_STATE_HOME/toolbus/contexts`" + ` (default
~/.local/state/toolbus/contexts), a directory tool processes cannot read or
write: a context names the seed the developer's commands connect with.`,
		Example: `  toolbus context list
  toolbus context use prod
  toolbus context add prod --nats nats://bus-1:4222,nats://bus-2:4222 --identity ~/fleet/ops.nk
  toolbus --context prod audit list`,
	}
	cmd.AddCommand(newContextListCommand(), newContextShowCommand(), newContextUseCommand(), newContextAddCommand(), newContextRemoveCommand())
	holdsCommands(cmd)
	return cmd
}

func newContextListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the contexts, the selected one marked *",
		Example: "  toolbus context list\n  toolbus context list --json",
		Args:    noArgs,
	}
	asJSON := cmd.Flags().Bool("json", false, "print a JSON array of contexts")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		s := contexts()
		list, err := s.List()
		if err != nil {
			return err
		}
		if *asJSON {
			if list == nil {
				list = []buscontext.Context{}
			}
			return writeJSON(os.Stdout, list)
		}
		if len(list) == 0 {
			fmt.Println("no contexts: `toolbus up` writes one, `toolbus context add` makes one")
			return nil
		}
		selected := s.Selected()
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "\tNAME\tURL\tWRITTEN\tBY")
		for _, c := range list {
			mark := ""
			if c.Name == selected {
				mark = "*"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", mark, c.Name, c.URL, human.Time(c.Written), writer(c))
		}
		return w.Flush()
	}
	return cmd
}

// writer says who wrote c, and whether it still runs.
func writer(c buscontext.Context) string {
	switch {
	case c.PID == 0:
		return "toolbus context add"
	case c.Running():
		return fmt.Sprintf("toolbus up, pid %d, running", c.PID)
	default:
		return fmt.Sprintf("toolbus up, pid %d, stopped", c.PID)
	}
}

func newContextShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "show [NAME]",
		Short:   "Show a context, by default the selected one",
		Example: "  toolbus context show\n  toolbus context show prod --json",
		Args:    cobra.MaximumNArgs(1),
	}
	asJSON := cmd.Flags().Bool("json", false, "print the context as JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		s := contexts()
		var c buscontext.Context
		var err error
		if len(args) == 1 {
			c, err = s.Load(args[0])
		} else {
			c, err = s.Current()
			if errors.Is(err, buscontext.ErrNone) {
				return fmt.Errorf("%w: commands talk to %s ($TOOLBUS_NATS or --nats say otherwise)", err, defaultBusURL())
			}
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(os.Stdout, c)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		row := func(k, v string) {
			if v != "" {
				fmt.Fprintf(w, "%s:\t%s\n", k, v)
			}
		}
		row("name", c.Name)
		row("url", c.URL)
		row("identity", c.Identity)
		row("data", c.Data)
		row("console", c.Console)
		row("mcp", c.MCP)
		row("written", human.Time(c.Written)+" by "+writer(c))
		return w.Flush()
	}
	return cmd
}

func newContextUseCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "use NAME",
		Short:   "Select the context later commands use",
		Example: "  toolbus context use prod",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := contexts().Use(args[0]); err != nil {
				return err
			}
			fmt.Printf("commands now talk to the bus of context %s\n", args[0])
			return nil
		},
	}
}

func newContextAddCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add NAME --nats URL",
		Short: "Make a context for a bus, such as a fleet's",
		Long: `Makes (or replaces) the context NAME for the bus at --nats, connecting with
the seed file --identity names (a member of the fleet, 'toolbus init'), and
selects it unless --select=false.`,
		Example: "  toolbus context add prod --nats nats://bus-1:4222,nats://bus-2:4222 --identity ~/fleet/ops.nk",
		Args:    cobra.ExactArgs(1),
	}
	fs := cmd.Flags()
	identity := fs.String("identity", "", "seed `FILE` of the fleet member to connect as")
	data := fs.String("data", "", "data `DIR` of the bus's toolbus up, for commands that read it (audit verify's key)")
	sel := fs.Bool("select", true, "select the context")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		f := cmd.Flag("nats")
		if f == nil || !f.Changed {
			return usageError{errors.New("context add needs --nats URL, the bus's address")}
		}
		if err := buscontext.CheckName(args[0]); err != nil {
			return usageError{err}
		}
		if *identity != "" {
			if _, err := os.Stat(*identity); err != nil {
				return fmt.Errorf("--identity: %w", err)
			}
		}
		s := contexts()
		if err := s.Save(buscontext.Context{Name: args[0], URL: f.Value.String(), Identity: *identity, Data: *data}); err != nil {
			return err
		}
		if *sel {
			if err := s.Use(args[0]); err != nil {
				return err
			}
			fmt.Printf("context %s made and selected\n", args[0])
			return nil
		}
		fmt.Printf("context %s made\n", args[0])
		return nil
	}
	return cmd
}

func newContextRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Remove a context",
		Example: "  toolbus context rm old",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := contexts().Remove(args[0]); err != nil {
				return err
			}
			fmt.Printf("context %s removed\n", args[0])
			return nil
		},
	}
}

// dataDirOf is the data dir of the `toolbus up` of the bus at url: the
// selected context's, when it names that bus and one; else up's default.
func dataDirOf(url string) string {
	if c, err := contexts().Current(); err == nil && c.URL == url && c.Data != "" {
		return c.Data
	}
	return cli.DefaultDataDir()
}
