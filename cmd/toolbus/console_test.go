package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/browser"
)

// consoleURL is the address a console line prints.
func consoleURL(t *testing.T, line string) string {
	t.Helper()
	i := strings.Index(line, "http://")
	if i < 0 || !strings.Contains(line, "#token=") {
		t.Fatalf("no console address with a token in %q", line)
	}
	return strings.TrimSpace(line[i:])
}

// background runs a short command without waiting; it is killed if still
// running when the test ends.
type background struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

func startBackground(t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{cmd: exec.Command(bin("toolbus"), args...), done: make(chan error, 1)}
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

// TestConsoleThroughUp is the "done when", as a person does it:
// toolbus up prints the console's address with its token; a write from
// another shell waits; the page shows it with its diff; a click approves
// it; the file is written and the call returns.
func TestConsoleThroughUp(t *testing.T) {
	ws := t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--console", "127.0.0.1:0")
	nats := busURL(t, up.waitLine(t, "bus:"))
	page := consoleURL(t, up.waitLine(t, "console:"))
	up.waitLine(t, "Press Ctrl-C to stop.")

	call := startBackground(t, "call", "write_file", "--args", `{"file_path":"hello.txt","content":"hello from the agent\n"}`, "--nats", nats)

	ctx := browser.New(t)
	run := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(c, steps...); err != nil {
			t.Fatalf("browser: %v", err)
		}
	}
	run(chromedp.Navigate(page))
	run(chromedp.WaitVisible(chromedp.CSS(`article.request .allow-once`)))
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	diff, err := chromedp.Run(c, chromedp.Evaluate[string](`document.querySelector("article.request .diff").textContent`))
	cancel()
	if err != nil || !strings.Contains(diff, "+hello from the agent") {
		t.Errorf("the diff shown: %q (%v)", diff, err)
	}
	select {
	case err := <-call.done:
		t.Fatalf("the call ended before it was approved: %v; %s", err, call.stderr.String())
	default:
	}
	run(chromedp.Click(chromedp.CSS(`article.request .allow-once`)))
	select {
	case err := <-call.done:
		if err != nil {
			t.Fatalf("the approved call: %v; %s", err, call.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the approved call did not return")
	}
	if data, err := os.ReadFile(filepath.Join(ws, "hello.txt")); string(data) != "hello from the agent\n" {
		t.Errorf("hello.txt is %q (%v)", data, err)
	}

	// "Always" remembers the command; the console lists it, and a click
	// revokes it: the console's approver may not write the allowlist,
	// and asks an executor to.
	shell := startBackground(t, "call", "run_shell_command", "--args", `{"command":"ls -la"}`, "--nats", nats)
	run(chromedp.WaitVisible(chromedp.CSS(`article.request .always-btn`)))
	run(chromedp.Click(chromedp.CSS(`article.request .always-btn`)))
	select {
	case err := <-shell.done:
		if err != nil {
			t.Fatalf("the call approved always: %v; %s", err, shell.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the call approved always did not return")
	}
	run(chromedp.WaitVisible(chromedp.CSS(`#allowlist button.revoke`)))
	run(chromedp.Click(chromedp.CSS(`#allowlist button.revoke`)))
	if !testkit.Poll(30*time.Second, func() bool {
		out, _, code := toolbus(t, "allowlist", "list", "--json", "--nats", nats)
		return code == 0 && strings.TrimSpace(out) == "[]"
	}) {
		out, errOut, _ := toolbus(t, "allowlist", "list", "--json", "--nats", nats)
		t.Errorf("after the console's revoke, the allowlist: %s %s", out, errOut)
	}
	up.stop(t)
}

// TestConsoleCommand: toolbus console serves a fleet's bus with a token
// from the environment; a short token is refused with a clear error.
func TestConsoleCommand(t *testing.T) {
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", t.TempDir(), "--console", "off")
	nats := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")

	_, errOut, code := toolbus(t, "console", "--nats", nats, "--listen", "127.0.0.1:0", "--token", "short")
	if code != 1 || !strings.Contains(errOut, "at least 16") {
		t.Errorf("a short token: exit %d, stderr %q", code, errOut)
	}

	const token = "a-token-from-the-environment"
	t.Setenv("TOOLBUS_CONSOLE_TOKEN", token)
	cons := startDaemon(t, "toolbus", "console", "--nats", nats, "--listen", "127.0.0.1:0", "--as", "approver:grace")
	page := consoleURL(t, cons.waitLine(t, "console:"))
	if !strings.HasSuffix(page, "#token="+token) {
		t.Errorf("the console's address %s does not carry the configured token", page)
	}
	cons.waitLine(t, "Press Ctrl-C to stop.")
	base, _, _ := strings.Cut(page, "#")
	for _, auth := range []string{"", "Bearer " + token} {
		req, _ := http.NewRequest("GET", base+"api/state", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusUnauthorized
		if auth != "" {
			want = http.StatusOK
		}
		if resp.StatusCode != want || (want == http.StatusOK && !strings.Contains(string(body), `"approver":"approver:grace"`)) {
			t.Errorf("GET state with %q: status %d, body %s", auth, resp.StatusCode, body)
		}
	}
	cons.stop(t)
	up.stop(t)
}
