package confirmtui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"charm.land/lipgloss/v2"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
)

// The palette uses the 16 basic ANSI colours only, which every terminal
// reached over SSH shows; lipgloss drops them on a terminal without colour.
var (
	styleAdd      = lipgloss.NewStyle().Foreground(lipgloss.Green)
	styleDel      = lipgloss.NewStyle().Foreground(lipgloss.Red)
	styleHunk     = lipgloss.NewStyle().Foreground(lipgloss.Cyan)
	styleLabel    = lipgloss.NewStyle().Bold(true)
	styleDim      = lipgloss.NewStyle().Faint(true)
	styleFlag     = lipgloss.NewStyle().Reverse(true).Foreground(lipgloss.Yellow)
	styleSelected = lipgloss.NewStyle().Reverse(true)
	styleOK       = lipgloss.NewStyle().Foreground(lipgloss.Green).Bold(true)
	styleBad      = lipgloss.NewStyle().Foreground(lipgloss.Red).Bold(true)
	styleKey      = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Yellow)
)

// detailLines renders what a person needs to decide on r, one string per
// screen line, every untrusted part cleaned. The diff and the arguments
// come last, so that cutting the detail to the screen cuts them first.
func detailLines(r approve.Request, now time.Time) []string {
	var out []string
	field := func(label, value string) {
		out = append(out, styleLabel.Render(label+":")+" "+value)
	}
	kind := cleanLine(string(r.Kind))
	tool := cleanLine(r.Tool)
	if r.Server != "" {
		tool += styleDim.Render(" on server ") + cleanLine(r.Server)
	}
	field("Tool", tool+styleDim.Render("  kind ")+kind)
	field("Caller", callerLine(r.Caller))
	field("Reason", cleanLine(r.Reason))
	switch {
	case r.Answer != nil:
		field("Answered", fmt.Sprintf("by %s: %s", cleanLine(r.Answer.Sender.ID), cleanLine(string(r.Answer.Outcome))))
	case r.Closed != nil:
		field("Closed", cleanLine(string(r.Closed.ErrorType))+" "+cleanLine(r.Closed.Reason))
	case r.DeadlineMillis > 0:
		field("Time left", timeLeft(r.Deadline, now))
	}
	if r.ApprovalsRequired > 1 && r.Pending() {
		field("Needs", fmt.Sprintf("%d people: %s", r.ApprovalsRequired, cleanLine(r.Progress())))
	}
	for _, rej := range r.Rejected {
		out = append(out, styleBad.Render("Refused:")+" "+cleanLine(rej.Answer.Sender.ID)+": "+cleanLine(rej.Reason))
	}
	if r.Command != "" {
		out = append(out, styleLabel.Render("Command:"))
		for _, line := range strings.Split(cleanText(r.Command), "\n") {
			out = append(out, "  "+highlight(line, r.Flagged))
		}
		for _, f := range r.Flagged {
			out = append(out, "  ↳ "+styleFlag.Render(cleanLine(f.Text))+" — "+cleanLine(f.Why))
		}
	}
	if r.Diff != "" {
		out = append(out, styleLabel.Render("Diff:"))
		out = append(out, diffLines(r.Diff)...)
	}
	out = append(out, styleLabel.Render("Arguments:"))
	for _, line := range argLines(r.Args) {
		out = append(out, "  "+line)
	}
	return out
}

func callerLine(c events.Identity) string {
	s := cleanLine(c.ID)
	var more []string
	for _, kv := range [][2]string{{"agent", c.Agent}, {"session", c.Session}, {"user", c.User}, {"host", c.Host}} {
		if kv[1] != "" {
			more = append(more, kv[0]+" "+cleanLine(kv[1]))
		}
	}
	if len(more) > 0 {
		s += styleDim.Render(" (" + strings.Join(more, ", ") + ")")
	}
	return s
}

func timeLeft(deadline, now time.Time) string {
	d := deadline.Sub(now).Truncate(time.Second)
	if d <= 0 {
		return styleBad.Render("none, the deadline has passed")
	}
	return d.String()
}

// diffLines colours a unified diff: additions green, deletions red, hunk
// headers cyan.
func diffLines(diff string) []string {
	lines := strings.Split(strings.TrimSuffix(cleanText(diff), "\n"), "\n")
	out := make([]string, len(lines))
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			out[i] = styleLabel.Render(l)
		case strings.HasPrefix(l, "+"):
			out[i] = styleAdd.Render(l)
		case strings.HasPrefix(l, "-"):
			out[i] = styleDel.Render(l)
		case strings.HasPrefix(l, "@@"):
			out[i] = styleHunk.Render(l)
		default:
			out[i] = l
		}
	}
	return out
}

// argLines pretty-prints the arguments as indented JSON. JSON's own
// escapes keep control characters in strings as text (\u001b); the result
// is cleaned all the same, since the bytes may not be JSON at all.
func argLines(args json.RawMessage) []string {
	if len(args) == 0 {
		return []string{styleDim.Render("(none)")}
	}
	text := string(args)
	if pretty, err := indentJSON(args); err == nil {
		text = string(pretty)
	}
	return strings.Split(cleanText(text), "\n")
}

// highlight marks the flagged parts of one cleaned command line.
func highlight(line string, flags []events.Flag) string {
	marked := make([]bool, len(line))
	found := false
	for _, f := range flags {
		text := cleanLine(f.Text)
		if text == "" {
			continue
		}
		for from := 0; ; {
			i := strings.Index(line[from:], text)
			if i < 0 {
				break
			}
			for j := from + i; j < from+i+len(text); j++ {
				marked[j] = true
			}
			found = true
			from += i + len(text)
		}
	}
	if !found {
		return line
	}
	var b strings.Builder
	for i := 0; i < len(line); {
		j := i
		for j < len(line) && marked[j] == marked[i] {
			j++
		}
		if marked[i] {
			b.WriteString(styleFlag.Render(line[i:j]))
		} else {
			b.WriteString(line[i:j])
		}
		i = j
	}
	return b.String()
}

// outcomeKeys are the keys of the "always" outcomes, offered only when the
// request lists them in Always.
var outcomeKeys = map[events.Outcome]string{
	events.ProceedAlways:       "a",
	events.ProceedAlwaysTool:   "t",
	events.ProceedAlwaysServer: "s",
}

// alwaysOptions returns the "always" answers r offers, in a stable order,
// each with its key; an outcome this view does not know is left out.
func alwaysOptions(r approve.Request) []keyedOption {
	var opts []keyedOption
	for _, o := range r.Always {
		if k, ok := outcomeKeys[o.Outcome]; ok {
			opts = append(opts, keyedOption{key: k, opt: o})
		}
	}
	sort.SliceStable(opts, func(i, j int) bool { return opts[i].key < opts[j].key })
	return opts
}

type keyedOption struct {
	key string
	opt events.AlwaysOption
}

// indentJSON lays out a JSON value for a person: indented, keys in the
// order sent, and "&&" or "<" as they are, not as the \u0026 escapes the
// bus's encoder writes for HTML safety.
func indentJSON(raw []byte) ([]byte, error) {
	v := jsontext.Value(bytes.Clone(raw))
	if err := v.Indent(jsontext.WithIndent("  "), jsontext.PreserveRawStrings(false), jsontext.EscapeForHTML(false)); err != nil {
		return nil, err
	}
	return v, nil
}
