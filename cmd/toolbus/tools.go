package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry"
)

func runTools(args []string) error {
	if len(args) == 0 {
		return usageError{fmt.Errorf("tools: want list, get, enable, disable or discover")}
	}
	switch args[0] {
	case "list", "ls":
		return toolsList(args[1:])
	case "get":
		return toolsGet(args[1:])
	case "enable":
		return toolsToggle(args[1:], true)
	case "disable":
		return toolsToggle(args[1:], false)
	case "discover":
		return toolsDiscover(args[1:])
	}
	return usageError{fmt.Errorf("tools: unknown sub-command %q (want list, get, enable, disable or discover)", args[0])}
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

func formatFlag(fs *flag.FlagSet) *string {
	return fs.String("format", "", "print declarations for a model API: gemini, openai, anthropic or mcp")
}

func toolsList(args []string) error {
	fs := flag.NewFlagSet("tools list", flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON array of catalogue entries")
	activeOnly := fs.Bool("active", false, "only active tools")
	server := fs.String("server", "", "only the tools of this MCP server")
	format := formatFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var f catalog.Format
	if *format != "" {
		var err error
		if f, err = catalog.ParseFormat(*format); err != nil {
			return usageError{err}
		}
	}
	c, unavailable, err := loadCatalogAndServers(*natsURL)
	if err != nil {
		return err
	}
	var tools []*events.Tool
	for _, t := range c.All() {
		if !t.IsTool() {
			continue // an MCP server's prompts and resources are not tools
		}
		if (*activeOnly || *format != "") && !t.Active {
			continue // declarations are for active tools only
		}
		if *server != "" && (t.Source != events.SourceMCP || t.Server != *server) {
			continue
		}
		tools = append(tools, t)
	}
	switch {
	case *format != "" && *server == "":
		return writeJSON(os.Stdout, json.RawMessage(c.Declarations(f)))
	case *format != "":
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Name
		}
		return writeJSON(os.Stdout, json.RawMessage(c.DeclarationsFor(f, names)))
	case *asJSON:
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

func toolsGet(args []string) error {
	fs := flag.NewFlagSet("tools get", flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	asJSON := fs.Bool("json", false, "print the catalogue entry as JSON")
	format := formatFlag(fs)
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{fmt.Errorf("tools get takes one tool name")}
	}
	c, err := loadCatalog(*natsURL)
	if err != nil {
		return err
	}
	t, ok := c.Lookup(rest[0])
	if !ok {
		return fmt.Errorf("no tool named %q", rest[0])
	}
	switch {
	case *format != "":
		f, err := catalog.ParseFormat(*format)
		if err != nil {
			return usageError{err}
		}
		return writeJSON(os.Stdout, json.RawMessage(catalog.NewEntry(t).Declaration(f)))
	case *asJSON:
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

func toolsToggle(args []string, enable bool) error {
	verb := map[bool]string{true: "enable", false: "disable"}[enable]
	fs := flag.NewFlagSet("tools "+verb, flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	var kinds, categories multiFlag
	fs.Var(&kinds, "kind", verb+" every tool of this kind (repeatable)")
	fs.Var(&categories, "category", verb+" every tool of this category (repeatable)")
	reset := fs.Bool("reset", false, "first drop every run-time toggle")
	names, err := parse(fs, args)
	if err != nil {
		return err
	}
	req := &events.ToggleRequest{Enable: enable, Names: names, Categories: categories, Reset: *reset}
	for _, k := range kinds {
		req.Kinds = append(req.Kinds, events.Kind(k))
	}
	log, _ := cli.Logger("warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cli.Connect(ctx, *natsURL, "toolbus-tools", log)
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

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
