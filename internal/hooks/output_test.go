package hooks

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestInterpret(t *testing.T) {
	tests := []struct {
		name     string
		ev       Event
		exit     int
		stdout   string
		stderr   string
		decision Decision
		message  string // contained in Message
		context  string
		failure  string // contained in Failure
	}{
		{"silent", Pre, 0, "", "", None, "", "", ""},
		{"plain text", Pre, 0, "checked\n", "", None, "checked", "", ""},
		{"empty object", Pre, 0, "{}\n", "", None, "", "", ""},
		{"exit 2", Pre, 2, "", "curl is not allowed\n", Deny, "curl is not allowed", "", ""},
		{"exit 2 silent", Pre, 2, "", "", Deny, "exited with status 2", "", ""},
		{"exit 2 wins over JSON", Pre, 2, `{"decision":"allow"}`, "no", Deny, "no", "", ""},
		{"exit 1", Pre, 1, "", "boom\n", None, "", "", "exited with status 1: boom"},
		{"exit 127", Pre, 127, "", "bash: nope: command not found", None, "", "", "status 127"},
		// Claude Code
		{"permission deny", Pre, 0, `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no curl"}}`, "", Deny, "no curl", "", ""},
		{"permission ask", Pre, 0, `{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"sure?"}}`, "", Ask, "sure?", "", ""},
		{"permission allow", Pre, 0, `{"hookSpecificOutput":{"permissionDecision":"allow","permissionDecisionReason":"fine"}}`, "", Allow, "fine", "", ""},
		{"legacy block", Pre, 0, `{"decision":"block","reason":"legacy no"}`, "", Deny, "legacy no", "", ""},
		{"legacy approve", Pre, 0, `{"decision":"approve","reason":"ok"}`, "", Allow, "ok", "", ""},
		{"deny beats allow", Pre, 0, `{"decision":"approve","hookSpecificOutput":{"permissionDecision":"deny","permissionDecisionReason":"no"}}`, "", Deny, "no", "", ""},
		{"ask beats allow", Pre, 0, `{"decision":"allow","hookSpecificOutput":{"permissionDecision":"ask"}}`, "", Ask, "", "", ""},
		{"deny without reason", Pre, 0, `{"decision":"deny"}`, "", Deny, "gave no reason", "", ""},
		{"continue false", Pre, 0, `{"continue":false,"stopReason":"stop everything"}`, "", Deny, "stop everything", "", ""},
		{"continue true", Pre, 0, `{"continue":true}`, "", None, "", "", ""},
		// Gemini CLI
		{"gemini deny", Pre, 0, `{"decision":"deny","reason":"gemini no"}`, "", Deny, "gemini no", "", ""},
		{"gemini ask", Pre, 0, `{"decision":"ask","reason":"check"}`, "", Ask, "check", "", ""},
		{"case of the word", Pre, 0, `{"decision":"Deny","reason":"x"}`, "", Deny, "x", "", ""},
		{"post context", Post, 0, `{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"lint: 2 warnings"}}`, "", None, "", "lint: 2 warnings", ""},
		{"post top context", Post, 0, `{"additionalContext":"top"}`, "", None, "", "top", ""},
		{"post both contexts", Post, 0, `{"additionalContext":"b","hookSpecificOutput":{"additionalContext":"a"}}`, "", None, "", "a\nb", ""},
		{"post block", Post, 0, `{"decision":"block","reason":"tests fail"}`, "", Deny, "tests fail", "", ""},
		{"post tool_output", Post, 0, `{"hookSpecificOutput":{"tool_output":"x"}}`, "", None, "", "", ""},
		// What fails, and so blocks a pre hook's call.
		{"bad json", Pre, 0, `{"decision":"deny"`, "", None, "", "", "printed JSON that does not read"},
		{"text then json", Pre, 0, "checking...\n{\"decision\":\"deny\"}", "", None, "", "", "printed text around its JSON"},
		{"two objects", Pre, 0, `{"decision":"deny"} {"decision":"allow"}`, "", None, "", "", "does not read"},
		{"duplicate name", Pre, 0, `{"decision":"deny","decision":"allow"}`, "", None, "", "", "does not read"},
		{"wrong type", Pre, 0, `{"decision":true}`, "", None, "", "", "does not read"},
		{"continue not bool", Pre, 0, `{"continue":"false"}`, "", None, "", "", "does not read"},
		{"unknown decision", Pre, 0, `{"decision":"maybe"}`, "", None, "", "", `decision "maybe"`},
		{"legacy word as permission", Pre, 0, `{"hookSpecificOutput":{"permissionDecision":"block"}}`, "", None, "", "", `permissionDecision "block"`},
		{"updated input", Pre, 0, `{"hookSpecificOutput":{"permissionDecision":"allow","updatedInput":{"command":"ls"}}}`, "", None, "", "", "change the call's arguments"},
		{"gemini tool_input", Pre, 0, `{"hookSpecificOutput":{"tool_input":{"command":"ls"}}}`, "", None, "", "", "change the call's arguments"},
		{"null updated input", Pre, 0, `{"hookSpecificOutput":{"updatedInput":null}}`, "", None, "", "", ""},
		{"invalid utf-8", Pre, 0, "{\"reason\":\"\xff\",\"decision\":\"deny\"}", "", None, "", "", "does not read"},
		{"other field names ignored", Pre, 0, `{"Decision":"allow","decision":"deny","extra":[1,2]}`, "", Deny, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Interpret(tt.ev, tt.exit, []byte(tt.stdout), []byte(tt.stderr))
			if o.Decision != tt.decision || !strings.Contains(o.Message, tt.message) || o.Context != tt.context ||
				(tt.failure == "") != (o.Failure == "") || !strings.Contains(o.Failure, tt.failure) || o.ExitCode != tt.exit {
				t.Errorf("got %+v\nwant decision %v, message with %q, context %q, failure with %q", o, tt.decision, tt.message, tt.context, tt.failure)
			}
		})
	}
}

func TestInterpretCaps(t *testing.T) {
	long := strings.Repeat("é", MaxMessage*3)
	o := Interpret(Pre, 2, nil, []byte(long))
	if n := utf8.RuneCountInString(o.Message); n > MaxMessage+1 || !utf8.ValidString(o.Message) {
		t.Errorf("message of %d characters", n)
	}
	o = Interpret(Post, 0, []byte(`{"additionalContext":"`+strings.Repeat("x", MaxContext*2)+`"}`), nil)
	if n := utf8.RuneCountInString(o.Context); n > MaxContext+1 {
		t.Errorf("context of %d characters", n)
	}
}

// FuzzInterpret: whatever a hook prints, reading it never panics, a
// failure carries no decision, what it yields is valid UTF-8 within the
// caps, and exit codes other than 0 and 2 always fail.
func FuzzInterpret(f *testing.F) {
	for _, s := range []string{
		"", "{}", "plain", `{"decision":"deny","reason":"r"}`, `{"decision":"approve"}`,
		`{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"why","additionalContext":"ctx"}}`,
		`{"continue":false,"stopReason":"s"}`, `{"hookSpecificOutput":{"updatedInput":{"a":1}}}`,
		"text\n{\"decision\":\"deny\"}", `{"decision":"deny","decision":"allow"}`, "{\"reason\":\"\xff\"}", `{"additionalContext":"\u0000"}`,
	} {
		f.Add(0, []byte(s), []byte(""))
	}
	f.Add(2, []byte(""), []byte("blocked"))
	f.Add(1, []byte("{}"), []byte("\xffcrash"))
	f.Fuzz(func(t *testing.T, exit int, stdout, stderr []byte) {
		for _, ev := range []Event{Pre, Post} {
			o := Interpret(ev, exit, stdout, stderr)
			if o.Failure != "" && o.Decision != None {
				t.Fatalf("failed with a decision: %+v", o)
			}
			if exit != 0 && exit != 2 && o.Failure == "" {
				t.Fatalf("exit %d did not fail: %+v", exit, o)
			}
			if exit == 2 && o.Decision != Deny {
				t.Fatalf("exit 2 did not deny: %+v", o)
			}
			for _, s := range []string{o.Message, o.Context} {
				if !utf8.ValidString(s) {
					t.Fatalf("invalid UTF-8 in %+v", o)
				}
			}
			if utf8.RuneCountInString(o.Message) > MaxMessage+1 || utf8.RuneCountInString(o.Context) > MaxContext+1 {
				t.Fatalf("over the caps: %d, %d", utf8.RuneCountInString(o.Message), utf8.RuneCountInString(o.Context))
			}
			if o.Decision == Deny && o.Message == "" {
				t.Fatalf("a deny without a message: %+v", o)
			}
		}
	})
}
