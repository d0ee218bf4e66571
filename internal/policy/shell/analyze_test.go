package shell

import (
	"slices"
	"testing"
)

func TestAnalyze(t *testing.T) {
	s := Analyze(`FOO=1 sudo -u bob /usr/bin/git -C "$DIR" status 2>/dev/null; bash -c 'echo hi' > out.txt`)
	if len(s.Commands) != 3 {
		t.Fatalf("commands: %+v", s.Commands)
	}
	git, bash, echo := s.Commands[0], s.Commands[1], s.Commands[2]
	if git.Name != "git" || git.Literal || git.Args[1] != `"$DIR"` {
		t.Errorf("git: %+v", git)
	}
	if bash.Name != "bash" || len(bash.Redirects) != 1 || bash.Redirects[0] != (Redirect{Op: ">", Target: "out.txt", Literal: true}) {
		t.Errorf("bash: %+v", bash)
	}
	if echo.Name != "echo" || echo.Text != "echo hi" {
		t.Errorf("nested echo: %+v", echo)
	}
	got := s.Locate("/w", "/h", nil)
	for _, want := range []string{"/w", "/usr/bin/git", "/w/status", "/w/hi", "/dev/null", "/w/out.txt"} {
		if !slices.Contains(got, want) {
			t.Errorf("paths %v lack %s", got, want)
		}
	}
	if !slices.Equal(git.Wrappers, []string{"sudo"}) || !slices.Equal(git.Argv, []string{"/usr/bin/git", "-C", `"$DIR"`, "status"}) {
		t.Errorf("git: %+v", git)
	}
	if !slices.Contains(s.Opaque, "an assignment") {
		t.Errorf("FOO=1 does not make the line opaque: %v", s.Opaque)
	}
}

// FuzzAnalyze: command lines come from models. Analysing any line, and
// locating the paths its words name, never panics, and every command found
// has a program to run.
func FuzzAnalyze(f *testing.F) {
	for _, s := range []string{"ls -la", "rm -rf /", `\rm -rf "$HOME"`, "a && b || c; d | e", "f(){ f|f& }; f", "echo $'\\x41'", "cat <<EOF\nx\nEOF", "bash -c 'eval \"rm -rf /\"'", "\"unterminated"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		s := Analyze(line)
		s.Locate("/w", "/h", []string{".env"})
		for _, c := range s.Commands {
			if len(c.Argv) == 0 || c.Name == "" {
				t.Fatalf("%q: a command without a program: %+v", line, c)
			}
		}
	})
}
