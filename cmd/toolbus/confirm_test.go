package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/vt"
	"github.com/creack/pty"
	"github.com/toolbus/toolbus/internal/testkit"
)

// screenTimeout bounds every wait for the screen; it is generous, since
// the machine may be busy, and never part of what is asserted.
const screenTimeout = 30 * time.Second

// approverTerm is `toolbus confirm` running in an 80×24 pseudo-terminal,
// its output read back through a terminal emulator, as a person sees it.
type approverTerm struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	emu  *vt.Emulator
	done chan error
	// exited is closed when the program has ended and its output is read.
	exited chan struct{}
}

func startApprover(t *testing.T, url string, env []string, args ...string) *approverTerm {
	t.Helper()
	cmd := exec.Command(bin("toolbus"), append([]string{"confirm", "--nats", url}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"TERM=xterm-256color", "TOOLBUS_NATS="}, env...)...)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	a := &approverTerm{t: t, cmd: cmd, pty: f, emu: vt.NewEmulator(80, 24), done: make(chan error, 1),
		exited: make(chan struct{})}
	copied := make(chan struct{})
	go func() { // the program's output, into the emulator
		defer close(copied)
		buf := make([]byte, 32*1024)
		for {
			n, err := f.Read(buf)
			if n > 0 {
				a.mu.Lock()
				a.emu.Write(buf[:n])
				a.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	// The emulator's replies to the program's queries, back. The loop
	// stops only when told: vt.Emulator's Close is not safe while a Read
	// is in progress, so the cleanup wakes the Read with a query of its
	// own, waits for the loop to end, and only then closes.
	var stopping atomic.Bool
	replied := make(chan struct{})
	go func() {
		defer close(replied)
		buf := make([]byte, 1024)
		for {
			n, err := a.emu.Read(buf)
			if err != nil || stopping.Load() {
				return
			}
			f.Write(buf[:n]) // a program gone no longer reads; keep draining
		}
	}()
	go func() {
		err := cmd.Wait()
		<-copied
		close(a.exited)
		a.done <- err
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-a.done
		}
		<-copied
		stopping.Store(true)
		a.mu.Lock()
		a.emu.Write([]byte("\x1b[6n")) // a cursor position query: its reply wakes the Read
		a.mu.Unlock()
		<-replied
		a.emu.Close()
		f.Close()
	})
	return a
}

// screen is the emulator's screen as text.
func (a *approverTerm) screen() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.emu.String()
}

// waitScreen waits until the screen holds every one of want.
func (a *approverTerm) waitScreen(want ...string) string {
	a.t.Helper()
	var s, missing string
	if !testkit.Poll(screenTimeout, func() bool {
		s = a.screen()
		missing = ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return true
		}
		select {
		case <-a.exited:
			a.t.Fatalf("toolbus confirm ended; the screen does not show %q; it shows:\n%s", missing, a.screen())
		default:
		}
		return false
	}) {
		a.t.Fatalf("the screen does not show %q; it shows:\n%s", missing, s)
	}
	return s
}

// waitGone waits until the screen no longer holds s.
func (a *approverTerm) waitGone(s string) {
	a.t.Helper()
	if !testkit.Poll(screenTimeout, func() bool { return !strings.Contains(a.screen(), s) }) {
		a.t.Fatalf("the screen still shows %q:\n%s", s, a.screen())
	}
}

// press types keys as a person would.
func (a *approverTerm) press(keys string) {
	a.t.Helper()
	if _, err := a.pty.WriteString(keys); err != nil {
		a.t.Fatal(err)
	}
}

// quit presses q and waits for a clean exit.
func (a *approverTerm) quit() {
	a.t.Helper()
	a.press("q")
	a.waitExit("q")
}

// waitExit waits for a clean exit that gives the terminal back: the
// main screen, not the view's alternate one.
func (a *approverTerm) waitExit(how string) {
	a.t.Helper()
	select {
	case err := <-a.done:
		if err != nil {
			a.t.Fatalf("toolbus confirm exited with %v on %s; screen:\n%s", err, how, a.screen())
		}
	case <-time.After(screenTimeout):
		a.t.Fatalf("toolbus confirm did not end on %s; screen:\n%s", how, a.screen())
	}
	a.mu.Lock()
	alt := a.emu.IsAltScreen()
	a.mu.Unlock()
	if alt {
		a.t.Errorf("the terminal is left on the alternate screen after %s", how)
	}
}

// resize changes the terminal's size, as a person resizing the window.
func (a *approverTerm) resize(cols, rows int) {
	a.t.Helper()
	a.mu.Lock()
	a.emu.Resize(cols, rows)
	a.mu.Unlock()
	if err := pty.Setsize(a.pty, &pty.Winsize{Rows: uint16(rows), Cols: uint16(cols)}); err != nil {
		a.t.Fatal(err)
	}
}

// pendingCall is `toolbus call` running in the background, as an agent
// waiting for its approval.
type pendingCall struct {
	stdout, stderr bytes.Buffer
	done           chan int
}

func startCall(t *testing.T, url, tool, args string, extra ...string) *pendingCall {
	t.Helper()
	return startCallWith(t, agentOf(url), url, tool, args, extra...)
}

// agents holds, by bus URL, the agent's seed of each `toolbus up` of
// upForConfirm: its calls are the agent's, and the developer approves
// them (nobody may approve a call they made).
var agents sync.Map

// agentOf is the environment that makes a command the agent of the up at
// url; none for another bus.
func agentOf(url string) []string {
	if seed, ok := agents.Load(url); ok {
		return []string{"TOOLBUS_IDENTITY=" + seed.(string)}
	}
	return nil
}

// startCallWith is startCall with env added to the command's environment.
func startCallWith(t *testing.T, env []string, url, tool, args string, extra ...string) *pendingCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, bin("toolbus"), append([]string{"call", tool, "--args", args, "--nats", url}, extra...)...)
	cmd.Env = append(os.Environ(), env...)
	c := &pendingCall{done: make(chan int, 1)}
	cmd.Stdout, cmd.Stderr = &c.stdout, &c.stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer cancel()
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			c.done <- 0
		case errors.As(err, &ee):
			c.done <- ee.ExitCode()
		default:
			c.done <- -1
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		cancel()
	})
	return c
}

// wait returns the call's exit code.
func (c *pendingCall) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-c.done:
		return code
	case <-time.After(screenTimeout):
		t.Fatal("the call did not return")
	}
	return -1
}

// upForConfirm runs `toolbus up` on a free port and returns its URL and
// workspace; startCall calls it as its agent.
func upForConfirm(t *testing.T) (string, string) {
	t.Helper()
	ws, data := t.TempDir(), t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws)
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	agents.Store(url, filepath.Join(data, "identities", "agent.nk"))
	t.Cleanup(func() { up.stop(t); agents.Delete(url) })
	return url, ws
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestConfirmShowsRequest: a write waiting for approval is on the screen,
// its diff coloured as text, and escape sequences the agent put in the
// content show as text instead of acting on the terminal.
func TestConfirmShowsRequest(t *testing.T) {
	// A toolbus up of its own, on free ports and its own data.
	t.Parallel()
	url, ws := upForConfirm(t)
	a := startApprover(t, url, nil, "--as", "approver:ada")
	a.waitScreen("toolbus confirm", "as approver:ada", "0 pending")
	a.mu.Lock()
	alt := a.emu.IsAltScreen()
	a.mu.Unlock()
	if !alt {
		t.Error("the view does not use the alternate screen, so leaving it cannot be checked")
	}

	content := "hello\n\x1b[2Jcleared?\n\x1b]0;pwned\x07title\n"
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/notes.txt")+`,"content":`+jsonString(content)+`}`)
	screen := a.waitScreen("1 pending", "write_file", "Diff:", "+hello", `+\x1b[2Jcleared?`, `+\x1b]0;pwned\x07title`)
	if !strings.Contains(screen, "Arguments:") && !strings.Contains(screen, "more lines") {
		t.Errorf("neither the arguments nor a note that they are cut:\n%s", screen)
	}
	// Narrower: the view redraws to fit, cutting lines, not wrapping them.
	a.resize(60, 20)
	a.waitScreen("1 pending", strings.Repeat("─", 60)+"\n")
	a.resize(80, 24)
	a.waitScreen("1 pending", strings.Repeat("─", 80)+"\n")
	a.press("\x03") // Ctrl-C
	a.waitExit("Ctrl-C")
	select {
	case code := <-call.done:
		t.Errorf("the call returned (exit %d) with nobody answering: %s", code, call.stderr.String())
	default:
	}
}

// TestConfirmApproveOnce: y approves the write once; the call returns and
// the file is written.
func TestConfirmApproveOnce(t *testing.T) {
	t.Parallel()
	url, ws := upForConfirm(t)
	a := startApprover(t, url, nil, "--as", "approver:ada")
	a.waitScreen("0 pending")
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/notes.txt")+`,"content":"approved\n"}`)
	a.waitScreen("1 pending", "write_file", "+approved")
	a.press("y")
	a.waitScreen("accepted: proceed_once")
	if code := call.wait(t); code != 0 {
		t.Fatalf("the approved call exited %d: %s", code, call.stderr.String())
	}
	if got, err := os.ReadFile(ws + "/notes.txt"); err != nil || string(got) != "approved\n" {
		t.Errorf("the file holds %q (%v), want the approved content", got, err)
	}
	a.waitScreen("0 pending")
	a.press("r")
	a.waitScreen("recent decisions", "write_file", "proceed_once by approver:ada")
	a.press("r")
	a.quit()
}

// TestConfirmAlways: the always key the policy offers for a shell command
// remembers it; the same command then runs without asking, and the
// allowlist shows it.
func TestConfirmAlways(t *testing.T) {
	t.Parallel()
	url, _ := upForConfirm(t)
	a := startApprover(t, url, nil, "--as", "approver:ada")
	a.waitScreen("0 pending")
	call := startCall(t, url, "run_shell_command", `{"command":"ls -la"}`)
	screen := a.waitScreen("1 pending", "run_shell_command", "Command:", "ls -la", "not on the allowlist", "a always:")
	if strings.Contains(screen, "s always:") {
		t.Errorf("a built-in tool is offered an always for its server:\n%s", screen)
	}
	a.press("a")
	a.waitScreen("accepted: proceed_always")
	if code := call.wait(t); code != 0 {
		t.Fatalf("the approved call exited %d: %s", code, call.stderr.String())
	}
	// Nobody answers the second call: it returns only if it was not asked.
	again := startCall(t, url, "run_shell_command", `{"command":"ls -la"}`)
	if code := again.wait(t); code != 0 {
		t.Fatalf("the remembered command exited %d: %s", code, again.stderr.String())
	}
	if s := a.screen(); !strings.Contains(s, "0 pending") {
		t.Errorf("the remembered command was asked about:\n%s", s)
	}
	out, errOut, code := toolbus(t, "allowlist", "list", "--json", "--nats", url)
	if code != 0 || !strings.Contains(out, `"ls"`) || !strings.Contains(out, "approver:ada") {
		t.Errorf("allowlist list: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The table says what the entry covers: ls with any arguments.
	if out, _, code := toolbus(t, "allowlist", "list", "--nats", url); code != 0 || !strings.Contains(out, "COVERS") || !strings.Contains(out, "ls …") {
		t.Errorf("allowlist list as a table: exit %d\n%s", code, out)
	}
	a.quit()
}

// TestConfirmModify: e opens $EDITOR on the arguments (here a script that
// rewrites them); the call runs with what it left.
func TestConfirmModify(t *testing.T) {
	t.Parallel()
	url, ws := upForConfirm(t)
	// The editor leaves the file as it was the first time, breaks the
	// JSON the second, and edits the content the third.
	dir := t.TempDir()
	editor := dir + "/edit.sh"
	script := `#!/bin/sh
n=$(cat "` + dir + `/runs" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "` + dir + `/runs"
case $n in
1) ;;
2) echo '{"file_path": ' > "$1" ;;
*) sed -i 's/first draft/second draft/' "$1" ;;
esac
`
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	a := startApprover(t, url, []string{"VISUAL=", "EDITOR=" + editor}, "--as", "approver:ada")
	a.waitScreen("0 pending")
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/draft.txt")+`,"content":"first draft\n"}`)
	a.waitScreen("1 pending", "+first draft")
	a.press("e")
	a.waitScreen("nothing sent: the arguments are unchanged")
	a.press("e")
	a.waitScreen("nothing sent: the edited arguments are not valid JSON")
	a.waitScreen("1 pending", "+first draft")
	a.press("e")
	a.waitScreen("accepted: modify_with_editor")
	// The modified call is judged again, and an edit is asked about again.
	a.waitScreen("1 pending", "+second draft")
	a.press("y")
	a.waitScreen("accepted: proceed_once")
	if code := call.wait(t); code != 0 {
		t.Fatalf("the modified call exited %d: %s", code, call.stderr.String())
	}
	if got, err := os.ReadFile(ws + "/draft.txt"); err != nil || string(got) != "second draft\n" {
		t.Errorf("the file holds %q (%v), want the edited content", got, err)
	}
	a.quit()
}

// TestConfirmDeny: n, a reason, enter; the caller gets USER_CANCELLED
// with the reason.
func TestConfirmDeny(t *testing.T) {
	t.Parallel()
	url, ws := upForConfirm(t)
	a := startApprover(t, url, nil, "--as", "approver:ada")
	a.waitScreen("0 pending")
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/no.txt")+`,"content":"no\n"}`)
	a.waitScreen("1 pending", "write_file")
	a.press("n")
	a.waitScreen("Deny:", "reason:")
	a.press("not that file, use notes.md\r")
	a.waitScreen("accepted: cancel")
	if code := call.wait(t); code != 4 {
		t.Fatalf("the denied call exited %d, want 4 (denied)", code)
	}
	if errOut := call.stderr.String(); !strings.Contains(errOut, "USER_CANCELLED") || !strings.Contains(errOut, "not that file, use notes.md") {
		t.Errorf("the caller's error %q does not carry USER_CANCELLED and the reason", errOut)
	}
	if _, err := os.Stat(ws + "/no.txt"); err == nil {
		t.Error("the denied write happened")
	}
	a.quit()
}

// TestConfirmTwoApprovers: when one approver answers, the other shows the
// request as answered, by whom and how, and then no longer pending.
func TestConfirmTwoApprovers(t *testing.T) {
	// A toolbus up of its own, on free ports and its own data.
	t.Parallel()
	url, ws := upForConfirm(t)
	ada := startApprover(t, url, nil, "--as", "approver:ada")
	bob := startApprover(t, url, nil, "--as", "approver:bob")
	ada.waitScreen("0 pending")
	bob.waitScreen("0 pending")
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/both.txt")+`,"content":"x\n"}`)
	ada.waitScreen("1 pending", "write_file")
	bob.waitScreen("1 pending", "write_file")
	ada.press("y")
	bob.waitScreen("answered by approver:ada (proceed_once)")
	if code := call.wait(t); code != 0 {
		t.Fatalf("the call exited %d: %s", code, call.stderr.String())
	}
	bob.waitScreen("0 pending")
	bob.waitGone("answered by approver:ada")
	bob.press("y") // nothing is selected any more: nothing is sent
	ada.quit()
	// A signal ends the view as cleanly as q does.
	if err := bob.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	bob.waitExit("SIGTERM")
}

// TestConfirmRefusedApprover: the policy lets nobody approve a call they
// made; the answer is refused, the screen says why, and the call still
// waits.
func TestConfirmRefusedApprover(t *testing.T) {
	// A toolbus up of its own, on free ports and its own data.
	t.Parallel()
	url, ws := upForConfirm(t)
	self := startApprover(t, url, nil, "--as", "agent") // who startCall calls as
	self.waitScreen("0 pending")
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/self.txt")+`,"content":"x\n"}`)
	self.waitScreen("1 pending", "write_file")
	self.press("y")
	self.waitScreen("refused:", "nobody may approve a call they made")
	self.waitScreen("Refused:", "1 pending")
	select {
	case code := <-call.done:
		t.Fatalf("the call returned (exit %d) after a refused answer: %s", code, call.stderr.String())
	default:
	}
	if _, err := os.Stat(ws + "/self.txt"); err == nil {
		t.Error("the write happened on a refused answer")
	}
	self.quit()
}

// TestConfirmJSON: a script reads the request as a JSON line, a line that
// is not an answer gets an error line, an answer gets its ack, and the
// call returns.
func TestConfirmJSON(t *testing.T) {
	t.Parallel()
	url, ws := upForConfirm(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin("toolbus"), "confirm", "--json", "--as", "approver:script", "--nats", url)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	lines := make(chan map[string]any)
	go func() {
		defer close(lines)
		dec := json.NewDecoder(stdout)
		for {
			var m map[string]any
			if dec.Decode(&m) != nil {
				return
			}
			lines <- m
		}
	}()
	// The ack and the answered event come from two sources (the reply,
	// the stream) in either order: lines are kept until asked for.
	var kept []map[string]any
	next := func(event string) map[string]any {
		t.Helper()
		for i, m := range kept {
			if m["event"] == event {
				kept = append(kept[:i], kept[i+1:]...)
				return m
			}
		}
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("confirm --json ended before printing a %q line; stderr: %s", event, stderr.String())
				}
				if m["event"] == event {
					return m
				}
				kept = append(kept, m)
			case <-time.After(screenTimeout):
				t.Fatalf("no %q line", event)
			}
		}
	}

	if ready := next("ready"); ready["approver"] != "approver:script" {
		t.Fatalf("ready line: %v", ready)
	}
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/script.txt")+`,"content":"by a script\n"}`)
	req := next("request")
	id, _ := req["invocationId"].(string)
	to, _ := req["answerTo"].(string)
	inner, _ := req["request"].(map[string]any)
	if id == "" || to == "" || inner["tool"] != "write_file" || !strings.Contains(fmt.Sprint(inner["diff"]), "+by a script") || req["deadline"] == nil {
		t.Fatalf("request line: %v", req)
	}
	io.WriteString(stdin, "this is not JSON\n")
	if e := next("error"); e["line"] != float64(1) || !strings.Contains(fmt.Sprint(e["error"]), "not an answer") {
		t.Errorf("error line: %v", e)
	}
	io.WriteString(stdin, `{"answerTo":"`+to+`","outcome":"proceed_sometimes"}`+"\n")
	if e := next("error"); !strings.Contains(fmt.Sprint(e["error"]), "unknown outcome") {
		t.Errorf("error line for an unknown outcome: %v", e)
	}
	// An answer that names only the invocation id is refused, saying
	// what names a request instead.
	io.WriteString(stdin, `{"invocationId":"`+id+`","outcome":"proceed_once"}`+"\n")
	if e := next("error"); !strings.Contains(fmt.Sprint(e["error"]), "answerTo is empty") || e["invocationId"] != id {
		t.Errorf("error line for an answer without answerTo: %v", e)
	}
	// The answer sent is the help's own example, with the token.
	io.WriteString(stdin, strings.Replace(helpAnswer(t, "proceed_once"), "TOKEN", jsonString(to), 1)+"\n")
	if ack := next("ack"); ack["accepted"] != true || ack["invocationId"] != id {
		t.Errorf("ack line: %v", ack)
	}
	if ans := next("answered"); ans["by"] != "approver:script" || ans["outcome"] != "proceed_once" {
		t.Errorf("answered line: %v", ans)
	}
	if code := call.wait(t); code != 0 {
		t.Fatalf("the call exited %d: %s", code, call.stderr.String())
	}
	if got, _ := os.ReadFile(ws + "/script.txt"); string(got) != "by a script\n" {
		t.Errorf("the file holds %q", got)
	}
	stdin.Close()
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("confirm --json exited with %v at the end of its input; stderr: %s", err, stderr.String())
	}
}

// helpAnswer is the answer line `toolbus confirm --help` shows for
// outcome, failing the test unless every answer line the help shows names
// its request by answerTo.
func helpAnswer(t *testing.T, outcome string) string {
	t.Helper()
	out, errOut, code := toolbus(t, "confirm", "--help")
	if code != 0 {
		t.Fatalf("confirm --help exited %d: %s", code, errOut)
	}
	_, answers, ok := strings.Cut(out, "reads answers")
	if !ok {
		t.Fatalf("the help shows no answers:\n%s", out)
	}
	found := ""
	for line := range strings.Lines(answers) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "{") {
			continue
		}
		if !strings.HasPrefix(line, `{"answerTo":TOKEN,`) {
			t.Errorf("the help shows an answer that does not name its request by answerTo: %s", line)
		}
		if strings.Contains(line, `"outcome":"`+outcome+`"`) {
			found = line
		}
	}
	if found == "" {
		t.Fatalf("the help shows no %s answer:\n%s", outcome, out)
	}
	return found
}
