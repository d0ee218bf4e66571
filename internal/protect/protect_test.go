package protect

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
		{"an input redirection, not an output one", Run{Line: "node < server/index.js > out.log 2> err.txt"}, []string{"server/index.js"}, []string{"out.log", "err.txt"}},
		{"python by every name", Run{Line: "python -m a; python2 -m b; python3.11 -m c.d"}, []string{"a", "a.py", "b", "b.py", "c", "c.py"}, []string{"d"}},
		{"-m with nothing after it", Run{Line: "python3 -m"}, nil, nil},
		{"a path without an extension, not there yet", Run{Line: "sh scripts/lint"}, []string{"scripts/lint"}, nil},
		{"a file outside the workspace, not its directory", Run{Line: "bash /srv/hooks/guard.sh"}, []string{"/srv/hooks/guard.sh"}, []string{"/srv/hooks"}},
		{"the variable first on the line", Run{Line: "$CLAUDE_PROJECT_DIR/scripts/lint.sh"}, []string{"scripts/lint.sh"}, nil},
		{"the variable last on the line", Run{Line: "./scripts/lint.sh $CLAUDE_PROJECT_DIR"}, []string{"scripts/lint.sh"}, nil},
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
				p := w
				if !filepath.IsAbs(w) {
					p = filepath.Join(ws, w)
				}
				if !slices.Contains(got, p) {
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
// written, protects the workspace, the home, a temp dir, the root or the
// system's directories, which would make every change asked about and
// none remembered.
func TestFindNeverProtectsEverything(t *testing.T) {
	ws := filepath.Join(t.TempDir(), "ws")
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	f := &Finder{Workspace: ws, Home: "/home/ada", LookPath: func(string) (string, error) { return "", errors.New("no") }}
	never := []string{"/", "/home", "/home/ada", ws, filepath.Dir(ws), "/tmp", "/var/tmp", "/dev/shm", os.TempDir(), "/usr/bin/env", "/etc/passwd.d", "/usr/lib/x.py"}
	for _, line := range []string{"cd / && ls", "cat " + ws, "sh " + ws + "/", "cat ..", "ls ~", "cat $HOME", "ls /tmp/", "ls /var/tmp/ /dev/shm/",
		"echo . ./ ../..", "cat /usr/bin/env", "cat /etc/passwd.d", "python3 /usr/lib/x.py", "cat ~/", "cat /home/ada/"} {
		set, _ := f.Find([]Run{{Line: line, Dir: ws}})
		for _, p := range set.Paths {
			if slices.Contains(never, p.Path) {
				t.Errorf("%q protects %s", line, p.Path)
			}
		}
	}
	// Beneath them is fine.
	set, _ := f.Find([]Run{{Line: "sh " + ws + "/sub/x.sh /home/ada/h.sh", Dir: ws}})
	for _, want := range []string{filepath.Join(ws, "sub/x.sh"), filepath.Join(ws, "sub"), "/home/ada/h.sh"} {
		if _, ok := set.Covers(want); !ok {
			t.Errorf("%s is not protected: %v", want, set.Paths)
		}
	}
}

// TestFindNotes: a run that names no file says so, one that does not.
func TestFindNotes(t *testing.T) {
	f := &Finder{Workspace: t.TempDir(), LookPath: func(string) (string, error) { return "", errors.New("no") }}
	_, notes := f.Find([]Run{{Line: "echo hi", By: "a"}, {Line: "sh x.sh", By: "b"}})
	if len(notes) != 1 || !strings.HasPrefix(notes[0], "a: ") {
		t.Errorf("notes %q, want one for a", notes)
	}
}

// TestAScriptThroughALinkIsProtectedWhereItLeads: the policy sees a
// call's paths as named and as resolved, so both are protected.
func TestAScriptThroughALinkIsProtectedWhereItLeads(t *testing.T) {
	ws, _ := filepath.EvalSymlinks(t.TempDir())
	os.MkdirAll(filepath.Join(ws, "real"), 0o755)
	os.WriteFile(filepath.Join(ws, "real", "hook.sh"), nil, 0o755)
	os.Symlink(filepath.Join(ws, "real", "hook.sh"), filepath.Join(ws, "hook.sh"))
	f := &Finder{Workspace: ws, LookPath: func(string) (string, error) { return "", errors.New("no") }}
	set, _ := f.Find([]Run{{Line: "./hook.sh"}})
	var got []string
	for _, p := range set.Paths {
		got = append(got, p.Path)
	}
	if !slices.Equal(got, []string{filepath.Join(ws, "hook.sh"), filepath.Join(ws, "real", "hook.sh")}) {
		t.Errorf("got %v", got)
	}
}

// TestTheProjectDirIsExpandedByName: $CLAUDE_PROJECT_DIR and its braced
// form name the workspace, and a longer name that starts with it does not.
func TestTheProjectDirIsExpandedByName(t *testing.T) {
	const ref = "$CLAUDE_PROJECT_DIR"
	for in, want := range map[string]string{
		ref:                      "/w",
		ref + "/x":               "/w/x",
		"a " + ref + " b":        "a /w b",
		ref + ref:                "/w/w",
		ref + "-" + ref:          "/w-/w",
		ref + "_2/x":             ref + "_2/x",
		ref + "a " + ref:         ref + "a /w",
		ref + "z":                ref + "z",
		ref + "A":                ref + "A",
		ref + "Z":                ref + "Z",
		ref + "0":                ref + "0",
		ref + "9":                ref + "9",
		ref + "`":                "/w`",
		ref + "{":                "/w{",
		ref + "@":                "/w@",
		ref + "[":                "/w[",
		ref + "/":                "/w/",
		ref + ":":                "/w:",
		"${CLAUDE_PROJECT_DIR}x": "/wx",
	} {
		if got := (&Finder{Workspace: "/w"}).expandProjectDir(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
	// A workspace the shell would split is not put in: what follows it
	// is then not found, rather than found somewhere else (the split's
	// second word, b/b/x.sh, in the workspace).
	ws := filepath.Join(t.TempDir(), "a b")
	os.MkdirAll(ws, 0o755)
	f := &Finder{Workspace: ws, LookPath: func(string) (string, error) { return "", errors.New("no") }}
	set, _ := f.Find([]Run{{Line: ref + "/b/x.sh"}})
	for _, p := range set.Paths {
		if p.Path == filepath.Join(ws, "b", "b", "x.sh") || p.Path == filepath.Join(ws, "b", "b") {
			t.Errorf("protects %s", p.Path)
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
