package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry"
)

func newToolsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List, inspect, enable, disable and discover the fleet's tools",
		Long: `The catalogue of the fleet's tools, as the registry keeps it: the built-in
tools, the tools of the MCP servers the executors connect to, and the tools
their discovery commands find.`,
		Example: `  toolbus tools list
  toolbus tools get read_file
  toolbus tools disable --category execution`,
	}
	cmd.AddCommand(newToolsListCommand(), newToolsGetCommand(), newToolsToggleCommand(true), newToolsToggleCommand(false), newToolsDiscoverCommand())
	holdsCommands(cmd)
	return cmd
}

// loadCatalog reads the catalogue straight from the bus's bucket; the
// registry is not asked.
func loadCatalog(natsURL string) (*catalog.Catalog, error) {
	log, _ := cli.Logger("warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cli.Connect(ctx, natsURL, "toolbus-tools", log)
	if err != nil {
		return nil, err
	}
	defer cli.Close(b)
	return catalog.Load(ctx, b.JetStream(), log)
}

func formatFlag(fs *pflag.FlagSet) *string {
	return fs.String("format", "", "print declarations for a model API: gemini, openai, anthropic or mcp")
}

func newToolsListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the tools of the catalogue",
		Long: `Lists the tools of the catalogue with their kind, source, MCP server and
whether they are active. With --format, prints the active tools'
declarations for a model API instead, ready to send to the model.`,
		Example: `  toolbus tools list
  toolbus tools list --active --server github
  toolbus tools list --format openai > tools.json`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	asJSON := fs.Bool("json", false, "print a JSON array of catalogue entries")
	activeOnly := fs.Bool("active", false, "only active tools")
	server := fs.String("server", "", "only the tools of this MCP server")
	format := formatFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return toolsList(busURLFor(cmd), *asJSON, *activeOnly, *server, *format)
	}
	return cmd
}

func toolsList(natsURL string, asJSON, activeOnly bool, server, format string) error {
	var f catalog.Format
	if format != "" {
		var err error
		if f, err = catalog.ParseFormat(format); err != nil {
			return usageError{err}
		}
	}
	c, unavailable, err := loadCatalogAndServers(natsURL)
	if err != nil {
		return err
	}
	var tools []*events.Tool
	for _, t := range c.All() {
		if !t.IsTool() {
			continue // an MCP server's prompts and resources are not tools
		}
		if (activeOnly || format != "") && !t.Active {
			continue // declarations are for active tools only
		}
		if server != "" && (t.Source != events.SourceMCP || t.Server != server) {
			continue
		}
		tools = append(tools, t)
	}
	switch {
	case format != "" && server == "":
		return writeJSON(os.Stdout, json.RawMessage(c.Declarations(f)))
	case format != "":
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Name
		}
		return writeJSON(os.Stdout, json.RawMessage(c.DeclarationsFor(f, names)))
	case asJSON:
		if tools == nil {
			tools = []*events.Tool{}
		}
		return writeJSON(os.Stdout, tools)
	}
	return writeTable(os.Stdout, tools, unavailable)
}

// loadCatalogAndServers reads the catalogue and which MCP servers are
// connected on no executor, with why: their tools are listed, and calls
// to them fail at once until the server is back.
func loadCatalogAndServers(natsURL string) (*catalog.Catalog, map[string]string, error) {
	log, _ := cli.Logger("warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cli.Connect(ctx, natsURL, "toolbus-tools", log)
	if err != nil {
		return nil, nil, err
	}
	defer cli.Close(b)
	c, err := catalog.Load(ctx, b.JetStream(), log)
	if err != nil {
		return nil, nil, err
	}
	states, err := mcpStates(ctx, b.JetStream())
	if err != nil {
		return nil, nil, err
	}
	unavailable := make(map[string]string)
	for _, st := range states {
		if st.State == events.MCPConnected {
			unavailable[st.Server] = ""
		} else if why, seen := unavailable[st.Server]; !seen || why != "" {
			unavailable[st.Server] = string(st.State)
		}
	}
	for server, why := range unavailable {
		if why == "" {
			delete(unavailable, server)
		}
	}
	return c, unavailable, nil
}

func writeTable(w io.Writer, tools []*events.Tool, unavailable map[string]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSOURCE\tSERVER\tACTIVE\tDESCRIPTION")
	for _, t := range tools {
		active := "yes"
		if !t.Active {
			active = "no (" + t.InactiveReason + ")"
		} else if why, down := unavailable[t.Server]; down && t.Source == events.SourceMCP {
			active = "unavailable (server " + why + ")"
		}
		server := t.Server
		if server == "" {
			server = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Kind, t.Source, server, active, firstLine(t.Description, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(tools) == 0 {
		fmt.Fprintln(os.Stderr, "(no tools)")
	}
	return nil
}

func firstLine(s string, max int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

func newToolsGetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one tool's catalogue entry",
		Long: `Shows the catalogue entry of the tool NAME (or one of its aliases): where it
comes from, whether it is active, which executors host it, its description
and its parameters' JSON schema.`,
		Example: `  toolbus tools get read_file
  toolbus tools get read_file --format anthropic`,
		ValidArgsFunction: completeToolName,
	}
	fs := cmd.Flags()
	asJSON := fs.Bool("json", false, "print the catalogue entry as JSON")
	format := formatFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{fmt.Errorf("tools get takes one tool name")}
		}
		return toolsGet(busURLFor(cmd), args[0], *asJSON, *format)
	}
	return cmd
}

func toolsGet(natsURL, name string, asJSON bool, format string) error {
	c, err := loadCatalog(natsURL)
	if err != nil {
		return err
	}
	t, ok := c.Lookup(name)
	if !ok {
		return fmt.Errorf("no tool named %q", name)
	}
	switch {
	case format != "":
		f, err := catalog.ParseFormat(format)
		if err != nil {
			return usageError{err}
		}
		return writeJSON(os.Stdout, json.RawMessage(catalog.NewEntry(t).Declaration(f)))
	case asJSON:
		return writeJSON(os.Stdout, t)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%s:\t%s\n", k, v)
		}
	}
	row("name", t.Name)
	row("display name", t.DisplayName)
	row("kind", string(t.Kind))
	row("category", t.Category)
	row("source", string(t.Source))
	row("server", t.Server)
	row("server tool", t.ServerToolName)
	row("active", fmt.Sprint(t.Active))
	row("inactive because", t.InactiveReason)
	row("read only", fmt.Sprint(t.ReadOnly))
	row("aliases", strings.Join(t.Aliases, ", "))
	row("export name", t.ExportName)
	row("hosts", strings.Join(t.Hosts, ", "))
	row("description", t.Description)
	w.Flush()
	var params bytes.Buffer
	json.Indent(&params, t.Parameters, "", "  ")
	fmt.Printf("parameters:\n%s\n", params.String())
	return nil
}

func newToolsToggleCommand(enable bool) *cobra.Command {
	verb := map[bool]string{true: "enable", false: "disable"}[enable]
	cmd := &cobra.Command{
		Use:   verb + " [NAME...]",
		Short: map[bool]string{true: "Enable tools disabled at run time", false: "Disable tools at run time"}[enable],
		Long: "Makes the named tools, and every tool of a --kind or --category, " + verb + "d for the whole fleet " +
			"until the opposite command, a restart of the registry included. Settings files (tools.core, tools.exclude) " +
			"still apply: a tool they leave out stays out.",
		Example:           "  toolbus tools " + verb + " run_shell_command\n  toolbus tools " + verb + " --category execution",
		ValidArgsFunction: completeToolNames,
	}
	fs := cmd.Flags()
	kinds := fs.StringArray("kind", nil, verb+" every tool of this `KIND` (repeatable)")
	categories := fs.StringArray("category", nil, verb+" every tool of this `CATEGORY` (repeatable)")
	reset := fs.Bool("reset", false, "first drop every run-time toggle")
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		return toolsToggle(busURLFor(cmd), &events.ToggleRequest{Enable: enable, Names: names, Categories: *categories, Reset: *reset}, *kinds)
	}
	return cmd
}

func toolsToggle(natsURL string, req *events.ToggleRequest, kinds []string) error {
	for _, k := range kinds {
		req.Kinds = append(req.Kinds, events.Kind(k))
	}
	log, _ := cli.Logger("warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cli.Connect(ctx, natsURL, "toolbus-tools", log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	reply, err := registry.NewClient(b.Conn(), cli.Identity("cli")).Toggle(ctx, req)
	if err != nil {
		return err
	}
	for _, c := range reply.Changes {
		fmt.Printf("%s %s\n", c.Op, c.Name)
	}
	if len(reply.Changes) == 0 {
		fmt.Println("nothing changed")
	}
	if len(reply.Unknown) > 0 {
		return fmt.Errorf("no tool named %s", strings.Join(reply.Unknown, ", "))
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// completeToolName completes a command's one tool name (completeToolNames).
func completeToolName(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeToolNames(cmd, args, toComplete)
}

// completeToolNames completes tool names from the catalogue of the bus
// the command line names. A shell waits for it, so it gives up after two
// seconds, offering none.
func completeToolNames(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	b, err := cli.Connect(ctx, busURLFor(cmd), "toolbus-completion", log)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cli.Close(b)
	c, err := catalog.Load(ctx, b.JetStream(), log)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []cobra.Completion
	for _, t := range c.All() {
		if t.IsTool() && strings.HasPrefix(t.Name, toComplete) {
			names = append(names, cobra.CompletionWithDesc(t.Name, firstLine(t.Description, 60)))
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
