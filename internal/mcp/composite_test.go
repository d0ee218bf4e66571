package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/composite"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/settings"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
	"github.com/toolbus/toolbus/internal/tool"
)

// compositeSettings defines two composites that read two files the
// caller names, then the README: one stops at a step that fails, the
// other goes on.
const compositeSettings = `{
  "toolbus": {"composites": {
    "read_two": {
      "description": "Reads two files, then the README.",
      "parameters": {"type": "object", "properties": {"first": {"type": "string"}, "second": {"type": "string"}}, "required": ["first", "second"]},
      "steps": [
        {"tool": "read_file", "args": {"file_path": "$args.first"}},
        {"tool": "read_file", "args": {"file_path": "$args.second"}},
        {"tool": "read_file", "args": {"file_path": "README.md"}}
      ]
    },
    "read_two_anyway": {
      "description": "Reads two files, then the README, whatever fails.",
      "parameters": {"type": "object", "properties": {"first": {"type": "string"}, "second": {"type": "string"}}, "required": ["first", "second"]},
      "steps": [
        {"tool": "read_file", "args": {"file_path": "$args.first"}},
        {"tool": "read_file", "args": {"file_path": "$args.second"}},
        {"tool": "read_file", "args": {"file_path": "README.md"}}
      ],
      "continueOnError": true
    }
  }}}`

// A composite defined in a settings.json is a tool every agent sees: in
// the catalogue's declarations for Gemini, OpenAI, Anthropic and MCP, and
// in the facade's list. Called through the facade with a path the default
// policy denies in an argument, the step that reads it is judged as a
// call of its own and denied: the composite stops there, or, with
// continueOnError, runs the rest; the key is never read.
func TestCompositeThroughTheFacade(t *testing.T) {
	t.Parallel()
	b := bustest.Start(t, "")
	registrytest.Start(t, b)
	dir := t.TempDir()
	for name, content := range map[string]string{"README.md": "# hello\n", ".ssh/id_rsa": "SECRET-KEY\n"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gemini, err := settings.Parse([]byte(compositeSettings), filepath.Join(dir, ".gemini", "settings.json"), settings.GeminiSettings)
	if err != nil {
		t.Fatal(err)
	}
	node, err := executornode.Start(context.Background(), executornode.Config{Bus: b, Workspace: dir,
		Executor: executor.Config{Identity: events.Identity{ID: "executor@test", Role: "executor"}, Logger: bustest.Quiet()},
		Settings: &settings.Files{Gemini: gemini, Claude: &settings.File{}, MCPConfig: &settings.File{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close(context.Background()) })
	conn := bustest.Connect(t, b)

	cat, err := catalog.Load(context.Background(), conn.JetStream(), bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	entry, ok := cat.GetTool("read_two")
	if !ok || entry.Kind != events.KindComposite || entry.Source != events.SourceComposite {
		t.Fatalf("the catalogue's read_two: %+v", entry)
	}
	for _, f := range []catalog.Format{catalog.Gemini, catalog.OpenAI, catalog.Anthropic, catalog.MCP} {
		var decls []json.RawMessage
		if err := json.Unmarshal(cat.Declarations(f), &decls); err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		found := false
		for _, d := range decls {
			if s := string(d); strings.Contains(s, `"read_two"`) {
				found = true
				if !strings.Contains(s, "Reads two files, then the README.") || !strings.Contains(s, `"second"`) || !strings.Contains(s, `"required"`) {
					t.Errorf("%v: read_two is declared %s", f, s)
				}
			}
		}
		if !found {
			t.Errorf("%v: read_two is not declared", f)
		}
	}

	fac, err := toolmcp.StartFacade(context.Background(), toolmcp.FacadeConfig{Conn: conn.Conn(), JS: conn.JetStream(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fac.Close)
	c, err := mcpclient.NewInProcessClient(fac.Server())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	initialize(t, c, "composer")
	list, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, tl := range list.Tools {
		if tl.Name == "read_two" {
			listed = true
			if _, ok := tl.InputSchema.Properties["second"]; !ok || tl.Description != "Reads two files, then the README." {
				t.Errorf("the facade lists read_two as %+v", tl)
			}
		}
	}
	if !listed {
		t.Fatal("the facade does not list read_two")
	}

	args := `{"first": "README.md", "second": ".ssh/id_rsa"}`
	res := callTool(t, c, "read_two", args)
	got := text(res)
	if !res.IsError || !strings.Contains(got, "stopped at step 1 (read_file): POLICY_DENIED") || !strings.Contains(got, "[step 0: read_file] ok\n# hello") ||
		!strings.Contains(got, "[step 2: read_file] not run") || strings.Contains(got, "SECRET") {
		t.Errorf("read_two: error %v, %s", res.IsError, got)
	}
	res = callTool(t, c, "read_two_anyway", args)
	got = text(res)
	if res.IsError || !strings.Contains(got, "[step 1: read_file] POLICY_DENIED") || !strings.Contains(got, "[step 2: read_file] ok\n# hello") ||
		strings.Contains(got, "SECRET") {
		t.Errorf("read_two_anyway: error %v, %s", res.IsError, got)
	}
	res = callTool(t, c, "read_two", `{"first": "README.md"}`)
	if got := text(res); !res.IsError || !strings.Contains(got, "INVALID_TOOL_PARAMS") && !strings.Contains(got, "second") {
		t.Errorf("read_two without its second argument: error %v, %s", res.IsError, got)
	}
}

// A composite's step the policy asks about is put to the person in
// front of the MCP client, as the step it is (its tool, its arguments),
// and their answer decides that step; their dismissal decides nothing.
func TestACompositeStepIsConfirmedByTheAgentsUser(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	note, err := composite.New(composite.Definition{Name: "note", Description: "Writes a note and reads it back.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"},"text":{"type":"string"}},"required":["name","text"]}`),
		Steps: []composite.Step{{Tool: "write_file", Args: json.RawMessage(`{"file_path":"$args.name","content":"$args.text"}`)},
			{Tool: "read_file", Args: json.RawMessage(`{"file_path":"$args.name"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ff.Executor.Host(context.Background(), executor.Scope{Source: events.SourceComposite}, []tool.Tool{note}); err != nil {
		t.Fatal(err)
	}
	user := &userAtClient{answer: respond(mcp.ElicitationResponseActionAccept, nil)}
	c := ff.connect(t, "composer", mcpclient.WithElicitationHandler(user))
	testkit.EventuallyWithin(t, 10*time.Second, "the facade lists note", func() bool { return slices.Contains(toolNames(t, c), "note") })

	res := callTool(t, c, "note", `{"name":"kept.md","text":"accepted\n"}`)
	if res.IsError || !strings.Contains(text(res), "[step 1: read_file] ok\naccepted") {
		t.Fatalf("an accepted step: %v %s", res.IsError, text(res))
	}
	if shown := user.shown(); len(shown) != 1 || !strings.Contains(shown[0], "Tool: write_file (edit)") || !strings.Contains(shown[0], "+accepted") {
		t.Errorf("the user was shown %q", shown)
	}
	user.answer = respond(mcp.ElicitationResponseActionDecline, map[string]any{"reason": "no"})
	res = callTool(t, c, "note", `{"name":"lost.md","text":"declined\n"}`)
	if !res.IsError || !strings.Contains(text(res), "USER_CANCELLED") || !strings.Contains(text(res), "[step 1: read_file] not run") {
		t.Errorf("a declined step: %v %s", res.IsError, text(res))
	}
	if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "lost.md")); err == nil {
		t.Error("the declined step wrote its file")
	}
	// A dismissed step is no decision: with no approver present, the
	// step is denied, naming where to approve, not refused by the user.
	user.answer = respond(mcp.ElicitationResponseActionCancel, nil)
	res = callTool(t, c, "note", `{"name":"lost.md","text":"dismissed\n"}`)
	if got := text(res); !res.IsError || !strings.Contains(got, "made no decision on it") || !strings.Contains(got, "To approve calls like this one") || strings.Contains(got, "USER_CANCELLED") {
		t.Errorf("a dismissed step: %v %s", res.IsError, got)
	}
	if _, err := os.Stat(filepath.Join(ff.Workspace.Root(), "lost.md")); err == nil {
		t.Error("the dismissed step wrote its file")
	}
}
