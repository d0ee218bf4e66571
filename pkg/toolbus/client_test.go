package toolbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
	"github.com/toolbus/toolbus/pkg/toolbus"
)

// The NATS libraries leave a goroutine behind now and then
// (testkit.NATSLeaks); any other is a leak.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.NATSLeaks()...) }

// testFleet starts a fleet for the length of the test.
func testFleet(t *testing.T, configure ...func(*executor.Config)) *fleet {
	t.Helper()
	f, err := startFleet(configure...)
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("stop fleet: %v", err)
		}
	})
	return f
}

func approver(t *testing.T, f *fleet, outcome events.Outcome, message string) *autoApprover {
	t.Helper()
	a, err := f.approveAll(outcome, message)
	if err != nil {
		t.Fatalf("start approver: %v", err)
	}
	return a
}

func connect(t *testing.T, f *fleet, opts ...toolbus.Option) *toolbus.Client {
	t.Helper()
	c, err := toolbus.Connect(context.Background(), f.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// allTypes are the sentinels a failure must match exactly one of.
var allTypes = []toolbus.ErrorType{
	toolbus.ErrToolNotFound, toolbus.ErrInvalidParams, toolbus.ErrPolicyDenied, toolbus.ErrUserCancelled,
	toolbus.ErrConfirmationTimeout, toolbus.ErrExecutionFailed, toolbus.ErrTimeout, toolbus.ErrCancelled,
	toolbus.ErrExecutorLost, toolbus.ErrFileNotFound, toolbus.ErrFileTooLarge, toolbus.ErrPathNotInWorkspace,
	toolbus.ErrEditNoOccurrence, toolbus.ErrEditOccurrenceMismatch, toolbus.ErrShellFailed, toolbus.ErrMCPToolError,
	toolbus.ErrInvocationIDReused, toolbus.ErrTooManyPending, toolbus.ErrRateLimited, toolbus.ErrConcurrencyLimited,
	toolbus.ErrAuditFull,
}

// checkFailure checks that a failed call gave both a Result and its
// *ToolError, matching want and no other sentinel, and that the text
// for the model says says.
func checkFailure(t *testing.T, res *toolbus.Result, err error, want toolbus.ErrorType, says string) {
	t.Helper()
	if res == nil {
		t.Fatalf("no result; err %v", err)
	}
	var te *toolbus.ToolError
	if !errors.As(err, &te) || te != res.Error {
		t.Fatalf("err is %v (%T), want the result's *ToolError %v", err, err, res.Error)
	}
	for _, typ := range allTypes {
		if got := errors.Is(err, typ); got != (typ == want) {
			t.Errorf("errors.Is(err, %s) = %v for a %s failure: %q", typ, got, te.Type, res.LLMContent)
		}
	}
	if !strings.Contains(res.LLMContent, says) {
		t.Errorf("LLMContent %q does not say %q", res.LLMContent, says)
	}
}

func TestErrorTypes(t *testing.T) {
	f := testFleet(t, func(c *executor.Config) {
		c.ToolTimeouts = map[string]time.Duration{"run_shell_command": 300 * time.Millisecond}
		c.Tools = append(c.Tools, tool.Func(events.ToolSpec{Name: "breaks", Kind: events.KindRead, Description: "fails to run"},
			func(context.Context, *tool.Call) (*tool.Output, error) { return nil, errors.New("the tool broke") }))
	})
	c := connect(t, f)
	ctx := context.Background()
	// Sparse: its size is past what the tools read whole, its blocks none.
	if h, err := os.Create(filepath.Join(f.Workspace, "huge.bin")); err != nil {
		t.Fatal(err)
	} else if err := errors.Join(h.Truncate(21<<20), h.Close()); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tool, args string
		want             toolbus.ErrorType
		says             string
	}{
		{"unknown tool", "read_fiel", `{}`, toolbus.ErrToolNotFound, "read_file"},
		{"invalid params", "read_file", `{"file_path":7}`, toolbus.ErrInvalidParams, "file_path"},
		{"denied", "run_shell_command", `{"command":"ls && rm -rf /"}`, toolbus.ErrPolicyDenied, "recursive removal of /"},
		{"outside the workspace", "read_file", `{"file_path":"../../x"}`, toolbus.ErrPathNotInWorkspace, "outside the workspace"},
		{"missing file", "read_file", `{"file_path":"nothing-here.txt"}`, toolbus.ErrFileNotFound, "nothing-here.txt"},
		{"file too large", "read_file", `{"file_path":"huge.bin"}`, toolbus.ErrFileTooLarge, "larger than the 20 MB"},
		{"execution failed", "breaks", `{}`, toolbus.ErrExecutionFailed, "the tool broke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Invoke(ctx, tt.tool, []byte(tt.args))
			checkFailure(t, res, err, tt.want, tt.says)
		})
	}

	// The rest need a person: one who refuses, then one who approves.
	refuse := approver(t, f, events.Cancel, "not that file")
	res, err := c.Invoke(ctx, "write_file", map[string]string{"file_path": "notes.md", "content": "x"})
	checkFailure(t, res, err, toolbus.ErrUserCancelled, "not that file")
	refuse.stop()

	approver(t, f, events.ProceedOnce, "")
	res, err = c.Invoke(ctx, "run_shell_command", map[string]string{"command": "sleep 300"})
	checkFailure(t, res, err, toolbus.ErrTimeout, "")
	res, err = c.Invoke(ctx, "replace", map[string]string{"file_path": "README.md", "old_string": "absent", "new_string": "x"})
	checkFailure(t, res, err, toolbus.ErrEditNoOccurrence, "could not find old_string")
	res, err = c.Invoke(ctx, "replace", map[string]any{"file_path": "README.md", "old_string": "hello", "new_string": "x", "expected_replacements": 2})
	checkFailure(t, res, err, toolbus.ErrEditOccurrenceMismatch, "expected 2 occurrence(s) of old_string in README.md, found 1")
	// An id names one call: the same id again is refused, not run.
	if _, err := c.Invoke(ctx, "read_file", map[string]string{"file_path": "README.md"}, toolbus.WithInvocationID("once")); err != nil {
		t.Fatal(err)
	}
	res, err = c.Invoke(ctx, "read_file", map[string]string{"file_path": "README.md"}, toolbus.WithInvocationID("once"))
	checkFailure(t, res, err, toolbus.ErrInvocationIDReused, "an id names one call")
	// The caller's own deadline: the call is stopped and says TIMEOUT.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	res, err = c.Invoke(short, "run_shell_command", map[string]string{"command": "sleep 300"}, toolbus.WithTimeout(time.Minute))
	checkFailure(t, res, err, toolbus.ErrTimeout, "deadline")
}

func TestConfirmationTimeout(t *testing.T) {
	f := testFleet(t, func(c *executor.Config) { c.ConfirmTimeout = 300 * time.Millisecond })
	silent := approver(t, f, "", "")
	c := connect(t, f)
	res, err := c.Invoke(context.Background(), "write_file", map[string]string{"file_path": "notes.md", "content": "x"})
	checkFailure(t, res, err, toolbus.ErrConfirmationTimeout, "")
	if id := <-silent.asked; id != res.InvocationID {
		t.Errorf("the approver was asked about %s, the call was %s", id, res.InvocationID)
	}
}

func TestSuccessHasNoError(t *testing.T) {
	f := testFleet(t)
	c := connect(t, f, toolbus.WithIdentity(toolbus.Identity{ID: "agent:t", Session: "s1", User: "ada"}), toolbus.WithName("t"))
	res, err := c.Invoke(context.Background(), "Read", map[string]string{"file_path": "README.md"}) // an alias
	if err != nil || res.Error != nil || res.Err() != nil {
		t.Fatalf("got %v %+v", err, res)
	}
	if res.Tool != "read_file" || res.LLMContent != "# hello\n" || res.Policy == nil || res.Policy.Verdict != "ALLOW" {
		t.Errorf("got %+v", res)
	}
}

func TestBadArguments(t *testing.T) {
	f := testFleet(t)
	c := connect(t, f)
	for _, args := range []any{[]byte(`[1]`), json.RawMessage(`"x"`), []byte(`{`), 42, make(chan int)} {
		res, err := c.Invoke(context.Background(), "read_file", args)
		if res != nil || !errors.Is(err, toolbus.ErrInvalidParams) {
			t.Errorf("args %v: got %+v %v, want no result and ErrInvalidParams", args, res, err)
		}
	}
}

func TestBatch(t *testing.T) {
	f := testFleet(t)
	c := connect(t, f)
	res, err := c.InvokeBatch(context.Background(), []toolbus.Call{
		{Tool: "read_file", Args: map[string]string{"file_path": "README.md"}},
		{Tool: "read_file", Args: map[string]string{"file_path": "/etc/shadow"}},
		{Tool: "nope"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results, want 3", len(res))
	}
	if res[0].Error != nil || res[0].LLMContent != "# hello\n" {
		t.Errorf("call 0: %+v", res[0])
	}
	if !errors.Is(res[1].Err(), toolbus.ErrPolicyDenied) {
		t.Errorf("call 1: %v", res[1].Err())
	}
	if !errors.Is(res[2].Err(), toolbus.ErrToolNotFound) {
		t.Errorf("call 2: %v", res[2].Err())
	}

	// Aborting on error: what follows the failure is cancelled.
	res, err = c.InvokeBatch(context.Background(), []toolbus.Call{
		{Tool: "read_file", Args: map[string]string{"file_path": "/etc/shadow"}},
		{Tool: "write_file", Args: map[string]string{"file_path": "x", "content": "y"}},
	}, toolbus.AbortOnError())
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0].Err(), toolbus.ErrPolicyDenied) || !errors.Is(res[1].Err(), toolbus.ErrCancelled) {
		t.Errorf("abort on error: %v, %v", res[0].Err(), res[1].Err())
	}

	if _, err := c.InvokeBatch(context.Background(), []toolbus.Call{{Tool: "read_file", Args: []byte("[]")}}); err == nil {
		t.Error("a batch with bad arguments was sent")
	}
}

func TestProgress(t *testing.T) {
	f := testFleet(t)
	approver(t, f, events.ProceedOnce, "")
	c := connect(t, f)
	var chunks []string
	res, err := c.Invoke(context.Background(), "run_shell_command", map[string]string{"command": "echo one; sleep 0.2; echo two"},
		toolbus.WithProgress(func(s string) { chunks = append(chunks, s) }))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(chunks, ""); got != "one\ntwo\n" {
		t.Errorf("progress %q, want %q", got, "one\ntwo\n")
	}
	if !strings.Contains(res.LLMContent, "two") {
		t.Errorf("result %q", res.LLMContent)
	}
}

// TestCancelFromAnotherClient cancels a running call by the id its caller
// chose, from a second client, as another process would.
func TestCancelFromAnotherClient(t *testing.T) {
	f := testFleet(t)
	approver(t, f, events.ProceedOnce, "")
	caller, other := connect(t, f), connect(t, f)
	started := make(chan struct{})
	var once sync.Once
	type outcome struct {
		res *toolbus.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := caller.Invoke(context.Background(), "run_shell_command", map[string]string{"command": "echo up; sleep 300"},
			toolbus.WithInvocationID("cancel-me"), toolbus.WithProgress(func(string) { once.Do(func() { close(started) }) }))
		done <- outcome{res, err}
	}()
	<-started
	if err := other.Cancel(context.Background(), "cancel-me", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	o := <-done
	checkFailure(t, o.res, o.err, toolbus.ErrCancelled, "changed my mind")
	if o.res.InvocationID != "cancel-me" {
		t.Errorf("invocation id %q", o.res.InvocationID)
	}
	if err := other.Cancel(context.Background(), "", "x"); err == nil {
		t.Error("a cancel without an id was sent")
	}
}

func TestContextCancelled(t *testing.T) {
	f := testFleet(t)
	approver(t, f, events.ProceedOnce, "")
	c := connect(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := c.Invoke(ctx, "run_shell_command", map[string]string{"command": "echo up; sleep 300"},
		toolbus.WithProgress(func(string) { cancel() }))
	checkFailure(t, res, err, toolbus.ErrCancelled, "")
}

func TestReadOutput(t *testing.T) {
	f := testFleet(t, func(c *executor.Config) { c.MaxContent = 1000 })
	approver(t, f, events.ProceedOnce, "")
	c := connect(t, f)
	ctx := context.Background()
	// 200000 lines, about 1.3 MB: more than one message holds.
	res, err := c.Invoke(ctx, "run_shell_command", map[string]string{"command": "seq 1 200000"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.OutputRef == "" || len(res.LLMContent) > 2000 {
		t.Fatalf("not truncated: truncated=%v ref=%q %d bytes", res.Truncated, res.OutputRef, len(res.LLMContent))
	}
	var b strings.Builder
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	seq := b.String()
	for _, name := range []string{res.InvocationID, res.OutputRef} {
		r, err := c.ReadOutput(ctx, name)
		if err != nil {
			t.Fatalf("ReadOutput(%q): %v", name, err)
		}
		whole, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		// The shell tool wraps the command's output in its own lines.
		if !strings.Contains(string(whole), seq) {
			t.Errorf("ReadOutput(%q): %d bytes without the whole of seq's output", name, len(whole))
		}
	}
	if _, err := c.ReadOutput(ctx, "no-such-call"); !errors.Is(err, toolbus.ErrNoOutput) {
		t.Errorf("unknown output: %v, want ErrNoOutput", err)
	}
}

func TestToolsAndDeclarations(t *testing.T) {
	f := testFleet(t)
	c := connect(t, f)
	ctx := context.Background()
	tools, err := c.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]toolbus.Tool{}
	for _, tl := range tools {
		byName[tl.Name] = tl
	}
	if rf, ok := byName["read_file"]; !ok || rf.Kind != "read" || rf.Source != "builtin" || len(rf.Parameters) == 0 {
		t.Errorf("read_file: %+v", rf)
	}
	for _, format := range []toolbus.Format{toolbus.Gemini, toolbus.OpenAI, toolbus.Anthropic, toolbus.MCP} {
		decls, err := c.Declarations(ctx, format)
		if err != nil {
			t.Fatal(err)
		}
		if len(decls) != len(tools) {
			t.Errorf("%s: %d declarations for %d tools", format, len(decls), len(tools))
		}
	}
	if _, err := c.Declarations(ctx, toolbus.Format(99)); err == nil {
		t.Error("an unknown format gave declarations")
	}
	if n, ok, err := c.ToolNameFor(ctx, "Read"); err != nil || !ok || n != "read_file" {
		t.Errorf("ToolNameFor(Read) = %q %v %v", n, ok, err)
	}
	if _, ok, err := c.ToolNameFor(ctx, "no_such_tool"); err != nil || ok {
		t.Errorf("ToolNameFor(no_such_tool) = %v %v", ok, err)
	}
}

func TestPingAndNoCatalog(t *testing.T) {
	f := testFleet(t)
	c := connect(t, f)
	if err := c.Ping(context.Background()); err != nil {
		t.Errorf("ping: %v", err)
	}
	// A bare bus: no registry, no executor.
	bare, err := startBareBus()
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	b := connectURL(t, bare.URL)
	if err := b.Ping(context.Background()); !errors.Is(err, toolbus.ErrNoExecutor) {
		t.Errorf("ping a bare bus: %v, want ErrNoExecutor", err)
	}
	if _, err := b.Tools(context.Background()); !errors.Is(err, toolbus.ErrNoCatalog) {
		t.Errorf("tools of a bare bus: %v, want ErrNoCatalog", err)
	}
}

func connectURL(t *testing.T, url string) *toolbus.Client {
	t.Helper()
	c, err := toolbus.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
