// Package protect finds the files whose contents toolbus runs as code of
// the settings' owner: the scripts of the hooks, of the discovery and call
// commands and of the stdio MCP servers. Such code keeps the rights its
// owner gave it (a hook's verdict counts), so a change to it is a change to
// the policy: the policy is shown these paths (input.protected) and asks a
// person about every change to them, never remembering the answer.
//
// The paths are derived from the command lines the settings give, with no
// list kept by hand: every file a command names (its program when given by
// path or found in the workspace, and each argument that names a file), the
// directory of each such file inside the workspace (a script sources and
// imports its neighbours), and for the package runners (npx and its kind)
// the workspace's node_modules and package.json, where what they run is
// found. A file that does not exist yet is protected too when its word
// looks like a path, so that creating it is asked about as well.
package protect

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/internal/policy/shell"
)

// Path is one protected file or directory (a directory covers its whole
// hierarchy) and what runs it, for the policy's reason.
type Path struct {
	// Path is absolute and clean.
	Path string `json:"path"`
	// By says what runs the code there, such as `the PreToolUse hook
	// "./lint.sh" of .claude/settings.json`.
	By string `json:"by"`
}

// Set is the protected paths of one executor, sorted by path, each path
// once. A Set is never changed once made: a new one replaces it.
type Set struct {
	Paths []Path
}

// Run is one command toolbus starts on the settings' owner's account.
type Run struct {
	// Line is a shell line (a hook, run with bash -c; a discovery or call
	// command); Argv, when Line is empty, is a program and its arguments
	// (a stdio MCP server).
	Line string
	Argv []string
	// Dir is the directory it runs in; relative words are found there.
	Dir string
	// By names it, for the policy's reason.
	By string
}

// Finder derives protected paths. Its zero value looks programs up in
// $PATH and knows no workspace; set Workspace.
type Finder struct {
	// Workspace is the executor's workspace, absolute: the directory of a
	// file in it is protected when it is not the workspace itself, and
	// $CLAUDE_PROJECT_DIR and $GEMINI_PROJECT_DIR name it, as they do for
	// a hook.
	Workspace string
	// Home is the user's home directory, for ~ and $HOME.
	Home string
	// LookPath finds a program given by name; nil means exec.LookPath.
	LookPath func(string) (string, error)
}

// systemDirs hold the programs of the system, which no tool process may
// write (internal/sandbox): naming them protected would only lengthen
// every input.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev", "/sys"}

// runners are the programs that run a package found in the workspace's
// node_modules (or fetch one into a cache when it is missing).
var runners = []string{"npx", "pnpx", "bunx", "npm", "pnpm", "yarn", "bun"}

// Find derives the protected paths of runs. A line that is not valid shell
// protects what could be read of it; Notes says which runs gave nothing.
func (f *Finder) Find(runs []Run) (*Set, []string) {
	var notes []string
	seen := map[string]int{}
	var out []Path
	add := func(p, by string) {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) || f.tooBroad(p) {
			return
		}
		for _, q := range variants(p) {
			if _, ok := seen[q]; !ok {
				seen[q] = len(out)
				out = append(out, Path{Path: q, By: by})
			}
		}
	}
	for _, r := range runs {
		if len(f.find(r, add)) == 0 {
			notes = append(notes, r.By+": names no file toolbus could find")
		}
	}
	slices.SortFunc(out, func(a, b Path) int { return strings.Compare(a.Path, b.Path) })
	return &Set{Paths: out}, notes
}

// find adds the paths of one run, and returns them.
func (f *Finder) find(r Run, add func(p, by string)) []string {
	dir := r.Dir
	if dir == "" {
		dir = f.Workspace
	}
	line := r.Line
	if line == "" {
		quoted := make([]string, len(r.Argv))
		for i, w := range r.Argv {
			quoted[i] = quote(w)
		}
		line = strings.Join(quoted, " ")
	}
	line = f.expandProjectDir(line)
	a := shell.Analyze(line)
	var found []string
	keep := func(p string) {
		add(p, r.By)
		found = append(found, p)
	}
	// A file's neighbours in the workspace are its code too: a script
	// sources and imports them.
	keepFile := func(p string) {
		keep(p)
		if d := filepath.Dir(p); within(d, f.Workspace) && d != filepath.Clean(f.Workspace) {
			keep(d)
		}
	}
	a.Locate(dir, f.Home, nil)
	for _, c := range a.Commands {
		if len(c.Argv) == 0 {
			continue
		}
		if !strings.Contains(c.Argv[0], "/") {
			if p, err := f.lookPath(c.Argv[0]); err == nil {
				if abs, err := filepath.Abs(p); err == nil {
					keepFile(abs)
				}
			}
		}
		if slices.Contains(runners, c.Name) {
			keep(filepath.Join(dir, "node_modules"))
			keep(filepath.Join(dir, "package.json"))
		}
		words := c.Args
		if strings.Contains(c.Argv[0], "/") {
			words = c.Argv
		}
		for _, p := range c.Paths {
			if _, err := os.Stat(p); err == nil || looksLikeFile(words, p) {
				keepFile(p)
			}
		}
		// python -m name runs name.py or the package name/ of the
		// directory it runs in, whatever wraps it (uv run, poetry run).
		for i, w := range c.Argv {
			if isPython(filepath.Base(w)) && i+2 < len(c.Argv) && c.Argv[i+1] == "-m" {
				mod := filepath.Join(dir, strings.Split(c.Argv[i+2], ".")[0])
				keep(mod)
				keep(mod + ".py")
			}
		}
	}
	for _, rd := range a.Redirects {
		if rd.Literal && strings.HasPrefix(rd.Op, "<") {
			p := rd.Target
			if !filepath.IsAbs(p) {
				p = filepath.Join(dir, p)
			}
			keep(p)
		}
	}
	return found
}

// looksLikeFile says whether the word that located p names a file even if
// none is there yet: it has a directory or an extension.
func looksLikeFile(words []string, p string) bool {
	base := filepath.Base(p)
	for _, w := range words {
		if strings.HasSuffix(w, base) && (strings.Contains(w, "/") || strings.Contains(strings.TrimPrefix(base, "."), ".")) {
			return true
		}
	}
	return false
}

func isPython(name string) bool {
	return name == "python" || strings.HasPrefix(name, "python2") || strings.HasPrefix(name, "python3")
}

// tooBroad says whether protecting p would ask about changes everywhere,
// or where no tool process can write anyway: the root, the home directory,
// the workspace and the directories above them, the temp directories
// themselves, and the system's directories.
func (f *Finder) tooBroad(p string) bool {
	for _, d := range []string{f.Workspace, f.Home, os.TempDir(), "/tmp", "/var/tmp", "/dev/shm"} {
		if d != "" && within(filepath.Clean(d), p) {
			return true
		}
	}
	return slices.ContainsFunc(systemDirs, func(d string) bool { return within(p, d) })
}

func (f *Finder) lookPath(name string) (string, error) {
	if f.LookPath != nil {
		return f.LookPath(name)
	}
	return exec.LookPath(name)
}

// expandProjectDir puts the workspace in place of $CLAUDE_PROJECT_DIR and
// $GEMINI_PROJECT_DIR, which name it when a hook runs, so that the paths
// after them are located. A workspace whose name the shell would read
// otherwise is left as it is: the paths behind it are then not found.
func (f *Finder) expandProjectDir(line string) string {
	if f.Workspace == "" || strings.ContainsAny(f.Workspace, " \t\n\"'`$\\*?[]{}()<>|&;#~!") {
		return line
	}
	for _, v := range []string{"CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR"} {
		line = strings.ReplaceAll(line, "${"+v+"}", f.Workspace)
		line = replaceVar(line, "$"+v, f.Workspace)
	}
	return line
}

// replaceVar replaces the variable reference ref ($NAME) in line where the
// name ends there (not $NAMEX).
func replaceVar(line, ref, value string) string {
	var b strings.Builder
	for {
		i := strings.Index(line, ref)
		if i < 0 {
			b.WriteString(line)
			return b.String()
		}
		end := i + len(ref)
		if end < len(line) && isNameChar(line[end]) {
			b.WriteString(line[:end])
			line = line[end:]
			continue
		}
		b.WriteString(line[:i])
		b.WriteString(value)
		line = line[end:]
	}
}

func isNameChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// quote makes w one shell word.
func quote(w string) string {
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// variants are p and, when a symbolic link leads elsewhere, where it
// leads: the policy sees paths as the call names them and as they
// resolve.
func variants(p string) []string {
	out := []string{p}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		out = append(out, real)
	}
	return out
}

// within says whether p is dir or beneath it; both are clean.
func within(p, dir string) bool {
	if dir == "" {
		return false
	}
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// Covers says whether p (absolute, clean) is a protected path or beneath
// one, and which.
func (s *Set) Covers(p string) (Path, bool) {
	if s == nil {
		return Path{}, false
	}
	for _, q := range s.Paths {
		if within(p, q.Path) {
			return q, true
		}
	}
	return Path{}, false
}
