package discovery

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// callTool makes the discovered tool name of testdata/call.sh, in a fresh
// workspace, with the executor's environment environ filtered by pass.
func callTool(t *testing.T, name string, environ, pass []string) (*Tool, string) {
	t.Helper()
	dir := t.TempDir()
	if environ == nil {
		environ = os.Environ()
	}
	c, err := NewCaller("sh "+testkit.Testdata(t, "call.sh"), dir, FilterEnv(environ, pass), newStarter(t))
	if err != nil {
		t.Fatal(err)
	}
	return c.NewTool(events.ToolSpec{Name: name, Parameters: json.RawMessage(`{}`)}, "sh discover.sh"), dir
}

// run calls t with args, failing the test if the call has not returned
// after 30 seconds.
func run(t *testing.T, ctx context.Context, tl *Tool, call *tool.Call) (*tool.Output, error) {
	t.Helper()
	type ran struct {
		out *tool.Output
		err error
	}
	done := make(chan ran, 1)
	go func() {
		out, err := tl.Run(ctx, call)
		done <- ran{out, err}
	}()
	select {
	case r := <-done:
		if r.out != nil {
			t.Cleanup(func() { r.out.Whole.Close() })
		}
		return r.out, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the call did not return", tl.Spec().Name)
		return nil, nil
	}
}

func TestCallOutputShapes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ tool, args, want string }{
		{"echo", `{"expression":"1+2","nested":{"a":[1,2]}}`, `{"expression":"1+2","nested":{"a":[1,2]}}`},
		{"empty", `{}`, ""},
		{"lines", `{}`, "one\ntwo\n"},
		{"stdin_size", `{"text":"` + strings.Repeat("x", 100_000) + `"}`, "100011"}, // more than a pipe holds at once
	} {
		t.Run(c.tool, func(t *testing.T) {
			tl, _ := callTool(t, c.tool, nil, nil)
			out, err := run(t, context.Background(), tl, &tool.Call{ID: "c1", Args: json.RawMessage(c.args)})
			if err != nil {
				t.Fatal(err)
			}
			if out.Err != nil || out.LLMContent != c.want || out.ReturnDisplay != c.want || out.Whole != nil {
				t.Errorf("got %+v, want %q", out, c.want)
			}
		})
	}
}

// TestCallFailures: every way a call fails gives seed 000's five lines,
// exactly, as the result and as the error.
func TestCallFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ tool, want string }{
		{"fail", "Stdout: partial\nStderr: boom\nError: (none)\nExit Code: 3\nSignal: (none)"},
		{"warn", "Stdout: ok\nStderr: careful\nError: (none)\nExit Code: 0\nSignal: (none)"},
		{"silent_fail", "Stdout: (empty)\nStderr: (empty)\nError: (none)\nExit Code: 7\nSignal: (none)"},
		{"signal", "Stdout: before\nStderr: (empty)\nError: (none)\nExit Code: (none)\nSignal: SIGKILL"},
		{"no_such_tool", "Stdout: (empty)\nStderr: no tool no_such_tool\nError: (none)\nExit Code: 2\nSignal: (none)"},
	} {
		t.Run(c.tool, func(t *testing.T) {
			tl, _ := callTool(t, c.tool, nil, nil)
			out, err := run(t, context.Background(), tl, &tool.Call{ID: "c1", Args: json.RawMessage(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			checkFailure(t, out, c.want)
		})
	}
}

func checkFailure(t *testing.T, out *tool.Output, want string) {
	t.Helper()
	if out.LLMContent != want || out.ReturnDisplay != want {
		t.Errorf("got\n%s\nwant\n%s", out.LLMContent, want)
	}
	if out.Err == nil || out.Err.Type != events.ErrDiscoveredToolExecution || out.Err.Message != want {
		t.Errorf("error %+v, want %s with the block", out.Err, events.ErrDiscoveredToolExecution)
	}
}

func TestCallSpawnFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, err := NewCaller("no-such-call-command --flag", dir, FilterEnv(os.Environ(), nil), newStarter(t))
	if err != nil {
		t.Fatal(err)
	}
	tl := c.NewTool(events.ToolSpec{Name: "calc"}, "d")
	out, err := run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	checkFailure(t, out, "Stdout: (empty)\nStderr: (empty)\nError: cannot run no-such-call-command: not found in PATH ("+lookEnv(c.env, "PATH")+")\nExit Code: (none)\nSignal: (none)")

	// A file that is there but cannot be run.
	os.WriteFile(filepath.Join(dir, "call"), []byte("#!/no/such/interpreter\n"), 0o755)
	c, _ = NewCaller("./call", dir, FilterEnv(os.Environ(), nil), newStarter(t))
	out, err = run(t, context.Background(), c.NewTool(events.ToolSpec{Name: "calc"}, "d"), &tool.Call{Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	checkFailure(t, out, "Stdout: (empty)\nStderr: (empty)\nError: cannot start "+filepath.Join(dir, "call")+": no such file or directory\nExit Code: (none)\nSignal: (none)")
}

func TestCallArgumentsAndName(t *testing.T) {
	t.Parallel()
	// The name is the last argument, after the command's own words, and
	// the arguments arrive on stdin whatever the command line holds.
	dir := t.TempDir()
	c, err := NewCaller(`sh -c 'printf "%s|" "$@"; cat' call-sh "two words" '$HOME'`, dir, FilterEnv(os.Environ(), nil), newStarter(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(t, context.Background(), c.NewTool(events.ToolSpec{Name: "calc"}, "d"), &tool.Call{Args: json.RawMessage(`{"a":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `two words|$HOME|calc|{"a":1}`; out.LLMContent != want {
		t.Errorf("got %q, want %q", out.LLMContent, want)
	}
}

func TestCallOutputLimitAndProgress(t *testing.T) {
	t.Parallel()
	tl, _ := callTool(t, "big", nil, nil)
	var live strings.Builder
	out, err := run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{}`), MaxOutput: 1000,
		Progress: func(s string) bool { live.WriteString(s); return live.Len() < 100_000 }})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("x", 1000) + "\n[output truncated: 299000 bytes not kept; a call keeps at most 1000 bytes of output]"
	if out.Err != nil || out.LLMContent != want {
		t.Errorf("got %d bytes %q..., err %v", len(out.LLMContent), out.LLMContent[max(0, len(out.LLMContent)-100):], out.Err)
	}
	if live.Len() < 100_000 || live.Len() > 300_000 || strings.Trim(live.String(), "x") != "" {
		t.Errorf("progress got %d bytes", live.Len())
	}

	// Within the default limit, a large output comes whole, in a spool.
	out, err = run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Whole == nil || out.Whole.Size() != 300_000 || len(out.LLMContent) != tool.SpoolHead {
		t.Errorf("got a head of %d bytes, whole %v", len(out.LLMContent), out.Whole)
	}
}

// TestCallCancelEndsEveryProcess: a call that is cancelled ends with every
// process it started: a child, one that left the session (setsid), one
// whose parent exited.
func TestCallCancelEndsEveryProcess(t *testing.T) {
	t.Parallel()
	{
		tl, dir := callTool(t, "hang", nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := tl.Run(ctx, &tool.Call{Args: json.RawMessage(`{}`)})
			done <- err
		}()
		var pids []int
		for _, f := range []string{"child.pid", "setsid.pid", "orphan.pid"} {
			pids = append(pids, testkit.WaitPID(t, filepath.Join(dir, f)))
		}
		for !exists(filepath.Join(dir, "started")) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		select {
		case err := <-done:
			if err != context.Canceled {
				t.Errorf("got %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the call did not return")
		}
		for _, pid := range pids {
			testkit.WaitReaped(t, pid)
		}
	}
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies left: %v", z)
	}
}

// TestCallEndsWhatItLeavesBehind: a call command that exits at once,
// leaving behind a process that left its session, lost its parent,
// ignores SIGTERM and holds stdout open, gives its own result, and that
// process is gone when the call returns.
func TestCallEndsWhatItLeavesBehind(t *testing.T) {
	t.Parallel()
	tl, dir := callTool(t, "leave", nil, nil)
	out, err := run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{}`)})
	if err != nil || out.Err != nil || out.LLMContent != "done" {
		t.Errorf("got %+v, %v", out, err)
	}
	pid := testkit.WaitPID(t, filepath.Join(dir, "left.pid"))
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d, left behind, still runs after the call returned", pid)
	}
	testkit.WaitReaped(t, pid)
}

func TestCallCancelKillsWhatIgnoresTerm(t *testing.T) {
	t.Parallel()
	tl, dir := callTool(t, "ignore_term", nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tl.Run(ctx, &tool.Call{Args: json.RawMessage(`{}`)})
		done <- err
	}()
	pid := testkit.WaitPID(t, filepath.Join(dir, "term.pid"))
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("got %v", err)
	}
	testkit.WaitReaped(t, pid)
}

func TestCallUnreadStdinDoesNotHang(t *testing.T) {
	t.Parallel()
	tl, _ := callTool(t, "noread", nil, nil)
	out, err := run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{"text":"` + strings.Repeat("y", 1<<20) + `"}`)})
	if err != nil || out.Err != nil || out.LLMContent != "" {
		t.Errorf("got %+v, %v", out, err)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestCallMarksUse(t *testing.T) {
	t.Parallel()
	tl, _ := callTool(t, "empty", nil, nil)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tl.caller.now = func() time.Time { return now }
	if _, err := run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if !tl.LastUsed().Equal(now) {
		t.Errorf("last used %v, want %v", tl.LastUsed(), now)
	}
}

func TestDescription(t *testing.T) {
	t.Parallel()
	c, _ := NewCaller("sh call.sh", t.TempDir(), nil, newStarter(t))
	tl := c.NewTool(events.ToolSpec{Name: "calc", Description: "Evaluate an expression.", Kind: events.KindRead, ReadOnly: true}, "sh discover.sh --json")
	spec := tl.Spec()
	want := "Evaluate an expression.\n\nDiscovered by running `sh discover.sh --json` in the project root. " +
		"A call runs `sh call.sh calc` there, with the arguments as JSON on stdin, and returns its stdout. " +
		"If it fails (an exit code other than 0, a signal, or output on stderr), the result is five lines instead: " +
		"`Stdout:`, `Stderr:`, `Error:`, `Exit Code:` and `Signal:`, each `(empty)` or `(none)` when there is nothing to say."
	if spec.Description != want {
		t.Errorf("description:\n%s", spec.Description)
	}
	if spec.Kind != events.KindOther || spec.ReadOnly {
		t.Errorf("kind %q, readOnly %v: want other, not read-only", spec.Kind, spec.ReadOnly)
	}
	if src, server, trust := tl.Origin(); src != events.SourceDiscovered || server != "" || trust {
		t.Errorf("origin %s %q %v", src, server, trust)
	}
}

// TestCallLooksTheCommandUpAgainWhenItIsGone: a call runs the executable
// the last call found without a look-up along PATH, but one that is gone
// or no longer executable is looked up anew, and a call command found
// nowhere fails as before.
func TestCallLooksTheCommandUpAgainWhenItIsGone(t *testing.T) {
	t.Parallel()
	dir, first, second := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{first, second} {
		script := "#!/bin/sh\nprintf '%s ' " + filepath.Base(d) + "\ncat\n"
		if err := os.WriteFile(filepath.Join(d, "call-tool"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pathEnv := first + ":" + second + ":/usr/bin:/bin"
	c, err := NewCaller("call-tool", dir, []string{"PATH=" + pathEnv}, newStarter(t))
	if err != nil {
		t.Fatal(err)
	}
	tl := c.NewTool(events.ToolSpec{Name: "calc"}, "d")
	call := func() *tool.Output {
		t.Helper()
		out, err := run(t, context.Background(), tl, &tool.Call{Args: json.RawMessage(`{"a":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for range 2 {
		if got, want := call().LLMContent, filepath.Base(first)+` {"a":1}`; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	os.Remove(filepath.Join(first, "call-tool"))
	if got, want := call().LLMContent, filepath.Base(second)+` {"a":1}`; got != want {
		t.Errorf("with the first one gone: got %q, want %q", got, want)
	}
	os.Chmod(filepath.Join(second, "call-tool"), 0o644)
	checkFailure(t, call(), "Stdout: (empty)\nStderr: (empty)\nError: cannot run call-tool: not found in PATH ("+pathEnv+")\nExit Code: (none)\nSignal: (none)")
}
