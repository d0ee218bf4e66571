package shell

import (
	"slices"
	"strings"
	"testing"
)

// TestWhatTheAnalyserCannotSeeIsOpaque: lines whose commands depend on
// what the analyser cannot read — a script file, a directory or script
// held in a variable — are opaque, with the reason; the same lines with
// literal words are understood. A policy must not allow an opaque line on
// the strength of its commands, so a line called understood here is one
// an allowlist could cover.
func TestWhatTheAnalyserCannotSeeIsOpaque(t *testing.T) {
	for _, tt := range []struct{ line, reason string }{
		{"bash s.sh", "a shell runs a script file"},
		{"sh ./s.sh arg", "a shell runs a script file"},
		{"ls && bash -x s.sh", "a shell runs a script file"},
		{"bash", "a shell reads its script from standard input"},
		{`cd "$X" && ls`, "cd to a directory not known"},
		{"cd $X; cat k", "cd to a directory not known"},
		{`pushd "$D"`, "cd to a directory not known"},
		{"cd - && ls", "cd to a directory not known"},
		{"popd && ls", "popd goes back to a directory not known"},
		{`eval "$X"`, "eval of words that are not literal"},
		{"eval $(cat cmd.txt)", "eval of words that are not literal"},
		{`eval ls "$X"`, "eval of words that are not literal"},
		{"source s.sh", "a script file is sourced"},
		{". ./s.sh", "a script file is sourced"},
	} {
		s := Analyze(tt.line)
		if !slices.Contains(s.Opaque, tt.reason) {
			t.Errorf("%q: opaque %q, want it to hold %q", tt.line, s.Opaque, tt.reason)
		}
	}
	// A script in a variable is read as a command whose name is not
	// literal: not opaque, but not understood either.
	for _, line := range []string{`bash -c "$X"`, `bash -c $X`, `sh -c "ls $X"`} {
		if understood(Analyze(line)) {
			t.Errorf("%q is understood: %+v", line, Analyze(line))
		}
	}
	for _, tt := range []struct{ line, runs string }{
		{"bash -c 'ls -la'", "ls"},
		{"cd /tmp && ls", "ls"},
		{"cd src; cat k", "cat"},
		{"eval 'ls -la'", "ls"},
		{"eval ls -la", "ls"},
	} {
		s := Analyze(tt.line)
		if !understood(s) {
			t.Errorf("%q: opaque %q, parse error %q, commands %+v; want it understood", tt.line, s.Opaque, s.ParseError, s.Commands)
		}
		var names []string
		for _, c := range s.Commands {
			names = append(names, c.Name)
		}
		if !slices.Contains(names, tt.runs) {
			t.Errorf("%q: commands %s, want %s among them", tt.line, strings.Join(names, " "), tt.runs)
		}
	}
}

// understood is what the default policy asks of a line before an
// allowlist may cover it: it parses, nothing in it is opaque, and every
// command is literal.
func understood(s Analysis) bool {
	if s.ParseError != "" || len(s.Opaque) > 0 {
		return false
	}
	for _, c := range s.Commands {
		if !c.Literal {
			return false
		}
	}
	return true
}
