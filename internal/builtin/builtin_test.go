package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/toolbus/toolbus/internal/proctree"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

func newWorkspace(t *testing.T) (*Workspace, map[string]tool.Tool) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"README.md":          "# demo\nline two\nline three\n",
		"src/main.go":        "package main\n\nfunc main() { println(\"hello\") }\n",
		"src/util/util.go":   "package util\n// util holds helpers\n",
		"docs/guide.txt":     "hello guide\n",
		"node_modules/x.js":  "hello from deps\n",
		".git/config":        "[core]\n",
		"notes/empty.go.txt": "",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := NewWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	shells := NewShells(ws, unconfined(t))
	t.Cleanup(shells.Close)
	tools := map[string]tool.Tool{}
	for _, tl := range Tools(ws, shells) {
		tools[tl.Spec().Name] = tl
	}
	return ws, tools
}

func run(t *testing.T, tl tool.Tool, args string) *tool.Output {
	t.Helper()
	out, err := tl.Run(context.Background(), &tool.Call{ID: "t", Args: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("%s %s: %v", tl.Spec().Name, args, err)
	}
	return out
}

// linksOut makes a directory outside ws holding a file "secret", and two
// links in ws that lead to them: "escape" to the directory, "secret-link"
// to the file. It returns the directory.
func linksOut(t *testing.T, ws *Workspace) string {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	os.Symlink(outside, filepath.Join(ws.Root(), "escape"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws.Root(), "secret-link"))
	return outside
}

func TestWorkspaceConfinement(t *testing.T) {
	ws, _ := newWorkspace(t)
	linksOut(t, ws)
	os.Symlink(filepath.Join(ws.Root(), "src"), filepath.Join(ws.Root(), "inner"))
	tests := []struct {
		path string
		ok   bool
	}{
		{"README.md", true},
		{"src/../README.md", true},
		{ws.Root() + "/src/main.go", true},
		{"new/dir/file.txt", true}, // does not exist yet
		{"inner/main.go", true},    // a link that stays inside
		{"../outside", false},
		{"src/../../x", false},
		{"/etc/passwd", false},
		{"escape/secret", false},       // through a linked directory
		{"secret-link", false},         // a linked file
		{"escape/new/file.txt", false}, // creating through a link
		{"", false},
	}
	for _, tt := range tests {
		_, err := ws.Resolve(tt.path)
		if (err == nil) != tt.ok {
			t.Errorf("Resolve(%q): err=%v, want ok=%v", tt.path, err, tt.ok)
		}
		if !tt.ok && tt.path != "" && !errors.Is(err, ErrOutsideWorkspace) {
			t.Errorf("Resolve(%q): %v does not say it is outside the workspace", tt.path, err)
		}
	}
}

// TestFileToolsStayInside runs the file tools at links that lead out of
// the workspace: os.Root refuses them when the file is opened.
func TestFileToolsStayInside(t *testing.T) {
	ws, tools := newWorkspace(t)
	outside := linksOut(t, ws)
	tests := []struct{ tool, args string }{
		{"read_file", `{"file_path":"escape/secret"}`},
		{"read_file", `{"file_path":"secret-link"}`},
		{"write_file", `{"file_path":"escape/planted","content":"x"}`},
		{"write_file", `{"file_path":"escape/deep/planted","content":"x"}`},
		{"replace", `{"file_path":"secret-link","old_string":"s","new_string":"t"}`},
		{"list_directory", `{"path":"escape"}`},
		{"read_many_files", `{"paths":["secret-link"]}`},
	}
	for _, tt := range tests {
		out := run(t, tools[tt.tool], tt.args)
		if out.Err == nil || out.Err.Type != events.ErrPathNotInWorkspace {
			t.Errorf("%s %s: %+v", tt.tool, tt.args, out)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Errorf("something was written outside the workspace: %v", entries)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "secret")); string(data) != "s" {
		t.Errorf("the file outside was changed: %q", data)
	}
	// Searches do not follow links out either.
	if out := run(t, tools["search_file_content"], `{"pattern":"s"}`); strings.Contains(out.LLMContent, "secret") {
		t.Errorf("search read outside the workspace:\n%s", out.LLMContent)
	}
}

func TestFileTools(t *testing.T) {
	ws, tools := newWorkspace(t)
	tests := []struct {
		tool, args string
		errType    events.ErrorType
		says       string
	}{
		{"read_file", `{"file_path":"README.md"}`, "", "line two"},
		{"read_file", `{"file_path":"README.md","offset":1,"limit":1}`, "", "showing lines 2-2 of 3"},
		{"read_file", `{"file_path":"nope.txt"}`, events.ErrFileNotFound, "File not found"},
		{"read_file", `{"file_path":"../x"}`, events.ErrPathNotInWorkspace, "outside the workspace"},
		{"write_file", `{"file_path":"out/new.txt","content":"abc abc"}`, "", "Created out/new.txt (7 bytes)"},
		{"replace", `{"file_path":"out/new.txt","old_string":"abc","new_string":"x"}`, events.ErrEditOccurrenceMismatch, "expected 1 occurrence(s)"},
		{"replace", `{"file_path":"out/new.txt","old_string":"abc","new_string":"x","expected_replacements":2}`, "", "Replaced 2"},
		{"replace", `{"file_path":"out/new.txt","old_string":"zzz","new_string":"x"}`, events.ErrEditNoOccurrence, "could not find"},
		{"replace", `{"file_path":"created.txt","old_string":"","new_string":"fresh"}`, "", "Created created.txt"},
		{"list_directory", `{"path":"."}`, "", "[DIR] src"},
		{"list_directory", `{"path":"src","ignore":["*.go"]}`, "", "[DIR] util"},
		{"glob", `{"pattern":"**/*.go"}`, "", "src/util/util.go"},
		{"glob", `{"pattern":"*.md"}`, "", "README.md"},
		{"search_file_content", `{"pattern":"hello"}`, "", "File: docs/guide.txt"},
		{"search_file_content", `{"pattern":"hello","include":"*.go"}`, "", "L3: func main()"},
		{"search_file_content", `{"pattern":"("}`, events.ErrInvalidParams, "not a valid regular expression"},
		{"read_many_files", `{"paths":["src"],"exclude":["**/util/**"]}`, "", "--- src/main.go ---"},
	}
	for _, tt := range tests {
		out := run(t, tools[tt.tool], tt.args)
		gotType := events.ErrorType("")
		if out.Err != nil {
			gotType = out.Err.Type
		}
		if gotType != tt.errType || !strings.Contains(out.LLMContent+out.ReturnDisplay, tt.says) {
			t.Errorf("%s %s: error %q, output %q; want error %q saying %q", tt.tool, tt.args, gotType, out.LLMContent, tt.errType, tt.says)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(ws.Root(), "out/new.txt")); string(data) != "x x" {
		t.Errorf("after replace: %q", data)
	}
	// Searches skip .git and node_modules.
	out := run(t, tools["search_file_content"], `{"pattern":"hello|core"}`)
	if strings.Contains(out.LLMContent, "node_modules") || strings.Contains(out.LLMContent, ".git") {
		t.Errorf("search entered a skipped directory:\n%s", out.LLMContent)
	}
	if only := run(t, tools["read_many_files"], `{"paths":["src"],"exclude":["**/util/**"]}`); strings.Contains(only.LLMContent, "util.go") {
		t.Errorf("exclude ignored:\n%s", only.LLMContent)
	}
}

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"**/*.go", "main.go", true},
		{"**/*.go", "a/b/c.go", true},
		{"src/**", "src/a/b", true},
		{"src/*.go", "src/a/b.go", false},
		{"*.{md,txt}", "x.txt", true},
		{"**/util/**", "src/util/util.go", true},
		{"docs/*", "docs", false},
	}
	for _, tt := range tests {
		if got := matchGlob(tt.pattern, tt.path); got != tt.want {
			t.Errorf("matchGlob(%q, %q) = %v", tt.pattern, tt.path, got)
		}
	}
}

func TestShellRunsAndReports(t *testing.T) {
	_, tools := newWorkspace(t)
	out := run(t, tools["run_shell_command"], `{"command":"echo out; echo err >&2; exit 3","directory":"src"}`)
	for _, want := range []string{"Stdout: out", "Stderr: err", "Exit Code: 3", "Directory: src"} {
		if !strings.Contains(out.LLMContent, want) {
			t.Errorf("output lacks %q:\n%s", want, out.LLMContent)
		}
	}
	// The status is a value too, for a caller that is not a model; a
	// signal's is a shell's, 128 + its number.
	for command, want := range map[string]int{"exit 3": 3, "true": 0, "kill -KILL $$": 128 + 9} {
		out := run(t, tools["run_shell_command"], `{"command":"`+command+`"}`)
		if out.ExitCode == nil || *out.ExitCode != want || out.Err != nil {
			t.Errorf("%s: exit code %v, error %v; want %d and no error", command, out.ExitCode, out.Err, want)
		}
	}
	if out := run(t, tools["run_shell_command"], `{"command":"pwd","directory":"../.."}`); out.Err == nil || out.Err.Type != events.ErrPathNotInWorkspace {
		t.Errorf("directory outside the workspace: %+v", out)
	}
	var chunks []string
	tl := tools["run_shell_command"]
	if _, err := tl.Run(context.Background(), &tool.Call{Args: json.RawMessage(`{"command":"echo one; echo two"}`), Progress: func(s string) bool { chunks = append(chunks, s); return true }}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(chunks, "") != "one\ntwo\n" {
		t.Errorf("progress got %q", chunks)
	}
}

// TestShellCancelKillsTheWholeTree starts a command whose child outlives
// bash itself, cancels the call, and checks that no process is left.
func TestShellCancelKillsTheWholeTree(t *testing.T) {
	ws, tools := newWorkspace(t)
	pidFile := filepath.Join(ws.Root(), "child.pid")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tools["run_shell_command"].Run(ctx, &tool.Call{Args: json.RawMessage(`{"command":"sleep 300 & echo $! > child.pid; sleep 300"}`)})
		done <- err
	}()
	pid := testkit.WaitPID(t, pidFile)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled call returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not end after cancel")
	}
	testkit.WaitGone(t, pid)
}

func TestBackgroundShell(t *testing.T) {
	ws, tools := newWorkspace(t)
	out := run(t, tools["run_shell_command"], `{"command":"echo started; sleep 300 & echo $! > bg.pid; wait","run_in_background":true}`)
	id := strings.Fields(strings.SplitAfter(out.LLMContent, "shell_id ")[1])[0]
	pid := testkit.WaitPID(t, filepath.Join(ws.Root(), "bg.pid"))
	var o *tool.Output
	if !testkit.Poll(10*time.Second, func() bool {
		o = run(t, tools["shell_output"], `{"shell_id":"`+id+`"}`)
		return strings.Contains(o.LLMContent, "started")
	}) {
		t.Fatalf("no output: %s", o.LLMContent)
	}
	if !strings.Contains(o.LLMContent, "running") {
		t.Errorf("status: %s", o.LLMContent)
	}
	if o := run(t, tools["kill_shell"], `{"shell_id":"`+id+`"}`); !strings.Contains(o.LLMContent, "Killed shell") {
		t.Errorf("kill_shell: %s", o.LLMContent)
	}
	testkit.WaitGone(t, pid)
	if o := run(t, tools["shell_output"], `{"shell_id":"`+id+`"}`); o.Err == nil {
		t.Error("a killed shell is still known")
	}
}

// TestToolsAskAboutFilesTheyPick: search_file_content and read_many_files
// show every file they would read to call.Refused (which judges where
// links lead them: the executor's tests hold that), skip what it refuses
// and say so, and read nothing when it cannot judge.
func TestToolsAskAboutFilesTheyPick(t *testing.T) {
	ws, tools := newWorkspace(t)
	readme := filepath.Join(ws.Root(), "README.md")
	var shown []string
	refuseReadme := func(paths []string) (map[string]bool, error) {
		shown = append(shown, paths...)
		return map[string]bool{readme: true}, nil
	}
	for _, c := range []struct{ tool, args string }{
		{"search_file_content", `{"pattern":"line t.o"}`},
		{"read_many_files", `{"paths":["*"]}`},
		{"read_many_files", `{"paths":["README.md"]}`},
	} {
		shown = nil
		out, err := tools[c.tool].Run(context.Background(), &tool.Call{ID: "t", Args: json.RawMessage(c.args), Refused: refuseReadme})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.LLMContent, "line two") || !strings.Contains(out.LLMContent, "skipped: the policy does not allow") {
			t.Errorf("%s %s:\n%s", c.tool, c.args, out.LLMContent)
		}
		if !slices.Contains(shown, readme) {
			t.Errorf("%s %s: the policy was shown %v", c.tool, c.args, shown)
		}
	}
	cannot := func([]string) (map[string]bool, error) { return nil, errors.New("the policy is broken") }
	out, err := tools["search_file_content"].Run(context.Background(), &tool.Call{ID: "t", Args: json.RawMessage(`{"pattern":"hello"}`), Refused: cannot})
	if err != nil || out.Err == nil || out.Err.Type != events.ErrPolicyDenied || strings.Contains(out.LLMContent, "hello guide") {
		t.Errorf("a policy that cannot judge: %+v %v", out, err)
	}
}

// unconfined is a starter for the tests of the tools' own behaviour,
// unconfined on purpose: shell_sandbox_linux_test.go and the executor
// node's tests hold the confinement. It is closed when tb ends.
func unconfined(tb testing.TB) *proctree.Starter {
	s := proctree.Unconfined()
	tb.Cleanup(s.Close)
	return s
}
