package toolbus_test

import (
	"context"
	"encoding/json"
	"go/types"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
	"github.com/toolbus/toolbus/pkg/toolbus"
)

// Where each error the package exports is produced, through a real fleet:
//
//	ErrToolNotFound, ErrInvalidParams, ErrPolicyDenied, ErrPathNotInWorkspace,
//	ErrFileNotFound, ErrFileTooLarge, ErrExecutionFailed, ErrUserCancelled,
//	ErrTimeout, ErrEditNoOccurrence, ErrEditOccurrenceMismatch,
//	ErrInvocationIDReused                                        TestErrorTypes
//	ErrTooManyPending, ErrRateLimited                            TestOneCallerCannotFillTheApproversQueue (internal/approve), TestAFloodingCallerIsRefusedAndNothingOfItKept (internal/executor)
//	ErrRateLimited, ErrConcurrencyLimited                        TestRateLimitsHoldAcrossTheFleetPerAgent, TestConcurrencyLimitRefusesWithoutAQueue (internal/executor)
//	ErrAuditFull                                                 TestTheFleetFailsClosedNearTheCap (internal/executor)
//	ErrConfirmationTimeout                                       TestConfirmationTimeout
//	ErrCancelled                                                 TestCancelFromAnotherClient, TestContextCancelled, TestBatch
//	ErrShellFailed                                               TestShellFailed
//	ErrMCPToolError                                              TestMCPToolError
//	ErrExecutorLost                                              TestExecutorLost
//	ErrNoOutput                                                  TestReadOutput
//	ErrNoExecutor, ErrNoCatalog                                  TestPingAndNoCatalog

// TestEveryErrorTypeIsChecked: allTypes, which checkFailure tells apart,
// holds every ErrorType the package exports, so that a new one is added
// to it (and, by the list above, produced by a test).
func TestEveryErrorTypeIsChecked(t *testing.T) {
	pkg := loadExported(t)
	var exported []string
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if ok && c.Exported() && types.TypeString(c.Type(), nil) == pkgPath+".ErrorType" {
			exported = append(exported, name)
		}
	}
	if len(exported) < 10 {
		t.Fatalf("only %d ErrorType constants found: %v", len(exported), exported)
	}
	checked := map[string]bool{}
	for _, typ := range allTypes {
		checked[string(typ)] = true
	}
	for _, name := range exported {
		c := pkg.Scope().Lookup(name).(*types.Const)
		// The constant's value is its wire string, quoted.
		var value string
		if err := json.Unmarshal([]byte(c.Val().ExactString()), &value); err != nil {
			t.Fatalf("%s = %s: %v", name, c.Val().ExactString(), err)
		}
		if !checked[value] {
			t.Errorf("toolbus.%s (%s) is not in allTypes", name, value)
		}
	}
	if len(allTypes) != len(exported) {
		t.Errorf("allTypes has %d types, the package exports %d", len(allTypes), len(exported))
	}
}

// TestShellFailed: with no bash on the PATH the executor searches, the
// shell tool cannot start the command.
func TestShellFailed(t *testing.T) {
	f := testFleet(t)
	approver(t, f, events.ProceedOnce, "")
	c := connect(t, f)
	t.Setenv("PATH", t.TempDir())
	res, err := c.Invoke(context.Background(), "run_shell_command", map[string]string{"command": "echo hi"})
	checkFailure(t, res, err, toolbus.ErrShellFailed, "could not start bash")
}

// TestMCPToolError: a tool of an MCP server (mcp-go over streamable
// HTTP) that reports isError.
func TestMCPToolError(t *testing.T) {
	f := testFleet(t)
	failing := mcp.NewTool("fails", mcp.WithDescription("always fails"))
	err := f.serveMCP("flaky", mcpserver.ServerTool{Tool: failing, Handler: func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultError("the index is corrupt"), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, f)
	res, err := c.Invoke(context.Background(), "fails", nil)
	checkFailure(t, res, err, toolbus.ErrMCPToolError, "the index is corrupt")
}

// TestExecutorLost: the executor running a call dies (its connection
// closes) without a result. The caller hears no heartbeat for
// invoke.LostAfter, finds no executor that claims the call, and reports
// it lost: the test takes about eight seconds, the client's own waits.
func TestExecutorLost(t *testing.T) {
	f := testFleet(t)
	started := make(chan struct{})
	hang := tool.Func(events.ToolSpec{Name: "hang", Kind: events.KindRead, Description: "blocks until cancelled"},
		func(ctx context.Context, _ *tool.Call) (*tool.Output, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		})
	conn, err := f.hostElsewhere("executor@doomed", hang)
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, f)
	type outcome struct {
		res *toolbus.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Invoke(context.Background(), "hang", nil)
		done <- outcome{res, err}
	}()
	<-started
	conn.Conn().Close() // no result, no heartbeat from now on
	o := <-done
	checkFailure(t, o.res, o.err, toolbus.ErrExecutorLost, "none claims the call")
}

// TestInvokeByExportName: a tool whose name the OpenAI and Anthropic
// formats do not allow (a dot) is declared there under its export name,
// and Invoke, InvokeBatch and ToolNameFor take that name back.
func TestInvokeByExportName(t *testing.T) {
	f := testFleet(t)
	search := mcp.NewTool("notes.search", mcp.WithDescription("searches the notes"), mcp.WithString("query", mcp.Required()))
	err := f.serveMCP("notes", mcpserver.ServerTool{Tool: search, Handler: func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("found: " + req.GetString("query", "")), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, f)
	ctx := context.Background()
	tools, err := c.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(tools, func(t toolbus.Tool) bool { return t.Name == "notes.search" })
	if i < 0 {
		t.Fatalf("notes.search is not listed: %+v", tools)
	}
	export := tools[i].ExportName
	if export == "notes.search" || !strings.HasPrefix(export, "notes_search") {
		t.Fatalf("export name %q", export)
	}
	for _, format := range []toolbus.Format{toolbus.OpenAI, toolbus.Anthropic} {
		t.Run(format.String(), func(t *testing.T) {
			decls, err := c.Declarations(ctx, format)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range decls {
				var decl struct {
					Name     string `json:"name"`
					Function struct {
						Name string `json:"name"`
					} `json:"function"`
				}
				if err := json.Unmarshal(d, &decl); err != nil {
					t.Fatal(err)
				}
				names = append(names, decl.Name+decl.Function.Name)
			}
			if !slices.Contains(names, export) || slices.Contains(names, "notes.search") {
				t.Fatalf("%s is not declared as %s: %v", "notes.search", export, names)
			}
			if name, ok, err := c.ToolNameFor(ctx, export); err != nil || !ok || name != "notes.search" {
				t.Errorf("ToolNameFor(%s) = %q %v %v", export, name, ok, err)
			}
			res, err := c.Invoke(ctx, export, map[string]string{"query": "bus"})
			if err != nil || res.Tool != "notes.search" || res.LLMContent != "found: bus" {
				t.Fatalf("Invoke(%s): %v %+v", export, err, res)
			}
			batch, err := c.InvokeBatch(ctx, []toolbus.Call{{Tool: export, Args: map[string]string{"query": "batch"}}})
			if err != nil || len(batch) != 1 || batch[0].Err() != nil || batch[0].LLMContent != "found: batch" {
				t.Fatalf("InvokeBatch(%s): %v %+v", export, err, batch)
			}
		})
	}
}
