package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// spoolFiles counts this process's descriptors open on spool files: the
// unnamed files of the temp dir (O_TMPFILE, which /proc names "#INODE")
// and the memory files named after the spool.
func spoolFiles(t *testing.T) int {
	return testkit.OpenFiles(t, tool.SpoolFilePrefix) + testkit.OpenFiles(t, filepath.Join(os.TempDir(), "#"))
}

// TestLargeShellOutputIsSpooled: a command that prints megabytes gives its
// head in LLMContent and the whole llmContent in a spool, stdout, stderr
// and the exit code in Gemini CLI's layout; live output is copied only
// while it is wanted.
func TestLargeShellOutputIsSpooled(t *testing.T) {
	_, tools := newWorkspace(t)
	before := spoolFiles(t)
	calls := 0
	out, err := tools["run_shell_command"].Run(context.Background(), &tool.Call{
		Args: json.RawMessage(`{"command":"head -c 3000000 /dev/zero | tr '\\0' x; echo oops >&2; exit 4"}`),
		// Wants one chunk of each stream, then no more.
		Progress: func(string) bool { calls++; return false },
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls > 2 {
		t.Errorf("progress was called %d times after it asked for no more", calls)
	}
	if out.Whole == nil {
		t.Fatalf("3 MB of output came back in memory (%d bytes of llmContent)", len(out.LLMContent))
	}
	if len(out.LLMContent) > tool.SpoolHead || !strings.HasPrefix(out.LLMContent, "Command: head -c") {
		t.Errorf("llmContent is not the head: %d bytes, %q...", len(out.LLMContent), out.LLMContent[:min(40, len(out.LLMContent))])
	}
	if len(out.ReturnDisplay) > tool.SpoolHead {
		t.Errorf("returnDisplay is %d bytes", len(out.ReturnDisplay))
	}
	whole, err := io.ReadAll(out.Whole.Reader())
	if err != nil {
		t.Fatal(err)
	}
	stdout := string(whole[strings.Index(string(whole), "Stdout: ")+len("Stdout: ") : strings.Index(string(whole), "\nStderr: ")])
	if len(stdout) != 3000000 || strings.Trim(stdout, "x") != "" {
		t.Errorf("the spool holds %d bytes of stdout, want 3000000 x's", len(stdout))
	}
	for _, want := range []string{"\nStderr: oops\n", "\nExit Code: 4\n", "Stdout: xxx"} {
		if !strings.Contains(string(whole), want) {
			t.Errorf("the whole output lacks %q", want)
		}
	}
	out.Whole.Close()
	if n := spoolFiles(t) - before; n != 0 {
		t.Errorf("%d spool files left open", n)
	}
}

// TestShellOutputIsCappedPerCall: stdout and stderr together keep at most
// the call's MaxOutput, and the output says what was not kept.
func TestShellOutputIsCappedPerCall(t *testing.T) {
	_, tools := newWorkspace(t)
	out, err := tools["run_shell_command"].Run(context.Background(), &tool.Call{
		Args:      json.RawMessage(`{"command":"head -c 700000 /dev/zero | tr '\\0' o; head -c 700000 /dev/zero | tr '\\0' e >&2"}`),
		MaxOutput: 1000000,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Whole.Close()
	whole, err := io.ReadAll(out.Whole.Reader())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(whole), "ooooo")*5 + strings.Count(string(whole), "eeeee")*5; n > 1000000 {
		t.Errorf("%d bytes of output kept, the call keeps at most 1000000", n)
	}
	if !strings.Contains(string(whole), "[output truncated: 400000 bytes not kept; a call keeps at most 1000000 bytes of output]") {
		t.Errorf("no note of what was not kept; tail: %q", whole[len(whole)-400:])
	}
}

// TestSpoolsAreReleasedWhenTheCallEnds: a cancelled command, a finished
// one whose output was taken, and background commands read, killed or
// left to Close leave no spool file open.
func TestSpoolsAreReleasedWhenTheCallEnds(t *testing.T) {
	ws, err := NewWorkspace(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	shells := NewShells(ws, unconfined(t))
	tools := map[string]tool.Tool{}
	for _, tl := range Tools(ws, shells) {
		tools[tl.Spec().Name] = tl
	}
	before := spoolFiles(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tools["run_shell_command"].Run(ctx, &tool.Call{Args: json.RawMessage(`{"command":"head -c 2000000 /dev/zero; touch printed; sleep 300"}`)})
		done <- err
	}()
	waitFile(t, filepath.Join(ws.Root(), "printed"))
	if n := spoolFiles(t) - before; n != 1 {
		t.Errorf("%d spool files open while the command runs, want 1", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call returned %v", err)
	}
	if n := spoolFiles(t) - before; n != 0 {
		t.Errorf("%d spool files left open by a cancelled call", n)
	}

	// Background: one read to the end after it exits, one killed, one
	// left running until Close.
	bg := func(line string) string {
		out := run(t, tools["run_shell_command"], `{"command":"`+line+`","run_in_background":true}`)
		return strings.Fields(strings.SplitAfter(out.LLMContent, "shell_id ")[1])[0]
	}
	exited := bg("head -c 1000000 /dev/zero | tr '\\\\0' y")
	killed := bg("head -c 1000000 /dev/zero; sleep 300")
	bg("head -c 1000000 /dev/zero; sleep 300")
	var got strings.Builder
	if !testkit.Poll(30*time.Second, func() bool {
		o := run(t, tools["shell_output"], `{"shell_id":"`+exited+`"}`)
		got.WriteString(o.LLMContent)
		if o.Whole != nil {
			io.Copy(&got, o.Whole.Reader())
			o.Whole.Close()
		}
		return strings.Contains(got.String(), "exited with code 0")
	}) {
		t.Fatalf("the background command never exited: %q", got.String()[:min(300, got.Len())])
	}
	if n := strings.Count(got.String(), "y"); n < 1000000 {
		t.Errorf("read %d y's of the background command, want 1000000", n)
	}
	run(t, tools["kill_shell"], `{"shell_id":"`+killed+`"}`)
	shells.Close()
	if n := spoolFiles(t) - before; n != 0 {
		t.Errorf("%d spool files left open by background commands", n)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	testkit.Eventually(t, path+" appeared", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// TestLargeFileReadIsSpooled: read_file of a file of megabytes gives its
// head in LLMContent and the whole text in a spool, whole or a page of it.
func TestLargeFileReadIsSpooled(t *testing.T) {
	ws, tools := newWorkspace(t)
	line := strings.Repeat("r", 999) + "\n"
	os.WriteFile(filepath.Join(ws.Root(), "big.txt"), []byte(strings.Repeat(line, 3000)), 0o644)
	before := spoolFiles(t)
	for _, tt := range []struct{ args, prefix, display string }{
		{`{"file_path":"big.txt","limit":3000}`, "", "Read 3000 lines from big.txt"},
		{`{"file_path":"big.txt","offset":10,"limit":2000}`, "[File content truncated: showing lines 11-2010 of 3000 total lines. Use offset/limit to read more.]\n", "Read lines 11-2010 of 3000 from big.txt"},
	} {
		out := run(t, tools["read_file"], tt.args)
		if out.Whole == nil {
			t.Fatalf("%s: %d bytes came back in memory", tt.args, len(out.LLMContent))
		}
		whole, err := io.ReadAll(out.Whole.Reader())
		if err != nil {
			t.Fatal(err)
		}
		out.Whole.Close()
		n := 3000
		if tt.prefix != "" {
			n = 2000
		}
		if string(whole) != tt.prefix+strings.Repeat(line, n) {
			t.Errorf("%s: the spool holds %d bytes, want the prefix and %d lines", tt.args, len(whole), n)
		}
		if len(out.LLMContent) != tool.SpoolHead || !strings.HasPrefix(string(whole), out.LLMContent) || out.ReturnDisplay != tt.display {
			t.Errorf("%s: llmContent %d bytes, display %q", tt.args, len(out.LLMContent), out.ReturnDisplay)
		}
	}
	if n := spoolFiles(t) - before; n != 0 {
		t.Errorf("%d spool files left open", n)
	}
}
