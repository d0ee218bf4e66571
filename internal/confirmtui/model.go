// Package confirmtui is the terminal approver, `toolbus confirm`: a
// bubbletea view over an approver's seat (internal/approve) that shows the
// fleet's pending confirmation requests and sends a person's answers.
package confirmtui

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/textinput"
	"charm.land/bubbles/v2/viewport"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/human"
)

// Seat is what the view needs of an approver; *approve.Approver is one.
type Seat interface {
	Identity() events.Identity
	Snapshot() (approve.State, <-chan struct{})
	Answer(ctx context.Context, invocationID string, ans approve.Answer) (*events.ConfirmAck, error)
	// Connected reports whether the seat's connection to the bus is up:
	// while it is down no request reaches it and no answer leaves.
	Connected() bool
}

var _ Seat = (*approve.Approver)(nil)

const (
	// linger is how long a request another approver answered stays in the
	// queue, marked answered, before it leaves.
	linger = 5 * time.Second
	// answerTimeout bounds one answer's round trip.
	answerTimeout = 15 * time.Second
	// statusLife is how long the status line says what happened last
	// before it clears: longer, and it reads as if it were still so.
	statusLife    = 10 * time.Second
	maxQueueLines = 5
)

type mode int

const (
	modeQueue  mode = iota
	modeDeny        // typing the reason of a deny
	modeFull        // the whole detail in a scrollable viewport
	modeRecent      // the recent decisions
)

// Model is the bubbletea model of the terminal approver. Create it with
// New; it is not safe for use by more than one program.
type Model struct {
	ctx    context.Context
	seat   Seat
	editor Editor

	state    approve.State
	changed  <-chan struct{}
	shown    map[string]bool      // requests this view showed as pending
	endedAt  map[string]time.Time // when this view saw a shown request end
	selected string               // the selected request's AnswerTo
	// selectedCall is the principal and invocation id of the request
	// this view last answered with an edit (keepSelection).
	selectedCall string
	index        int // its position, kept when it leaves
	// moved: the selected request left and the next one was selected
	// for the person, who has not looked at it yet.
	moved bool

	width, height int
	mode          mode
	status        string
	statusAt      time.Time // when status was said
	// down is set while the seat is not connected to the bus.
	down  bool
	input textinput.Model
	full  viewport.Model
	now   func() time.Time
}

// New returns the model over seat. ctx bounds the model's background
// work (waiting for changes, answers in flight): cancel it once the
// program ends. editor is how the arguments of a modify answer are
// edited.
func New(ctx context.Context, seat Seat, editor Editor) *Model {
	in := textinput.New()
	in.Prompt = "reason: "
	in.Placeholder = "optional, the agent sees it"
	in.CharLimit = events.MaxAnswerMessage
	m := &Model{ctx: ctx, seat: seat, editor: editor, shown: map[string]bool{}, endedAt: map[string]time.Time{},
		width: 80, height: 24, input: in, full: viewport.New(), now: time.Now}
	m.refresh()
	return m
}

type (
	changedMsg struct{}
	tickMsg    struct{}
	ackMsg     struct {
		id      string
		outcome events.Outcome
		ack     *events.ConfirmAck
		err     error
	}
	editedMsg struct {
		id   string
		path string
		orig []byte
		err  error
	}
)

// Init implements tea.Model.
func (m *Model) Init() tea.Cmd { return tea.Batch(m.waitChange(), tick()) }

func tick() tea.Cmd { return tea.Tick(time.Second, func(time.Time) tea.Msg { return tickMsg{} }) }

// waitChange turns the seat's change channel into a message; it returns
// when the model's context ends.
func (m *Model) waitChange() tea.Cmd {
	ctx, ch := m.ctx, m.changed
	return func() tea.Msg {
		select {
		case <-ch:
			return changedMsg{}
		case <-ctx.Done():
			return nil
		}
	}
}

// refresh reads the seat's state and notes which shown requests ended.
func (m *Model) refresh() {
	m.state, m.changed = m.seat.Snapshot()
	now := m.now()
	for _, r := range m.state.Pending {
		m.shown[round(r)] = true
	}
	for _, r := range m.state.Recent {
		if k := round(r); m.shown[k] && m.endedAt[k].IsZero() {
			m.endedAt[k] = now
		}
	}
	m.keepSelection()
}

// say puts s on the status line, until statusLife has passed.
func (m *Model) say(s string) { m.status, m.statusAt = s, m.now() }

// checkConnection notes the seat's connection going down or coming back,
// and says so.
func (m *Model) checkConnection() {
	down := !m.seat.Connected()
	switch {
	case down && !m.down:
		m.say(styleBad.Render("disconnected from the bus:") + " reconnecting; no request arrives and no answer is sent meanwhile")
	case !down && m.down:
		m.say("reconnected to the bus")
	}
	m.down = down
}

// round names one request: each, every round of a modified call
// included, has an AnswerTo of its own.
func round(r approve.Request) string { return r.AnswerTo }

// queue is what the list shows: the pending requests, then those that
// ended a moment ago, marked so, before they leave.
func (m *Model) queue() []approve.Request {
	q := slices.Clone(m.state.Pending)
	now := m.now()
	for _, r := range m.state.Recent {
		at, ok := m.endedAt[round(r)]
		if ok && now.Sub(at) < linger && !slices.ContainsFunc(q, func(p approve.Request) bool { return p.AnswerTo == r.AnswerTo }) {
			q = append(q, r)
		}
	}
	return q
}

func (m *Model) keepSelection() {
	q := m.queue()
	if len(q) == 0 {
		m.selected, m.index, m.moved = "", 0, false
		return
	}
	for i, r := range q {
		if r.AnswerTo == m.selected {
			m.index = i
			return
		}
	}
	// The next round of the call this view answered with an edit is the
	// same call, asked again by its executor: it takes the selection
	// without a key being swallowed. An executor refuses a caller's
	// reused id, so only that call's executor asks under the same
	// principal and id.
	for i, r := range q {
		if m.selectedCall != "" && r.Pending() && r.Principal+"\x00"+r.InvocationID == m.selectedCall {
			m.selected, m.index, m.moved = r.AnswerTo, i, false
			return
		}
	}
	m.moved = m.selected != ""
	m.index = min(m.index, len(q)-1)
	m.selected = q[m.index].AnswerTo
}

func (m *Model) current() (approve.Request, bool) {
	if m.selected == "" {
		return approve.Request{}, false
	}
	return m.state.Find(m.selected)
}

// Update implements tea.Model.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.full.SetWidth(msg.Width)
		m.full.SetHeight(max(msg.Height-2, 1))
		m.input.SetWidth(max(msg.Width-len(m.input.Prompt)-2, 10))
		return m, nil
	case changedMsg:
		m.refresh()
		return m, m.waitChange()
	case tickMsg:
		m.keepSelection()
		m.checkConnection()
		if !m.down && m.status != "" && m.now().Sub(m.statusAt) >= statusLife {
			m.status = ""
		}
		return m, tick()
	case ackMsg:
		m.say(ackStatus(msg))
		return m, nil
	case editedMsg:
		return m, m.afterEdit(msg)
	case tea.KeyPressMsg:
		switch m.mode {
		case modeDeny:
			return m, m.denyKey(msg)
		case modeFull:
			return m, m.fullKey(msg)
		case modeRecent:
			switch msg.String() {
			case "r", "esc":
				m.mode = modeQueue
			case "q", "ctrl+c":
				return m, tea.Quit
			}
			return m, nil
		}
		return m, m.queueKey(msg)
	}
	return m, nil
}

func (m *Model) queueKey(msg tea.KeyPressMsg) tea.Cmd {
	key := msg.String()
	switch key {
	case "q", "ctrl+c":
		return tea.Quit
	case "up", "k":
		m.move(-1)
		return nil
	case "down", "j":
		m.move(1)
		return nil
	case "r":
		m.mode = modeRecent
		return nil
	}
	r, ok := m.current()
	if !ok {
		return nil
	}
	switch key {
	case "d":
		m.full.SetContentLines(detailLines(r, m.now()))
		m.full.GotoTop()
		m.mode = modeFull
		return nil
	}
	answerKey := slices.Contains([]string{"y", "a", "t", "s", "e", "n"}, key)
	if answerKey && !r.Pending() {
		m.say("this request is no longer pending: " + cleanLine(r.Status()))
		return nil
	}
	if answerKey && m.moved {
		// A key meant for the request that just left must not answer
		// the one that took its place.
		m.moved = false
		m.say(styleBad.Render("nothing sent:") + " the selected request left; this is another one, press again")
		return nil
	}
	switch key {
	case "y":
		return m.answer(r, approve.Answer{Outcome: events.ProceedOnce})
	case "e":
		return m.edit(r)
	case "n":
		m.mode = modeDeny
		m.input.Reset()
		return m.input.Focus()
	}
	for _, o := range alwaysOptions(r) {
		if o.key == key {
			return m.answer(r, approve.Answer{Outcome: o.opt.Outcome})
		}
	}
	return nil
}

func (m *Model) move(by int) {
	q := m.queue()
	if len(q) == 0 {
		return
	}
	m.index = max(0, min(len(q)-1, m.index+by))
	m.selected = q[m.index].AnswerTo
	m.moved = false
}

func (m *Model) denyKey(msg tea.KeyPressMsg) tea.Cmd {
	switch msg.String() {
	case "esc":
		m.mode = modeQueue
		m.input.Blur()
		return nil
	case "enter":
		m.mode = modeQueue
		m.input.Blur()
		r, ok := m.current()
		if !ok || !r.Pending() {
			m.say("this request is no longer pending; nothing sent")
			return nil
		}
		return m.answer(r, approve.Answer{Outcome: events.Cancel, Message: strings.TrimSpace(m.input.Value())})
	case "ctrl+c":
		return tea.Quit
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

func (m *Model) fullKey(msg tea.KeyPressMsg) tea.Cmd {
	switch msg.String() {
	case "d", "esc", "q":
		m.mode = modeQueue
		return nil
	case "home", "g":
		m.full.GotoTop()
		return nil
	case "end", "G":
		m.full.GotoBottom()
		return nil
	case "ctrl+c":
		return tea.Quit
	}
	var cmd tea.Cmd
	m.full, cmd = m.full.Update(msg)
	return cmd
}

// answer sends ans in the background; the ack comes back as an ackMsg.
func (m *Model) answer(r approve.Request, ans approve.Answer) tea.Cmd {
	m.say(fmt.Sprintf("sending %s for %s…", ans.Outcome, cleanLine(r.Tool)))
	ctx, seat, id, to := m.ctx, m.seat, r.InvocationID, r.AnswerTo
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, answerTimeout)
		defer cancel()
		ack, err := seat.Answer(ctx, to, ans)
		return ackMsg{id: id, outcome: ans.Outcome, ack: ack, err: err}
	}
}

func ackStatus(msg ackMsg) string {
	switch {
	case errors.Is(msg.err, approve.ErrNotPending):
		return styleBad.Render("not sent:") + " the call no longer waits for an answer"
	case msg.err != nil:
		return styleBad.Render("error:") + " " + cleanLine(msg.err.Error())
	case msg.ack.Accepted && msg.ack.Of > 1:
		return styleOK.Render("counted:") + " " + cleanLine(msg.ack.Reason)
	case msg.ack.Accepted:
		return styleOK.Render("accepted:") + " " + string(msg.outcome)
	}
	return styleBad.Render("refused:") + " " + cleanLine(msg.ack.Reason)
}

// View implements tea.Model.
func (m *Model) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "toolbus confirm"
	return v
}

func (m *Model) render() string {
	w, h := max(m.width, 20), max(m.height, 6)
	var lines []string
	title := fmt.Sprintf("toolbus confirm — as %s — %d pending", cleanLine(m.seat.Identity().ID), len(m.state.Pending))
	if m.down {
		title += " — " + styleBad.Render("DISCONNECTED")
	}
	lines = append(lines, styleLabel.Render(title))
	switch m.mode {
	case modeFull:
		r, _ := m.current()
		lines = append(lines, styleDim.Render(fmt.Sprintf("%s %s — ↑↓ pgup pgdn home end ←→ scroll, d or esc back (%d%%)",
			cleanLine(r.Tool), shortID(r.InvocationID), int(m.full.ScrollPercent()*100))))
		lines = append(lines, m.full.View())
		return fit(lines, w, h)
	case modeRecent:
		lines = append(lines, styleDim.Render("recent decisions, newest first — r or esc back"))
		for _, r := range m.state.Recent {
			lines = append(lines, fmt.Sprintf("%s  %-20s %s", human.Time(r.Ended), cleanLine(r.Tool), cleanLine(r.Status())))
		}
		if len(m.state.Recent) == 0 {
			lines = append(lines, styleDim.Render("(none yet)"))
		}
		return fit(lines, w, h)
	}

	q := m.queue()
	lines = append(lines, m.queueLines(q, min(max(len(q), 1), maxQueueLines))...)
	lines = append(lines, styleDim.Render(strings.Repeat("─", w)))
	footer := m.footer()
	room := h - len(lines) - len(footer)
	if r, ok := m.current(); ok {
		lines = append(lines, cut(detailLines(r, m.now()), room, r.Diff != "")...)
	} else {
		lines = append(lines, styleDim.Render("Waiting for requests…"))
	}
	for len(lines) < h-len(footer) {
		lines = append(lines, "")
	}
	lines = append(lines, footer...)
	return fit(lines, w, h)
}

func (m *Model) queueLines(q []approve.Request, n int) []string {
	if len(q) == 0 {
		return []string{styleDim.Render("no request waits")}
	}
	first := max(0, min(m.index-n/2, len(q)-n))
	var out []string
	for i := first; i < first+n && i < len(q); i++ {
		r := q[i]
		// An ended request says how it ended where the kind and caller
		// were, so that it fits 80 columns.
		var line string
		switch {
		case r.Answer != nil:
			line = fmt.Sprintf("%-18s answered by %s (%s)", cleanLine(r.Tool), cleanLine(r.Answer.Sender.ID), cleanLine(string(r.Answer.Outcome)))
		case r.Closed != nil:
			line = fmt.Sprintf("%-18s closed: %s", cleanLine(r.Tool), cleanLine(string(r.Closed.ErrorType)))
		default:
			left := ""
			if r.DeadlineMillis > 0 {
				left = timeLeft(r.Deadline, m.now()) + " left"
			}
			line = fmt.Sprintf("%-18s %-6s %-24s %s", cleanLine(r.Tool), cleanLine(string(r.Kind)), cleanLine(r.Caller.ID), left)
		}
		if r.AnswerTo == m.selected {
			line = styleSelected.Render("> " + line)
		} else {
			line = "  " + line
		}
		out = append(out, line)
	}
	return out
}

// footer is the keys of the selected request and the status line.
func (m *Model) footer() []string {
	var out []string
	r, ok := m.current()
	if m.mode == modeDeny {
		out = append(out, "Deny: "+styleDim.Render("enter sends, esc goes back"), m.input.View())
	} else if ok && r.Pending() {
		for _, o := range alwaysOptions(r) {
			out = append(out, styleKey.Render(o.key)+" always: "+cleanLine(o.opt.Remembers))
		}
		out = append(out, styleKey.Render("y")+" allow once  "+styleKey.Render("e")+" edit args  "+styleKey.Render("n")+" deny  "+
			styleKey.Render("d")+" full  "+styleKey.Render("↑↓")+" select  "+styleKey.Render("r")+" recent  "+styleKey.Render("q")+" quit")
	} else {
		out = append(out, styleKey.Render("↑↓")+" select  "+styleKey.Render("r")+" recent  "+styleKey.Render("q")+" quit")
	}
	return append(out, m.status)
}

// cut keeps the first room lines of the detail, with a note of what is
// left out.
func cut(lines []string, room int, hasDiff bool) []string {
	if room < 1 {
		return nil
	}
	if len(lines) <= room {
		return lines
	}
	what := "everything"
	if hasDiff {
		what = "the full diff"
	}
	keep := room - 1
	return append(lines[:keep:keep], styleDim.Render(fmt.Sprintf("… %d more lines, press d for %s", len(lines)-keep, what)))
}

// fit cuts the screen to w×h: long lines are truncated, not wrapped, so
// that the layout's line count is the screen's.
func fit(lines []string, w, h int) string {
	var all []string
	for _, l := range lines {
		all = append(all, strings.Split(l, "\n")...)
	}
	if len(all) > h {
		all = all[:h]
	}
	for i, l := range all {
		all[i] = ansi.Truncate(l, w, "…")
	}
	return strings.Join(all, "\n")
}

func shortID(id string) string {
	id = cleanLine(id)
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
