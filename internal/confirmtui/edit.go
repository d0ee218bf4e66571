package confirmtui

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"

	tea "charm.land/bubbletea/v2"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
)

// Editor is how the arguments of a modify answer are edited. The editor
// is the approver's own program, run in the approver's terminal on the
// approver's behalf, on arguments it shows them: toolbus runs it
// unconfined, as the approver would.
type Editor struct {
	// Command is the editor ($VISUAL or $EDITOR), run with the file's
	// path appended.
	Command string
	// Dir is where the file is written, made 0700 if missing: one the
	// tool processes of this host cannot read (the host's state dir,
	// which every executor hides from them), since the arguments may be
	// another principal's and hold secrets, and a tool process may read
	// the temp dir. Empty means the temp dir.
	Dir string
}

// edit opens the editor on the request's arguments, indented, in a file
// only this user may read (os.CreateTemp makes it 0600), in the editor's
// Dir: arguments may hold secrets.
func (m *Model) edit(r approve.Request) tea.Cmd {
	argv := strings.Fields(m.editor.Command)
	if len(argv) == 0 {
		m.say(styleBad.Render("no editor:") + " set $VISUAL or $EDITOR")
		return nil
	}
	orig := []byte("{}\n")
	if len(r.Args) > 0 {
		pretty, err := indentJSON(r.Args)
		if err != nil {
			m.say(styleBad.Render("cannot edit:") + " the arguments are not JSON")
			return nil
		}
		orig = append(pretty, '\n')
	}
	if m.editor.Dir != "" {
		if err := os.MkdirAll(m.editor.Dir, 0o700); err != nil {
			m.say(styleBad.Render("cannot edit:") + " " + cleanLine(err.Error()))
			return nil
		}
	}
	f, err := os.CreateTemp(m.editor.Dir, "toolbus-args-*.json")
	if err != nil {
		m.say(styleBad.Render("cannot edit:") + " " + cleanLine(err.Error()))
		return nil
	}
	path := f.Name()
	_, err = f.Write(orig)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		m.say(styleBad.Render("cannot edit:") + " " + cleanLine(err.Error()))
		return nil
	}
	id := r.AnswerTo
	// Not through the executor's confined starter: this is the person's
	// own editor ($EDITOR), which the person starts in their own terminal,
	// as the approver's account, on a file of data in the hidden state dir
	// (which a confined editor could not write). No model chooses it.
	cmd := exec.Command(argv[0], append(argv[1:], path)...)
	return tea.ExecProcess(cmd, func(err error) tea.Msg {
		return editedMsg{id: id, path: path, orig: orig, err: err}
	})
}

// afterEdit reads the edited file back and sends it as a modify answer;
// an editor that failed, a file left as it was, or one that is not a JSON
// object sends nothing.
func (m *Model) afterEdit(msg editedMsg) tea.Cmd {
	edited, err := os.ReadFile(msg.path)
	os.Remove(msg.path)
	args, problem := editedArgs(msg.orig, edited, errors.Join(msg.err, err))
	if problem != "" {
		m.say(styleBad.Render("nothing sent:") + " " + cleanLine(problem))
		return nil
	}
	r, ok := m.state.Find(msg.id)
	if !ok || !r.Pending() {
		m.say(styleBad.Render("nothing sent:") + " the request is no longer pending")
		return nil
	}
	m.selectedCall = r.Principal + "\x00" + r.InvocationID
	return m.answer(r, approve.Answer{Outcome: events.ModifyWithEditor, Args: args})
}

// editedArgs checks what the editor left: the compact JSON object to
// send, or why nothing is sent.
func editedArgs(orig, edited []byte, err error) (json.RawMessage, string) {
	switch {
	case err != nil:
		return nil, "the editor failed: " + err.Error()
	case bytes.Equal(bytes.TrimSpace(orig), bytes.TrimSpace(edited)):
		return nil, "the arguments are unchanged"
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(edited, &obj); err != nil || obj == nil {
		why := "not a JSON object"
		if err != nil {
			why = "not valid JSON: " + err.Error()
		}
		return nil, "the edited arguments are " + why
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, edited); err != nil {
		return nil, "the edited arguments are not valid JSON: " + err.Error()
	}
	return buf.Bytes(), ""
}
