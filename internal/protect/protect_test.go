package protect

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestFindDerivesWhatTheCommandsRun(t *testing.T) {
	ws := t.TempDir()
	ws, _ = filepath.EvalSymlinks(ws)
	for _, f := range []string{"scripts/format_on_save.py", "scripts/lint.sh", "lint-root.sh", "server/index.js", ".claude/hooks/no-curl.sh", "bin/tool"} {
		p := filepath.Join(ws, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lookPath := func(name string) (string, error) {
		switch name {
		case "python3", "node", "uv", "npx", "bash":
			return "/usr/bin/" + name, nil
		case "wstool":
			return filepath.Join(ws, "bin/tool"), nil
		}
		return "", errors.New("not found")
	}
	f := &Finder{Workspace: ws, Home: "/home/ada", LookPath: lookPath}
	cases := []struct {
		name     string
		run      Run
		want     []string // relative to ws
		wantNone []string
	}{
		{"an interpreter's script and its directory", Run{Line: "python3 scripts/format_on_save.py --check"},
			[]string{"scripts", "scripts/format_on_save.py"}, []string{"", "/usr/bin/python3"}},
		{"a program given by path", Run{Line: "./scripts/lint.sh && echo done"}, []string{"scripts", "scripts/lint.sh"}, nil},
		{"a script at the workspace's top, not the workspace", Run{Line: "sh lint-root.sh"}, []string{"lint-root.sh"}, []string{""}},
		{"the project directory variable", Run{Line: `"$CLAUDE_PROJECT_DIR"/.claude/hooks/no-curl.sh`}, []string{".claude/hooks", ".claude/hooks/no-curl.sh"}, nil},
		{"the braced variable", Run{Line: `bash ${GEMINI_PROJECT_DIR}/scripts/lint.sh`}, []string{"scripts/lint.sh"}, nil},
		{"a package runner", Run{Line: "npx prettier --write"}, []string{"node_modules", "package.json"}, []string{"prettier"}},
		{"a stdio server's argv", Run{Argv: []string{"node", "server/index.js"}}, []string{"server", "server/index.js"}, nil},
		{"a python module", Run{Line: "uv run python3 -m mytool.cli"}, []string{"mytool", "mytool.py"}, nil},
		{"a file not there yet", Run{Line: "python3 scripts/new_hook.py"}, []string{"scripts/new_hook.py", "scripts"}, nil},
		{"a program found in the workspace", Run{Line: "wstool run"}, []string{"bin/tool", "bin"}, nil},
		{"nested bash -c", Run{Line: `bash -c "./scripts/lint.sh x"`}, []string{"scripts/lint.sh"}, nil},
		{"an input redirection", Run{Line: "node < server/index.js"}, []string{"server/index.js"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set, _ := f.Find([]Run{{Line: c.run.Line, Argv: c.run.Argv, By: "hook"}})
			var got []string
			for _, p := range set.Paths {
				got = append(got, p.Path)
				if p.By != "hook" {
					t.Errorf("%s: by %q, want hook", p.Path, p.By)
				}
			}
			for _, w := range c.want {
				if !slices.Contains(got, filepath.Join(ws, w)) {
					t.Errorf("got %v, want %s among them", got, w)
				}
			}
			for _, w := range c.wantNone {
				p := w
				if !filepath.IsAbs(w) {
					p = filepath.Join(ws, w)
				}
				if slices.Contains(got, p) {
					t.Errorf("got %v, want no %s", got, p)
				}
			}
			if !slices.IsSorted(got) {
				t.Errorf("got %v, not sorted", got)
			}
		})
	}
}

// TestFindNeverProtectsEverything: no command line, however it is
// written, protects the workspace, the home, a temp dir or the root, which
// would make every change asked about and none remembered.
func TestFindNeverProtectsEverything(t *testing.T) {
	ws := t.TempDir()
	f := &Finder{Workspace: ws, Home: "/home/ada", LookPath: func(string) (string, error) { return "", errors.New("no") }}
	for _, line := range []string{"cd / && ls", "cat " + ws, "sh " + ws + "/", "cat ..", "ls ~", "cat $HOME", "ls /tmp", "echo . ./ ../..", "cat /usr/bin/env"} {
		set, _ := f.Find([]Run{{Line: line, Dir: ws}})
		for _, p := range set.Paths {
			if f.tooBroad(p.Path) {
				t.Errorf("%q protects %s", line, p.Path)
			}
		}
	}
}

func TestCovers(t *testing.T) {
	s := &Set{Paths: []Path{{Path: "/w/scripts", By: "a"}, {Path: "/w/x.sh", By: "b"}}}
	for p, want := range map[string]string{"/w/scripts": "a", "/w/scripts/lint.sh": "a", "/w/x.sh": "b", "/w/scripts2": "", "/w/x.sh.bak": "", "/w": ""} {
		got, ok := s.Covers(p)
		if ok != (want != "") || got.By != want {
			t.Errorf("Covers(%s) = %v %v, want %q", p, got, ok, want)
		}
	}
	var none *Set
	if _, ok := none.Covers("/w"); ok {
		t.Error("a nil set covers something")
	}
}

func FuzzFind(f *testing.F) {
	for _, s := range []string{"python3 scripts/x.py", "npx prettier", `"$CLAUDE_PROJECT_DIR"/a.sh`, "bash -c 'a; b' <x", "$(", "a=b c"} {
		f.Add(s)
	}
	ws := f.TempDir()
	fd := &Finder{Workspace: ws, Home: "/home/ada", LookPath: func(string) (string, error) { return "", errors.New("no") }}
	f.Fuzz(func(t *testing.T, line string) {
		set, _ := fd.Find([]Run{{Line: line}, {Argv: []string{line, line}}})
		for _, p := range set.Paths {
			if !filepath.IsAbs(p.Path) || filepath.Clean(p.Path) != p.Path || fd.tooBroad(p.Path) {
				t.Fatalf("%q gave %q", line, p.Path)
			}
		}
	})
}
