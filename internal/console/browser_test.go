package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/notify"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit/browser"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// tab is a browser tab on the console, with what the page did that a test
// must know about: dialogs (an alert an injected script raised) and the
// responses to the console's API.
type tab struct {
	ctx context.Context

	mu        sync.Mutex
	dialogs   []string
	responses []string // "METHOD? status URL" of /api/ responses
}

// openConsole starts a browser, signs in with the printed address, and
// waits for the page to go live.
func openConsole(t *testing.T, e *env) *tab {
	t.Helper()
	tb := &tab{ctx: browser.New(t)}
	if err := chromedp.Listen(tb.ctx, tb.observe); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tb.ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	tb.do(t, chromedp.Navigate(e.console.URL()))
	tb.waitJS(t, `document.querySelector("#conn.up") !== null`)
	return tb
}

func (tb *tab) observe(ev any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch ev := ev.(type) {
	case *page.EventJavascriptDialogOpening:
		tb.dialogs = append(tb.dialogs, ev.Message)
		// Dismiss it from another goroutine: a listener must not call
		// the browser itself.
		go chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{})
	case *network.EventResponseReceived:
		if strings.Contains(ev.Response.URL, "/api/") {
			tb.responses = append(tb.responses, strconv.FormatInt(ev.Response.Status, 10)+" "+ev.Response.URL+" "+string(ev.Type))
		}
	}
}

func (tb *tab) seen() (dialogs, responses []string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.dialogs...), append([]string(nil), tb.responses...)
}

func (tb *tab) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, wait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// waitJS waits until the expression is truthy in the page.
func (tb *tab) waitJS(t *testing.T, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, wait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](expr, chromedp.WithPollingTimeout(wait))); err != nil {
		t.Fatalf("waiting for %s: %v", expr, err)
	}
}

// putRecord stores an allowlist record as an executor remembers one.
func putRecord(t *testing.T, kv jetstream.KeyValue, rec events.AllowRecord) {
	t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), rec.Key(), data); err != nil {
		t.Fatal(err)
	}
}

func evalJS[T any](t *testing.T, tb *tab, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, wait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// card is the CSS selector of a pending request's card.
func card(id string) string { return fmt.Sprintf(`article.request[data-invocation=%q]`, id) }

// text reads an element's textContent, as a person reads it.
func text(t *testing.T, tb *tab, sel string) string {
	t.Helper()
	return evalJS[string](t, tb, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

// screenshot saves a PNG of the page to $TOOLBUS_ARTIFACTS (else a
// temporary directory) and logs where.
func (tb *tab) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("TOOLBUS_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(tb.ctx, wait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the console: %s", path)
}

// TestBrowserAllowOnce is the path: an agent's write waits, the
// page shows it with its diff, a click allows it, the file is written and
// the agent gets the result.
func TestBrowserAllowOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.writeWorkspaceFile(t, "notes.md", "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n")
	tb := openConsole(t, e)
	c := e.callAsync(t, "inv-allow", "write_file", `{"file_path":"notes.md","content":"one\ntwo\nthree\nfour\nFIVE\nsix\nseven\neight\nnine\nten\n"}`)
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, card("inv-allow")))

	sel := card("inv-allow")
	if got := text(t, tb, sel+" .tool"); got != "write_file" {
		t.Errorf("tool %q", got)
	}
	if got := text(t, tb, sel+" .caller"); !strings.Contains(got, "agent:test") {
		t.Errorf("caller %q", got)
	}
	if got := text(t, tb, sel+" .reason"); got == "" {
		t.Error("no reason shown")
	}
	if got := text(t, tb, sel+" .args"); !strings.Contains(got, `"file_path": "notes.md"`) {
		t.Errorf("arguments not pretty-printed: %q", got)
	}
	if got := text(t, tb, sel+" .left"); !strings.Contains(got, "left") {
		t.Errorf("time left %q", got)
	}
	if got := text(t, tb, sel+" .diff .line.del"); got != "-five" {
		t.Errorf("removed line %q, want -five", got)
	}
	if got := text(t, tb, sel+" .diff .line.add"); got != "+FIVE" {
		t.Errorf("added line %q, want +FIVE", got)
	}
	// Side by side, the old line faces the new one.
	tb.do(t, chromedp.Click(chromedp.CSS(sel+" .diff-toggle")))
	row := evalJS[[]string](t, tb, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(td => td.textContent)`, sel+" table.split tr:has(td.del) td"))
	if strings.Join(row, "|") != "5|five|5|FIVE" {
		t.Errorf("side by side row %q, want 5|five|5|FIVE", row)
	}
	tb.do(t, chromedp.Click(chromedp.CSS(sel+" .diff-toggle")))
	tb.screenshot(t, "console-pending.png")

	tb.do(t, chromedp.Click(chromedp.CSS(sel+" .allow-once")))
	res := c.wait(t)
	if res.Error != nil {
		t.Fatalf("the allowed call failed: %+v", res.Error)
	}
	data, err := os.ReadFile(filepath.Join(e.ws.Root(), "notes.md"))
	if err != nil || !strings.Contains(string(data), "FIVE") {
		t.Errorf("the file is %q (%v)", data, err)
	}
	tb.waitJS(t, `document.querySelector('#acks li') !== null`)
	if got := text(t, tb, "#acks li"); !strings.Contains(got, "allowed once — write_file") || !strings.Contains(got, "accepted") {
		t.Errorf("the acknowledgement shown: %q", got)
	}
	tb.waitJS(t, `document.querySelector('#recent tr[data-invocation="inv-allow"]') !== null`)
	if got := text(t, tb, `#recent tr[data-invocation="inv-allow"]`); !strings.Contains(got, "proceed_once") || !strings.Contains(got, "approver:ada") {
		t.Errorf("recent decision %q, want proceed_once by approver:ada", got)
	}
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) === null`, sel))
}

// TestBrowserDeny: a deny click with a reason cancels the call.
func TestBrowserDeny(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	c := e.callAsync(t, "inv-deny", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	sel := card("inv-deny")
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
	tb.do(t,
		chromedp.SendKeys(chromedp.CSS(sel+" .deny-reason"), "not in this repository"),
		chromedp.Click(chromedp.CSS(sel+" .deny")))
	res := c.wait(t)
	if res.Error == nil || res.Error.Type != events.ErrUserCancelled {
		t.Fatalf("the denied call: %+v, want USER_CANCELLED", res.Error)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "a.txt")); err == nil {
		t.Error("the denied write happened")
	}
	tb.waitJS(t, `document.querySelector('#recent tr[data-invocation="inv-deny"]') !== null`)
	if got := text(t, tb, `#recent tr[data-invocation="inv-deny"]`); !strings.Contains(got, "cancel") || !strings.Contains(got, "not in this repository") {
		t.Errorf("recent decision %q, want cancel with the reason", got)
	}
	// Its time as every table of toolbus shows one: date, time and zone.
	if got := text(t, tb, `#recent tr[data-invocation="inv-deny"] td`); !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+$`).MatchString(got) {
		t.Errorf("the decision's time reads %q, want 2006-01-02 15:04:05 ZONE", got)
	}
	// A denial is one of the person's answers, as an approval is.
	tb.waitJS(t, `document.querySelector('#acks li[data-invocation="inv-deny"]') !== null`)
	if got := text(t, tb, `#acks li[data-invocation="inv-deny"]`); !strings.Contains(got, "denied (not in this repository)") || !strings.Contains(got, "accepted") {
		t.Errorf("your answers say %q, want the denial, accepted", got)
	}
}

// TestBrowserWithoutToken: the page opened by its address without the
// token says it is signed out and shows nothing of the queue.
func TestBrowserWithoutToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.callAsync(t, "inv-hidden", "write_file", `{"file_path":"a.txt","content":"hidden-content\n"}`)
	e.waitPending(t, "inv-hidden")
	tb := &tab{ctx: browser.New(t)}
	ctx, cancel := context.WithTimeout(tb.ctx, wait)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(e.console.BaseURL()))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != http.StatusOK {
		t.Errorf("status %d, want the page", resp.Status)
	}
	tb.waitJS(t, `document.querySelector("#conn.down") !== null && document.querySelector("#conn").textContent.includes("signed out")`)
	body := evalJS[string](t, tb, `document.documentElement.outerHTML`)
	if strings.Contains(body, "inv-hidden") || strings.Contains(body, "hidden-content") || strings.Contains(body, "write_file") {
		t.Errorf("the refused page shows the queue: %s", body)
	}
	// Its API is closed too, from the page's own origin.
	ctx2, cancel2 := context.WithTimeout(tb.ctx, wait)
	defer cancel2()
	status, err := chromedp.Run(ctx2, chromedp.Evaluate[float64](`fetch("/api/state").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusUnauthorized {
		t.Errorf("the page's own fetch of the state: %v (%v), want 401", status, err)
	}
}

// TestBrowserCrossSite: a page of another origin (same site: another port
// on loopback) posts answers to the console, by fetch and by a form; all
// are refused and the request still waits.
func TestBrowserCrossSite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.callAsync(t, "inv-csrf", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	req := e.waitPending(t, "inv-csrf")
	tb := openConsole(t, e)

	target := e.console.BaseURL() + "api/answer"
	body := attackerAnswer(req)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><body>
<form id="f" method="POST" action=%q target="sink" enctype="text/plain"><input name=%q value='"}'></form>
<iframe name="sink" id="sink"></iframe>
<script>
window.done = {};
const body = %q;
fetch(%q, {method: "POST", mode: "no-cors", credentials: "include", headers: {"Content-Type": "text/plain"}, body})
  .then(r => done.nocors = "sent", e => done.nocors = "error " + e);
fetch(%q, {method: "POST", credentials: "include", headers: {"Content-Type": "application/json"}, body})
  .then(r => done.cors = "status " + r.status, e => done.cors = "blocked");
document.getElementById("sink").addEventListener("load", () => done.form = "sent");
document.getElementById("f").submit();
</script></body>`, target, strings.TrimSuffix(body, `}`)+`,"x":"`, body, target, target)
	}))
	defer evil.Close()

	tb.do(t, chromedp.Navigate(evil.URL))
	tb.waitJS(t, `window.done && done.nocors && done.cors && done.form`)
	if got := evalJS[string](t, tb, `done.cors`); got != "blocked" {
		t.Errorf("a cross-origin JSON post: %s, want blocked", got)
	}
	// The posts that reached the console were refused there.
	_, responses := tb.seen()
	t.Logf("the console's answers to the attacker's page: %q; the page saw %s", responses, evalJS[string](t, tb, `JSON.stringify(done)`))
	formRefused := false
	for _, r := range responses {
		if !strings.Contains(r, "/api/answer") {
			continue
		}
		if !strings.HasPrefix(r, "401 ") && !strings.HasPrefix(r, "403 ") {
			t.Errorf("a cross-site post was answered: %s", r)
		}
		formRefused = formRefused || ((strings.HasPrefix(r, "401 ") || strings.HasPrefix(r, "403 ")) && strings.HasSuffix(r, " Document"))
	}
	if !formRefused {
		t.Errorf("no refusal of the form's post among the console's responses %q", responses)
	}
	if pending, rejected := e.pendingNow("inv-csrf"); !pending || len(rejected) != 0 {
		t.Errorf("after the cross-site posts: pending %v, rejected %v; want still pending, nothing sent", pending, rejected)
	}
}

// TestBrowserMarkupStaysText: arguments, a diff and a shell line holding
// markup and escape sequences are shown as text: no script runs, no
// element is made of them, no dialog opens.
func TestBrowserMarkupStaysText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	payload := `<script>document.body.dataset.pwned='script'</script><img src=x onerror="document.body.dataset.pwned='img';alert('img')">`
	e.callAsync(t, "inv-markup", "write_file", fmt.Sprintf(`{"file_path":"x.html","content":%q}`, payload+"\n"))
	e.callAsync(t, "inv-shell", "run_shell_command", `{"command":"echo '<img src=y onerror=alert(4)>' \u001b[31mred \u202eevil"}`)
	for _, id := range []string{"inv-markup", "inv-shell"} {
		tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, card(id)))
	}
	// The arguments are JSON, whose quotes are escaped: the markup up to
	// the first quote is there as it was sent.
	if got := text(t, tb, card("inv-markup")+" .args"); !strings.Contains(got, payload[:strings.Index(payload, `"`)]) {
		t.Errorf("the arguments shown %q, want the markup as text", got)
	}
	if got := text(t, tb, card("inv-markup")+" .diff .line.add"); got != "+"+payload {
		t.Errorf("the diff line shown %q, want the markup as text", got)
	}
	cmd := text(t, tb, card("inv-shell")+" .command")
	if !strings.Contains(cmd, "<img src=y onerror=alert(4)>") {
		t.Errorf("the command shown %q, want the markup as text", cmd)
	}
	// An escape sequence and a bidi override are shown, not obeyed.
	if strings.ContainsAny(cmd, "\x1b\u202e") || !strings.Contains(cmd, `\u001b[31m`) || !strings.Contains(cmd, `\u202e`) {
		t.Errorf("the command shown %q, want its control characters as visible escapes", cmd)
	}
	// Give an injected image or script every chance to have run.
	tb.do(t, chromedp.Click(chromedp.CSS(card("inv-markup")+" .diff-toggle")))
	if got := text(t, tb, card("inv-markup")+" table.split td.add"); got != payload {
		t.Errorf("the side by side diff shown %q, want the markup as text", got)
	}
	tb.waitJS(t, `document.readyState === "complete"`)
	if n := evalJS[float64](t, tb, `document.querySelectorAll("main img, main script").length`); n != 0 {
		t.Errorf("%v elements were made of the markup", n)
	}
	if pwned := evalJS[string](t, tb, `document.body.dataset.pwned || ""`); pwned != "" {
		t.Errorf("injected markup ran: %s", pwned)
	}
	if dialogs, _ := tb.seen(); len(dialogs) != 0 {
		t.Errorf("dialogs opened: %q", dialogs)
	}
}

// TestBrowserRevoke: an approval remembered on the allowlist is listed
// with who added it and for which call, and a click revokes it.
func TestBrowserRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := events.AllowRecord{AllowEntry: policy.AllowEntry{Scope: "command", Tool: "run_shell_command", Argv: []string{"git", "status"}, Exact: true},
		By: "approver:bob", For: "inv-earlier", AddedAt: time.Now().UTC()}
	putRecord(t, e.allowlist, rec)
	tb := openConsole(t, e)
	row := fmt.Sprintf(`#allowlist tr[data-key=%q]`, rec.Key())
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, row))
	got := text(t, tb, row)
	for _, want := range []string{"approver:bob", "inv-earlier", "git status", "command"} {
		if !strings.Contains(got, want) {
			t.Errorf("the allowlist row %q does not say %q", got, want)
		}
	}
	tb.do(t, chromedp.Click(chromedp.CSS(row+" button.revoke")))
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) === null`, row))
	if _, err := e.allowlist.Get(context.Background(), rec.Key()); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after revoke the entry is still there (%v)", err)
	}
}

// TestBrowserRefusedApprover: a console whose approver the policy does not
// accept (here the agent itself: nobody approves a call they made) shows
// the refusal and its reason, and the call goes on waiting.
func TestBrowserRefusedApprover(t *testing.T) {
	t.Parallel()
	e := newEnvAs(t, "agent:test")
	tb := openConsole(t, e)
	e.callAsync(t, "inv-own", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	sel := card("inv-own")
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
	tb.do(t, chromedp.Click(chromedp.CSS(sel+" .allow-once")))
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q).classList.contains("refused")`, sel+" .ack"))
	if got := text(t, tb, sel+" .ack"); !strings.Contains(got, "refused") || !strings.Contains(got, "nobody may approve a call they made") {
		t.Errorf("the acknowledgement shown %q, want the policy's reason", got)
	}
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel+" .rejected li"))
	if got := text(t, tb, sel+" .rejected"); !strings.Contains(got, "agent:test") {
		t.Errorf("the refused answers listed %q", got)
	}
	if pending, _ := e.pendingNow("inv-own"); !pending {
		t.Error("a refused answer decided the call")
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "a.txt")); err == nil {
		t.Error("the write happened on a refused answer")
	}
}

// TestBrowserModify: the arguments edited in the page are what runs.
func TestBrowserModify(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	c := e.callAsync(t, "inv-modify", "write_file", `{"file_path":"a.txt","content":"from the agent\n"}`)
	sel := card("inv-modify")
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
	if got := evalJS[string](t, tb, fmt.Sprintf(`document.querySelector(%q).value`, sel+" .modify-args")); !strings.Contains(got, "from the agent") {
		t.Errorf("the editor starts with %q, want the call's arguments", got)
	}
	tb.do(t,
		chromedp.Click(chromedp.CSS(sel+" .modify-open")),
		chromedp.SetValue(chromedp.CSS(sel+" .modify-args"), `{"file_path":"a.txt","content":"from the person\n"}`),
		chromedp.Click(chromedp.CSS(sel+" .modify-send")))
	// The edited arguments are judged again, and an edit is asked about
	// again: the new round shows them.
	tb.waitJS(t, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent?.includes("from the person")`, sel+" .args"))
	if got := text(t, tb, sel+" .diff"); !strings.Contains(got, "+from the person") {
		t.Errorf("the new round's diff %q", got)
	}
	tb.do(t, chromedp.Click(chromedp.CSS(sel+" .allow-once")))
	if res := c.wait(t); res.Error != nil {
		t.Fatalf("the modified call failed: %+v", res.Error)
	}
	if data, err := os.ReadFile(filepath.Join(e.ws.Root(), "a.txt")); string(data) != "from the person\n" {
		t.Errorf("the file is %q (%v), want the edited content", data, err)
	}
}

// TestBrowserAlwaysThenRevoke: an "always" button offered by the policy
// remembers the approval, so the next call runs without asking; the
// allowlist view shows who added it, and revoking it there makes the
// next call ask again.
func TestBrowserAlwaysThenRevoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	c := e.callAsync(t, "inv-always", "write_file", `{"file_path":"kept.md","content":"1\n"}`)
	sel := card("inv-always")
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
	req := e.waitPending(t, "inv-always")
	if len(req.Always) == 0 {
		t.Fatal("the policy offers no always answer for an edit")
	}
	buttons := evalJS[[]string](t, tb, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(b => b.dataset.outcome + "|" + b.textContent)`, sel+" .always-btn"))
	if len(buttons) != len(req.Always) {
		t.Fatalf("always buttons %q, want one per offered answer %+v", buttons, req.Always)
	}
	for i, a := range req.Always {
		if buttons[i] != string(a.Outcome)+"|Always: "+a.Remembers {
			t.Errorf("button %d is %q, want %s labelled with %q", i, buttons[i], a.Outcome, a.Remembers)
		}
	}
	tb.do(t, chromedp.Click(chromedp.CSS(sel+" .always-btn")))
	if res := c.wait(t); res.Error != nil {
		t.Fatalf("the call failed: %+v", res.Error)
	}
	row := `#allowlist tr[data-key]`
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, row))
	if got := text(t, tb, row); !strings.Contains(got, "approver:ada") || !strings.Contains(got, "inv-always") || !strings.Contains(got, "kept.md") {
		t.Errorf("the allowlist row %q, want who added it, for which call, and the path", got)
	}
	// Remembered: the same edit runs without asking.
	if res := e.callAsync(t, "inv-again", "write_file", `{"file_path":"kept.md","content":"2\n"}`).wait(t); res.Error != nil {
		t.Fatalf("the remembered call: %+v", res.Error)
	}
	tb.do(t, chromedp.Click(chromedp.CSS(row+" button.revoke")))
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) === null`, row))
	e.callAsync(t, "inv-asks-again", "write_file", `{"file_path":"kept.md","content":"3\n"}`)
	e.waitPending(t, "inv-asks-again")
}

// TestBrowserReconnects: when the console restarts on the same address
// with the same configured token, the open page reconnects by itself, its
// session still valid, and shows what arrived meanwhile.
func TestBrowserReconnects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	addr, token := e.console.Addr().String(), e.console.Token()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.console.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tb.waitJS(t, `document.querySelector("#conn.down") !== null`)
	e.callAsync(t, "inv-meanwhile", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	e.waitPending(t, "inv-meanwhile")
	var err error
	e.console, err = Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, JetStream: e.js, Listen: addr, Token: token, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, card("inv-meanwhile")))
	if got := text(t, tb, "#conn"); got != "live" {
		t.Errorf("the connection shows %q, want live", got)
	}
}

// TestBrowserShellFlagged: a shell line is shown with the parts the
// policy flagged marked, each saying why.
func TestBrowserShellFlagged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	e.callAsync(t, "inv-shell", "run_shell_command", `{"command":"ls -la > listing.txt"}`)
	req := e.waitPending(t, "inv-shell")
	if len(req.Flagged) == 0 {
		t.Fatalf("the policy flagged nothing in %q", req.Command)
	}
	sel := card("inv-shell")
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
	if got := text(t, tb, sel+" .command"); got != req.Command {
		t.Errorf("the command shown %q, want %q", got, req.Command)
	}
	marks := evalJS[[]string](t, tb, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).map(m => m.textContent + "|" + m.title)`, sel+" .command mark.flagged"))
	t.Logf("flagged %+v, marked %q", req.Flagged, marks)
	if len(marks) == 0 {
		t.Errorf("nothing marked in %q", req.Command)
	}
	for _, f := range req.Flagged {
		want := f.Text + "|" + f.Why
		found := false
		for _, m := range marks {
			found = found || m == want
		}
		if !found && strings.Contains(req.Command, f.Text) {
			t.Errorf("flag %q is not marked; marks %q", want, marks)
		}
		if got := text(t, tb, sel+" .flags"); !strings.Contains(got, f.Text+" — "+f.Why) {
			t.Errorf("flag %q is not listed: %q", want, got)
		}
	}
}

// TestBrowserSessionStaysOnItsPort is a prompt-injected agent that serves
// a page on another loopback port and gets the person, signed in to the
// console, to open it. Whatever the browser hands that page's server (a
// cookie is bound to the host, not the port) and whatever its script
// tries, the agent cannot answer the pending shell line: the agent's own
// process replays everything it captured against the console, with the
// console's Origin, and the line still waits.
func TestBrowserSessionStaysOnItsPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.callAsync(t, "inv-port", "run_shell_command", `{"command":"echo pwned > pwned.txt"}`)
	req := e.waitPending(t, "inv-port")
	tb := openConsole(t, e)

	target := e.console.BaseURL() + "api/answer"
	body := attackerAnswer(req)
	var mu sync.Mutex
	var captured []http.Header // what the browser sent the agent's server
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		captured = append(captured, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><body>
<form id="f" method="POST" action=%q target="sink" enctype="text/plain"><input name=%q value='"}'></form>
<iframe name="sink" id="sink"></iframe>
<script>
window.done = {};
const body = %q;
done.storage = JSON.stringify(sessionStorage) + document.cookie;
fetch(%q, {method: "POST", mode: "no-cors", credentials: "include", headers: {"Content-Type": "text/plain"}, body})
  .then(r => done.nocors = "sent", e => done.nocors = "error " + e);
fetch(%q, {method: "POST", credentials: "include", headers: {"Content-Type": "application/json"}, body})
  .then(r => done.cors = "status " + r.status, e => done.cors = "blocked");
document.getElementById("sink").addEventListener("load", () => done.form = "sent");
document.getElementById("f").submit();
</script></body>`, target, strings.TrimSuffix(body, `}`)+`,"x":"`, body, target, target)
	}))
	defer evil.Close()

	// The person opens the agent's page in the tab the console is in, as
	// they would follow a link the agent printed.
	tb.do(t, chromedp.Navigate(evil.URL))
	tb.waitJS(t, `window.done && done.nocors && done.cors && done.form`)
	if got := evalJS[string](t, tb, `done.storage`); got != "{}" {
		t.Errorf("the agent's page reads %q of the console's session", got)
	}

	// The agent's process replays every header the browser sent its page,
	// cookies included, as the console's own page would send them.
	origin := strings.TrimSuffix(e.console.BaseURL(), "/")
	mu.Lock()
	headers := slices.Clone(captured)
	mu.Unlock()
	for _, h := range headers {
		page := httpReq(t, "GET", e.console.BaseURL(), "", map[string]string{"Cookie": h.Get("Cookie")})
		_, html := do(t, http.DefaultClient, page)
		_, after, _ := strings.Cut(html, `name="toolbus-csrf" content="`)
		csrf, _, _ := strings.Cut(after, `"`)
		post := httpReq(t, "POST", target, body, map[string]string{"Content-Type": "application/json", "Origin": origin,
			"Cookie": h.Get("Cookie"), "Authorization": h.Get("Authorization"), "X-Toolbus-Csrf": csrf})
		if status, got := do(t, http.DefaultClient, post); status != http.StatusUnauthorized && status != http.StatusForbidden {
			t.Errorf("the agent's replay of what its page was sent (cookie %q): status %d %s, want 401 or 403", h.Get("Cookie"), status, got)
		}
	}
	if len(headers) == 0 {
		t.Fatal("the agent's page was never requested")
	}
	// The console's session is nowhere the browser would send it.
	jar, err := chromedp.Call(tb.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{e.console.BaseURL(), evil.URL}})
	if err != nil {
		t.Fatal(err)
	}
	if len(jar.Cookies) != 0 {
		t.Errorf("the browser keeps cookies for the console's host: %+v", jar.Cookies)
	}
	if pending, rejected := e.pendingNow("inv-port"); !pending || len(rejected) != 0 {
		t.Errorf("after the agent's page: pending %v, rejected %v; want still pending, nothing sent", pending, rejected)
	}
	if _, err := os.Stat(filepath.Join(e.ws.Root(), "pwned.txt")); err == nil {
		t.Error("the shell line ran")
	}
}

// attackerAnswer is the body the console's page sends to allow req once,
// which an attacker knows as well as the page does.
func attackerAnswer(req approve.Request) string {
	return fmt.Sprintf(`{"answerTo":%q,"outcome":"proceed_once"}`, req.AnswerTo)
}

// TestBrowserReusedIDReplacesNothing: while a harmless edit waits, a
// shell line for another workspace is asked under the same invocation id.
// The person sees two cards; allowing the edit runs the edit, and the
// shell line still waits, unanswered.
func TestBrowserReusedIDReplacesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	c := e.callAsync(t, "inv-reused", "write_file", `{"file_path":"notes.md","content":"harmless\n"}`)
	edit := e.waitPending(t, "inv-reused")
	shell := events.ConfirmRequest{InvocationID: "inv-reused", Tool: "run_shell_command", Kind: "execute", Caller: events.Identity{ID: "agent:test", Role: "agent"},
		Command: "rm -rf /srv/other-workspace", Args: json.RawMessage(`{"command":"rm -rf /srv/other-workspace"}`),
		Reason: "asks", DeadlineMillis: 60_000, AnswerTo: events.AnswerSubjectPrefix + "the-shell-line"}
	answers := e.ask(t, shell)
	editCard := fmt.Sprintf(`article.request[data-key=%q]`, edit.AnswerTo)
	shellCard := fmt.Sprintf(`article.request[data-key=%q]`, shell.AnswerTo)
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null && document.querySelector(%q) !== null`, editCard, shellCard))
	if got := text(t, tb, editCard+" .tool"); got != "write_file" {
		t.Errorf("the edit's card shows %q", got)
	}
	if got := text(t, tb, shellCard+" .command"); got != shell.Command {
		t.Errorf("the shell line's card shows %q", got)
	}
	if n := evalJS[float64](t, tb, `document.querySelectorAll('article.request[data-invocation="inv-reused"]').length`); n != 2 {
		t.Errorf("%v cards for the id, want 2", n)
	}

	tb.do(t, chromedp.Click(chromedp.CSS(editCard+" .allow-once")))
	if res := c.wait(t); res.Error != nil {
		t.Fatalf("the allowed edit failed: %+v", res.Error)
	}
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) === null`, editCard))
	if pending, rejected := e.pendingKey(shell.AnswerTo); !pending || len(rejected) != 0 {
		t.Errorf("the shell line after the edit was allowed: pending %v, rejected %v", pending, rejected)
	}
	if n, _, _ := answers.Pending(); n != 0 {
		t.Errorf("the shell line got %d answers", n)
	}
	if got := text(t, tb, shellCard+" .command"); got != shell.Command {
		t.Errorf("the shell line's card is gone or changed: %q", got)
	}
}

// Several people may share the console's one token: the name a person
// gives in the page is recorded with their answer, with the token's id,
// beside the console's member the bus proves.
func TestBrowserAnswerNamesThePerson(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tb := openConsole(t, e)
	c := e.callAsync(t, "inv-person", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	sel := card("inv-person")
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
	tb.do(t, chromedp.SendKeys(chromedp.CSS("#person"), "Ada Lovelace"))
	evalJS[bool](t, tb, `document.getElementById("person").dispatchEvent(new Event("change"))`)
	tb.do(t, chromedp.Click(chromedp.CSS(sel+" .allow-once")))
	if res := c.wait(t); res.Error != nil {
		t.Fatalf("the allowed call failed: %+v", res.Error)
	}
	tb.waitJS(t, `document.querySelector('#recent tr[data-invocation="inv-person"]') !== null`)
	got := text(t, tb, `#recent tr[data-invocation="inv-person"]`)
	if !regexp.MustCompile(`approver:ada \(Ada Lovelace \(console token [0-9a-f]{8}\)\)`).MatchString(got) {
		t.Errorf("the recent decision says %q, want the console's member and the person with the token's id", got)
	}
	// The browser keeps the name for the next visit.
	if name := evalJS[string](t, tb, `localStorage.getItem("toolbus.person")`); name != "Ada Lovelace" {
		t.Errorf("the page keeps the name %q", name)
	}
}

// TestBrowserLinkSelectsTheRequest: a webhook's link to one request
// (notify.Link) opened in a tab that is not signed in shows nothing of
// the queue and says to sign in; once the printed address is opened in
// that tab, the request the link named is selected, and no other. A link
// to a request that no longer waits says so.
func TestBrowserLinkSelectsTheRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.callAsync(t, "inv-other", "write_file", `{"file_path":"a.txt","content":"a\n"}`)
	e.callAsync(t, "inv-linked", "write_file", `{"file_path":"b.txt","content":"b\n"}`)
	e.waitPending(t, "inv-other")
	linked := e.waitPending(t, "inv-linked")

	tb := &tab{ctx: browser.New(t)}
	tb.do(t, chromedp.Navigate(notify.Link(e.console.BaseURL(), linked.AnswerTo)))
	tb.waitJS(t, `document.querySelector("#conn.down") !== null && !document.querySelector("#linked").hidden`)
	if got := text(t, tb, "#linked"); !strings.Contains(got, "once you sign in") {
		t.Errorf("the signed-out page says %q, want how to see the request", got)
	}
	if n := evalJS[float64](t, tb, `document.querySelectorAll("article.request").length`); n != 0 {
		t.Errorf("the signed-out page shows %v requests", n)
	}
	if addr := evalJS[string](t, tb, `location.href`); strings.Contains(addr, "#") {
		t.Errorf("the address keeps its fragment: %s", addr)
	}

	tb.do(t, chromedp.Navigate(e.console.URL()))
	tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, card("inv-linked")+".linked"))
	if n := evalJS[float64](t, tb, `document.querySelectorAll("article.request.linked").length`); n != 1 {
		t.Errorf("%v requests selected, want the linked one alone", n)
	}
	if !evalJS[bool](t, tb, `document.querySelector("#linked").hidden`) {
		t.Errorf("the page still says %q", text(t, tb, "#linked"))
	}

	tb.do(t, chromedp.Navigate(notify.Link(e.console.BaseURL(), "toolbus.answer.not-a-request")))
	tb.waitJS(t, `!document.querySelector("#linked").hidden`)
	if got := text(t, tb, "#linked"); !strings.Contains(got, "does not wait here") {
		t.Errorf("a link to no request says %q", got)
	}
}
