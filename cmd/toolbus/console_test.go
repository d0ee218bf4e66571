package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/events"
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
	stderr testkit.Buffer
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

// waitStderr waits until the command printed s on stderr.
func (b *background) waitStderr(t *testing.T, s string) {
	t.Helper()
	if !testkit.Poll(60*time.Second, func() bool { return strings.Contains(b.stderr.String(), s) }) {
		t.Fatalf("%v did not print %q; stderr:\n%s", b.cmd.Args, s, b.stderr.String())
	}
}

// exitCode waits for the command to end and returns its exit code.
func (b *background) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case err := <-b.done:
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		}
		t.Fatalf("%v: %v", b.cmd.Args, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not end; stderr:\n%s", b.cmd.Args, b.stderr.String())
	}
	return -1
}

// approverPresent asks the bus at url, as the developer of the toolbus up
// whose data is data, whether an approver is present, as an executor
// does before it asks one.
func approverPresent(t *testing.T, url, data string) func() bool {
	t.Helper()
	dev := connectHostile(t, "developer", url, filepath.Join(data, "identities", "developer.nk"))
	subject, _ := micro.ControlSubject(micro.PingVerb, events.ApproverService, "")
	return func() bool {
		_, err := dev.nc.Request(subject, nil, 2*time.Second)
		return err == nil
	}
}

// TestConsoleThroughUp is the "done when", as a person does it:
// toolbus up prints the console's address with its token. While no page
// is open nobody would see a request, and a write from another shell is
// denied at once, saying where to approve. With the page open, a write
// waits and says so; the page shows it with its diff; a click approves
// it; the file is written and the call returns. Ctrl-C gives a waiting
// call up, and a --timeout says it was the caller's. With the page
// closed, a write is denied at once again.
func TestConsoleThroughUp(t *testing.T) {
	ws, data := t.TempDir(), t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "127.0.0.1:0")
	nats := busURL(t, up.waitLine(t, "bus:"))
	page := consoleURL(t, up.waitLine(t, "console:"))
	base, _, _ := strings.Cut(page, "#")
	up.waitLine(t, "Press Ctrl-C to stop.")
	present := approverPresent(t, nats, data)

	// The console listens, no page is open: denied at once, long before
	// the confirmation deadline (5 minutes; --timeout bounds the test),
	// with the console's address and toolbus confirm to approve by.
	deniedAtOnce := func(when string) {
		t.Helper()
		_, errOut, code := toolbus(t, "call", "write_file", "--args", `{"file_path":"denied.txt","content":"x"}`, "--nats", nats, "--timeout", "2m")
		if code != 4 || !strings.Contains(errOut, "POLICY_DENIED") || !strings.Contains(errOut, "no approver is connected") ||
			!strings.Contains(errOut, base) || !strings.Contains(errOut, "toolbus confirm") {
			t.Errorf("%s: exit %d, stderr %q; want POLICY_DENIED at once, saying where to approve", when, code, errOut)
		}
	}
	deniedAtOnce("no page open")

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
	// Live: the page holds its stream open, and the console is present.
	run(chromedp.WaitVisible(chromedp.CSS(`#conn.up`)))
	if !present() {
		t.Fatal("a page is open, and no approver is present")
	}

	call := startBackground(t, "call", "write_file", "--args", `{"file_path":"hello.txt","content":"hello from the agent\n"}`, "--nats", nats)
	call.waitStderr(t, "waiting for approval of write_file")
	if errOut := call.stderr.String(); !strings.Contains(errOut, "left; to approve it, open the console at "+base) {
		t.Errorf("the waiting line: %q", errOut)
	}
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
	if code := call.exitCode(t); code != 0 {
		t.Fatalf("the approved call: exit %d; %s", code, call.stderr.String())
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
	if code := shell.exitCode(t); code != 0 {
		t.Fatalf("the call approved always: exit %d; %s", code, shell.stderr.String())
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

	// Ctrl-C gives a waiting call up: the caller says so and exits 130,
	// and the request leaves the page.
	interrupted := startBackground(t, "call", "write_file", "--args", `{"file_path":"never.txt","content":"x"}`, "--nats", nats)
	interrupted.waitStderr(t, "waiting for approval of write_file")
	run(chromedp.WaitVisible(chromedp.CSS(`article.request .allow-once`)))
	if err := interrupted.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := interrupted.exitCode(t); code != 130 || !strings.Contains(interrupted.stderr.String(), "toolbus: cancelled by you") {
		t.Errorf("Ctrl-C: exit %d, stderr %q; want 130, cancelled by you", code, interrupted.stderr.String())
	}
	run(chromedp.WaitNotPresent(chromedp.CSS(`article.request .allow-once`)))

	// The caller's --timeout ends the wait first: the waiting line says
	// so, and the failure names the caller's deadline.
	timedOut := startBackground(t, "call", "write_file", "--args", `{"file_path":"never.txt","content":"x"}`, "--nats", nats, "--timeout", "1s")
	if code := timedOut.exitCode(t); code != 124 || !strings.Contains(timedOut.stderr.String(), "(your --timeout ends the wait first)") ||
		!strings.Contains(timedOut.stderr.String(), "TIMEOUT: the caller's --timeout of 1s passed") {
		t.Errorf("--timeout: exit %d, stderr %q", code, timedOut.stderr.String())
	}
	if _, err := os.Stat(filepath.Join(ws, "never.txt")); err == nil {
		t.Error("a call given up was written")
	}

	// The page closes: after the console's grace for a reload, nobody is
	// there, and a write is denied at once again.
	run(chromedp.Navigate("about:blank"))
	if !testkit.Poll(60*time.Second, func() bool { return !present() }) {
		t.Fatal("the page is closed, and the console is still present")
	}
	deniedAtOnce("the page closed")
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
