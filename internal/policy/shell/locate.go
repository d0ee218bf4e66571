package shell

import (
	"os"
	"os/user"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Bounds of the file-name expansion done to judge globs: a line whose
// globs need more is opaque.
const (
	maxGlobDirs    = 64
	maxGlobMatches = 512
)

// Locate turns the words of the line into the paths they name, for the
// policy: every literal argument that is not an option (the value of
// --opt=value, of=, if= too), every program given by path, every
// redirection target, and dir itself. Relative words are joined to dir
// and to every directory the line may cd into; "~", "~/x", "~user/x",
// "~+" and $HOME are expanded. A glob (cat .en[v]) adds the files it
// matches now, and, for samples (sensitive names the policy gives, such
// as .env and id_x), the path it would name if such a file existed, so
// that `cat .en[v]` is judged as `cat .env` either way. Each command's
// Paths are set; the result holds every path of the line once.
func (s *Analysis) Locate(dir, home string, samples []string) []string {
	l := locator{home: home, samples: samples, seen: map[string]bool{}}
	l.dirs = s.directories(dir, home)
	l.add(dir)
	for i := range s.Commands {
		c := &s.Commands[i]
		start := len(l.out)
		if strings.Contains(c.Argv[0], "/") {
			l.word(c.Argv[0], false)
		}
		for _, a := range c.Args {
			l.arg(a)
		}
		c.Paths = slices.Clone(l.out[start:])
		if c.Paths == nil {
			c.Paths = []string{}
		}
	}
	for _, r := range s.Redirects {
		if r.Literal && !fdRedirect(r) {
			l.word(r.Target, false)
		}
	}
	if l.tooBroad {
		s.opaque("a glob too broad to judge")
	}
	return l.out
}

func (s *Analysis) opaque(reason string) {
	if !slices.Contains(s.Opaque, reason) {
		s.Opaque = append(s.Opaque, reason)
	}
}

// fdRedirect reports whether r duplicates or closes a file descriptor
// (2>&1, >&-) rather than naming a file.
func fdRedirect(r Redirect) bool {
	return (r.Op == ">&" || r.Op == "<&") && (r.Target == "-" || isNumber(strings.TrimSuffix(r.Target, "-")))
}

// directories are the directories the line's commands may run in: dir,
// and those of every cd, pushd, env -C and sudo -D of the line, each
// taken from every directory known before it.
func (s *Analysis) directories(dir, home string) []string {
	dirs := []string{dir}
	add := func(target string) {
		for _, d := range slices.Clone(dirs) {
			p, ok := resolve(target, d, home)
			if ok && !slices.Contains(dirs, p) {
				dirs = append(dirs, p)
			}
		}
	}
	for _, t := range s.dirs {
		add(t)
	}
	for _, c := range s.Commands {
		if c.Name != "cd" && c.Name != "pushd" {
			continue
		}
		target := home
		for _, a := range c.Args {
			if !strings.HasPrefix(a, "-") {
				target = a
				break
			}
		}
		add(target)
	}
	return dirs
}

type locator struct {
	home     string
	dirs     []string
	samples  []string
	seen     map[string]bool
	out      []string
	globDirs int
	tooBroad bool
}

func (l *locator) add(p string) {
	if !l.seen[p] {
		l.seen[p] = true
		l.out = append(l.out, p)
	}
}

// arg adds the paths one argument may name. An argument with an
// expansion appears as its source text: $HOME is the one whose value is
// known; the others name nothing that can be told.
func (l *locator) arg(a string) {
	if rest, ok := homeVar(a); ok {
		l.word(l.home+rest, false)
		return
	}
	if strings.HasPrefix(a, "-") || strings.HasPrefix(a, "of=") || strings.HasPrefix(a, "if=") {
		_, value, ok := strings.Cut(a, "=")
		if !ok {
			return // a flag
		}
		a = value
	}
	if a == "" || strings.Contains(a, "://") {
		return
	}
	l.word(a, hasGlob(a))
}

// word adds the path w names from every directory, and for a glob the
// files it matches and the samples it could match.
func (l *locator) word(w string, glob bool) {
	for _, d := range l.dirs {
		p, ok := resolve(w, d, l.home)
		if !ok {
			continue
		}
		l.add(p)
		if glob {
			l.globMatches(p)
			l.globSamples(p)
		}
	}
}

var homeVarPattern = regexp.MustCompile(`^"?\$(HOME|\{HOME\})"?((/[^$` + "`" + `"'\\]*)?)"?$`)

// homeVar reads $HOME/x, "${HOME}"/x and the like, the one expansion
// whose value the executor knows.
func homeVar(w string) (string, bool) {
	m := homeVarPattern.FindStringSubmatch(w)
	if m == nil {
		return "", false
	}
	return m[2], true
}

// resolve makes w an absolute, clean path from dir, expanding a leading
// tilde as bash does. ok is false for what cannot be known (~-).
func resolve(w, dir, home string) (string, bool) {
	if strings.HasPrefix(w, "~") {
		name, rest, _ := strings.Cut(w[1:], "/")
		switch name {
		case "":
			w = home + "/" + rest
		case "+":
			w = dir + "/" + rest
		case "-":
			return "", false
		default:
			u, err := user.Lookup(name)
			if err != nil {
				break // bash leaves ~nosuchuser as it is
			}
			w = u.HomeDir + "/" + rest
		}
	}
	if !path.IsAbs(w) {
		w = path.Join(dir, w)
	}
	return path.Clean(w), true
}

// hasGlob reports whether w holds a pattern character bash expands.
func hasGlob(w string) bool {
	return strings.ContainsAny(w, "*?") || strings.Contains(w, "[") && strings.Contains(w, "]")
}

// globMatches adds the files the absolute pattern p matches now, as bash
// matches them: component by component, a leading dot matched only
// explicitly. The work is bounded.
func (l *locator) globMatches(p string) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	l.expand("/", parts)
}

func (l *locator) expand(base string, parts []string) {
	if len(parts) == 0 {
		l.add(path.Clean(base))
		return
	}
	if len(l.out) > maxGlobMatches+64 {
		l.tooBroad = true
		return
	}
	comp := parts[0]
	if !hasGlob(comp) {
		l.expand(path.Join(base, comp), parts[1:])
		return
	}
	if l.globDirs >= maxGlobDirs {
		l.tooBroad = true
		return
	}
	l.globDirs++
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		if matchName(comp, e.Name()) {
			l.expand(path.Join(base, e.Name()), parts[1:])
		}
	}
}

// matchName matches one file name against one pattern component as bash
// does by default: a leading dot must be matched by a dot.
func matchName(pattern, name string) bool {
	if strings.HasPrefix(name, ".") && !strings.HasPrefix(pattern, ".") {
		return false
	}
	ok, err := path.Match(pattern, name)
	return ok && err == nil
}

// globSamples adds, for each component of p that is a pattern with some
// literal text in it, p with that component replaced by each sample it
// matches: ~/.ss[h]/id_rsa could be ~/.ssh/id_rsa. A component of
// wildcards alone (*) is judged by the files it matches, not by samples,
// or `cat *` would be judged as reading every secret there could be.
func (l *locator) globSamples(p string) {
	parts := strings.Split(p, "/")
	for i, comp := range parts {
		if !hasGlob(comp) || strings.Trim(comp, "*?") == "" {
			continue
		}
		for _, s := range l.samples {
			if matchName(comp, s) {
				alt := slices.Clone(parts)
				alt[i] = s
				l.add(strings.Join(alt, "/"))
			}
		}
	}
}
