package mcp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// crashOnceEnv gives the stdio test server the tools that crash it.
const crashOnceEnv = "TOOLBUS_MCP_TEST_CRASH_ONCE"

// addCrashOnce adds crash_once, a read (readOnlyHint), and
// crash_once_write, a tool of kind other: each appends a line to the file
// its marker argument names, and the process exits mid-call the first
// time the file is written; after that, the call is answered.
func addCrashOnce(s *server.MCPServer) {
	run := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		marker := req.GetString("marker", "")
		before, _ := os.ReadFile(marker)
		f, err := os.OpenFile(marker, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		fmt.Fprintln(f, os.Getpid())
		f.Close()
		if len(before) == 0 {
			os.Exit(3) // the server crashes with the call in flight
		}
		return mcp.NewToolResultText(fmt.Sprintf("answered by %d", os.Getpid())), nil
	}
	s.AddTool(mcp.NewTool("crash_once", mcp.WithString("marker", mcp.Required()), mcp.WithReadOnlyHintAnnotation(true)), run)
	s.AddTool(mcp.NewTool("crash_once_write", mcp.WithString("marker", mcp.Required())), run)
}

// TestAnIdempotentCallIsRetriedAfterItsServerRestarts: a read whose MCP
// server crashes mid-call is run again, once, by its executor, when the
// server is back, as attempt 2 of its id; a call of a tool that is not
// idempotent fails and is not run again.
func TestAnIdempotentCallIsRetriedAfterItsServerRestarts(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := startFleetWith(t, parse(t, fmt.Sprintf(`{"mcpServers": {"local": {"command": %q, "env": {%q: "1", %q: "1"}, "trust": true}}}`,
		exe, serveStdioEnv, crashOnceEnv)), bustest.Quiet(), 50*time.Millisecond)
	f.waitState(t, "local", events.MCPConnected)
	f.waitTool(t, "crash_once")
	f.waitTool(t, "crash_once_write")
	dir := t.TempDir()
	runs := func(marker string) int {
		data, _ := os.ReadFile(marker)
		return strings.Count(string(data), "\n")
	}

	read := filepath.Join(dir, "read")
	res := f.call(t, "crash_once", fmt.Sprintf(`{"marker":%q}`, read), nil)
	if res.Error != nil || !strings.HasPrefix(res.LLMContent, "answered by") || res.Attempt != 2 {
		t.Fatalf("the read: %s %q attempt %d, want the restarted server's answer to attempt 2", errTypeOf(res), res.LLMContent, res.Attempt)
	}
	if n := runs(read); n != 2 {
		t.Errorf("the read ran %d times, want 2", n)
	}
	r := recordOf(t, f, res.InvocationID)
	if got := fmt.Sprint(attemptOutcomes(r)); got != "[1:EXECUTION_FAILED 2:OK]" || r.Outcome != audit.OutcomeOK || r.Attempt != 2 {
		t.Errorf("the read's record: attempts %s, outcome %s of attempt %d; want the failed first and the retry's OK", got, r.Outcome, r.Attempt)
	}

	write := filepath.Join(dir, "write")
	res = f.call(t, "crash_once_write", fmt.Sprintf(`{"marker":%q}`, write), nil)
	if errTypeOf(res) != events.ErrExecutionFailed || res.Attempt != 0 || !strings.Contains(res.LLMContent, "went away") {
		t.Fatalf("the write: %s %q attempt %d, want its failure, not retried", errTypeOf(res), res.LLMContent, res.Attempt)
	}
	// The server comes back; the write is still run once.
	f.waitState(t, "local", events.MCPConnected)
	if n := runs(write); n != 1 {
		t.Errorf("the write ran %d times, want 1", n)
	}
	if r := recordOf(t, f, res.InvocationID); len(r.Attempts) != 0 {
		t.Errorf("the write's record holds attempts %v, want none", attemptOutcomes(r))
	}
}

func errTypeOf(r *events.Result) events.ErrorType {
	if r.Error == nil {
		return ""
	}
	return r.Error.Type
}

// recordOf is the audit's record of call id, once it has ended.
func recordOf(t *testing.T, f *fleet, id string) *audit.Record {
	t.Helper()
	var r *audit.Record
	testkit.Eventually(t, "the call's record ends", func() bool {
		recs, _, err := audit.Read(context.Background(), f.js, audit.Query{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 {
			return false
		}
		r = recs[0]
		return r.Outcome != audit.OutcomePending
	})
	return r
}

func attemptOutcomes(r *audit.Record) []string {
	var out []string
	for _, a := range r.Attempts {
		out = append(out, fmt.Sprintf("%d:%s", a.Attempt, a.Outcome))
	}
	return out
}
