package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/mcp"
)

func newMCPCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "The MCP servers of the fleet, and the fleet as one MCP server",
		Long: `The executors connect to MCP servers (the mcpServers of a settings.json or a
.mcp.json) and offer their tools; 'mcp status' shows how each is doing.
'mcp serve' turns it around: the fleet's tools as one MCP server, for an
agent that speaks MCP.`,
		Example: "  toolbus mcp status\n  toolbus mcp serve --agent claude-code",
	}
	cmd.AddCommand(newMCPStatusCommand(), newMCPServeCommand(), newMCPTokenCommand())
	holdsCommands(cmd)
	return cmd
}

func newMCPStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every MCP server's state, on every executor",
		Long: `Shows the state of every MCP server on every executor that hosts one:
connected, connecting, disconnected or failed, with its tools, transport,
since when, and the next retry or the last error.`,
		Example: "  toolbus mcp status\n  toolbus mcp status --json\n  toolbus mcp status --fail   # in a script: exit 1 when a server is not connected",
		Args:    noArgs,
	}
	asJSON := cmd.Flags().Bool("json", false, "print a JSON array of server states")
	fail := cmd.Flags().Bool("fail", false, "exit 1 when a server is not connected (disabled servers aside)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return printMCPStatus(busURLFor(cmd), *asJSON, *fail) }
	return cmd
}

func printMCPStatus(natsURL string, asJSON, fail bool) error {
	return withBus(natsURL, "toolbus-mcp", func(ctx context.Context, b *bus.Bus) error {
		states, err := mcpStates(ctx, b.JetStream())
		if err != nil {
			return err
		}
		if asJSON {
			if states == nil {
				states = []*events.MCPServerStatus{}
			}
			err = writeJSON(os.Stdout, states)
		} else {
			err = writeMCPTable(os.Stdout, states)
		}
		if err != nil || !fail {
			return err
		}
		return notConnected(states)
	})
}

// notConnected is the error of --fail: the servers that are neither
// connected nor turned off in the settings, by executor; nil when none.
func notConnected(states []*events.MCPServerStatus) error {
	var down []string
	for _, st := range states {
		if st.State != events.MCPConnected && st.State != events.MCPDisabled {
			down = append(down, fmt.Sprintf("%s on %s is %s", st.Server, st.Executor, st.State))
		}
	}
	if len(down) == 0 {
		return nil
	}
	return fmt.Errorf("MCP servers not connected: %s", strings.Join(down, "; "))
}

// mcpStates reads every server's state, of every executor; a malformed
// entry is reported and left out.
func mcpStates(ctx context.Context, js jetstream.JetStream) ([]*events.MCPServerStatus, error) {
	states, malformed, err := mcp.ReadStatus(ctx, js)
	for _, m := range malformed {
		fmt.Fprintf(os.Stderr, "toolbus: ignoring a malformed %v\n", m)
	}
	return states, err
}

func writeMCPTable(w io.Writer, states []*events.MCPServerStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tTOOLS\tTRANSPORT\tEXECUTOR\tSINCE\tDETAIL")
	for _, st := range states {
		// What is short and changes first, then the error, which may be
		// long and is cut.
		var detail []string
		if st.NextAttempt != nil {
			detail = append(detail, fmt.Sprintf("retry in %s", time.Until(*st.NextAttempt).Round(time.Second)))
		}
		if st.Restarts > 0 {
			detail = append(detail, fmt.Sprintf("%d restarts", st.Restarts))
		}
		if st.Error != "" {
			detail = append(detail, st.Error)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", st.Server, st.State, st.Tools, st.Transport, st.Executor,
			st.Since.Local().Format(time.TimeOnly), firstLine(strings.Join(detail, "; "), 120))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(states) == 0 {
		fmt.Fprintln(os.Stderr, "(no MCP servers)")
	}
	return nil
}

func newToolsDiscoverCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "Discover tools again: run the discovery commands, or list an MCP server's tools",
		Long: `Without --server, asks every executor with a discovery command
(tools.discoveryCommand) to run it again and prints what each found. With
--server, asks every executor hosting that MCP server to list its tools
again.`,
		Example: "  toolbus tools discover\n  toolbus tools discover --force\n  toolbus tools discover --server github",
		Args:    noArgs,
	}
	fs := cmd.Flags()
	server := fs.String("server", "", "the MCP server whose tools to discover again (default: run every executor's discovery command)")
	force := fs.Bool("force", false, "without --server: run the discovery commands even within their cache TTL")
	asJSON := fs.Bool("json", false, "print the executors' replies as JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *server == "" {
			return commandDiscover(busURLFor(cmd), *force, *asJSON)
		}
		if *force {
			return usageError{errors.New("tools discover: --force is for discovery commands, not with --server")}
		}
		return serverDiscover(busURLFor(cmd), *server, *asJSON)
	}
	return cmd
}

// serverDiscover asks every executor hosting the MCP server to list its
// tools again (seed 000 discoverToolsForServer).
func serverDiscover(natsURL, server string, asJSON bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	log, _ := cli.Logger("warn")
	b, err := cli.Connect(ctx, natsURL, "toolbus-tools", log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	states, err := mcpStates(ctx, b.JetStream())
	if err != nil {
		return err
	}
	var replies []*events.MCPDiscoverReply
	failed := false
	for _, st := range states {
		if st.Server != server {
			continue
		}
		req := &events.MCPDiscoverRequest{Header: events.Header{Sender: cli.Identity("cli")}, Server: server}
		data, err := events.Encode(req)
		if err != nil {
			return err
		}
		reply := &events.MCPDiscoverReply{Server: server}
		msg, err := b.Conn().RequestWithContext(ctx, events.MCPDiscoverSubject(st.Executor), data)
		if err == nil {
			reply, err = events.Decode[events.MCPDiscoverReply](msg.Data)
		}
		if err != nil {
			reply = &events.MCPDiscoverReply{Server: server, Error: err.Error()}
		}
		reply.Sender.ID = st.Executor
		failed = failed || reply.Error != ""
		replies = append(replies, reply)
	}
	if len(replies) == 0 {
		return fmt.Errorf("no executor hosts an MCP server %q (see toolbus mcp status)", server)
	}
	if asJSON {
		if err := writeJSON(os.Stdout, replies); err != nil {
			return err
		}
	} else {
		for _, r := range replies {
			if r.Error != "" {
				fmt.Printf("%s: %s: %s\n", r.Sender.ID, server, r.Error)
				continue
			}
			fmt.Printf("%s: %s: %d tools: %s\n", r.Sender.ID, server, len(r.Tools), strings.Join(r.Tools, ", "))
			for _, w := range r.Warnings {
				fmt.Printf("  warning: %s\n", w)
			}
		}
	}
	if failed {
		return errors.New("discovery failed on some executors")
	}
	return nil
}
